"""L8 from Python: every error is delivered exactly once. A host function's exception goes
to its queue's next `sync`; if nobody syncs it, to `Offload.shutdown()`; if the runtime ends
at interpreter exit, it is printed there, as Python prints an exception it had to ignore;
`offload.take_unreported_errors()` gives those of runtimes that ended without a call to
return them."""

import offload

from conftest import run_script


def test_shutdown_raises_what_nobody_synced():
    r = run_script(
        """
        import time, offload
        rt = offload.Offload()
        q = rt.device("host").queue()
        q.enqueue_host_fn(lambda: 1 / 0)
        time.sleep(0.1)
        try:
            rt.shutdown()
        except offload.CallbackError as e:
            assert "ZeroDivisionError" in str(e), e
            print("raised")
        """
    )
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().strip() == "raised"
    assert r.stderr == b"", r.stderr.decode()


def test_an_unsynced_exception_is_printed_at_exit():
    r = run_script(
        """
        import time, offload
        rt = offload.Offload()
        q = rt.device("host").queue()
        q.enqueue_host_fn(lambda: 1 / 0)
        time.sleep(0.1)
        """
    )
    assert r.returncode == 0, r.stderr.decode()
    err = r.stderr.decode()
    assert "Exception ignored in" in err, err
    assert "offload runtime shut down at interpreter exit" in err, err
    assert "CallbackError" in err and "ZeroDivisionError" in err, err


def test_take_unreported_errors_is_there_and_empty():
    assert offload.take_unreported_errors() == []
