"""os.fork() with a live runtime. The documented outcome: in the child every offload call,
`Offload()` included, raises ForkedError at once (the inherited runtime's threads did not
survive the fork, so using it or tearing it down could wait forever); finalizers there do
nothing, and the child's exit skips offload's exit hook. The parent is unaffected. A child
forked before any runtime started may start its own."""

import pytest

from conftest import run_script

FORK_SCRIPT = """
import os, sys, threading, time
import numpy as np
import offload
rt = offload.Offload()
dev = rt.device("host")
buf = dev.upload(np.arange(1000, dtype=np.float32))
view = np.asarray(memoryview(buf))
k = offload.Program.from_source(SAXPY_C, "c", on_teardown=lambda m: None).load(dev).kernel("saxpy")
q = dev.queue()
stop = False
def busy():                      # the parent keeps its queue busy across the fork
    while not stop:
        q.launch(k, 1000, buf, buf, 1.0, 1000)
        q.sync()
t = threading.Thread(target=busy); t.start()
q2 = dev.queue()
q2.enqueue_host_fn(lambda: time.sleep(0.05))
time.sleep(0.02)
pid = os.fork()
if pid == 0:
    start = time.monotonic()
    outcomes = []
    for call in (lambda: q.sync(), lambda: buf.read(), lambda: dev.alloc(8),
                 lambda: offload.Offload(), lambda: rt.shutdown(), lambda: q2.enqueue_host_fn(print)):
        try:
            call()
            outcomes.append("ok")
        except offload.ForkedError:
            outcomes.append("forked")
    took = time.monotonic() - start
    assert view[0] == 0.0 or True     # the inherited memory itself is readable
    del buf, q, q2, k, view, dev, rt  # finalizers in the child: no-ops
    import gc; gc.collect()
    print("CHILD", outcomes, took < 1.0, flush=True)
    EXIT
else:
    stop = True; t.join()
    _, status = os.waitpid(pid, 0)
    q.launch(k, 1000, buf, buf, 1.0, 1000); q.sync()   # the parent goes on
    print("PARENT", os.waitstatus_to_exitcode(status), rt.shutdown() is False or True)
"""


@pytest.mark.parametrize("exit_how", ["sys.exit(0)", "os._exit(0)", "pass"])
def test_fork_child_gets_forked_error_parent_unaffected(exit_how):
    for _ in range(5):
        r = run_script(FORK_SCRIPT.replace("EXIT", exit_how), timeout=20)
        out = r.stdout.decode()
        assert r.returncode == 0, r.stderr.decode()
        assert r.stderr == b""
        assert "CHILD ['forked', 'forked', 'forked', 'forked', 'forked', 'forked'] True" in out, out
        assert "PARENT 0 True" in out, out


def test_child_forked_before_any_runtime_starts_its_own():
    r = run_script(
        """
        import os
        import offload
        pid = os.fork()
        if pid == 0:
            with offload.Offload() as rt:
                b = rt.device("host").alloc(8); b.fill(3)
                assert b.read() == bytes([3]) * 8
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print("CHILD EXIT", os.waitstatus_to_exitcode(status))
        """,
        timeout=20,
    )
    assert r.returncode == 0, r.stderr.decode()
    assert "CHILD EXIT 0" in r.stdout.decode()
