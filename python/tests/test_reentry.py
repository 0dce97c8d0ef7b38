"""Python code that offload runs — host functions, setup and teardown callbacks — calling
offload again (L6), with the GIL in play: each scenario runs in a fresh interpreter under a
watchdog (a deadlock fails the test by timeout instead of hanging the suite)."""

import pytest

from conftest import run_script

SCENARIOS = {
    # A host function syncs another queue (busy with a kernel) and allocates.
    "sync_other_queue_and_alloc": """
        dev = rt.device("host")
        k = offload.Program.from_source(SAXPY_C, "c").load(dev).kernel("saxpy")
        x = dev.upload(np.ones(1 << 16, dtype=np.float32)); y = dev.zeros(1 << 16, np.float32)
        q, other = dev.queue(), dev.queue()
        done = []
        def hf():
            other.launch(k, 1 << 16, x, y, 2.0, 1 << 16)
            other.sync()
            b = dev.alloc(4096); b.fill(1)
            done.append(b.read(0, 1))
        q.enqueue_host_fn(hf)
        q.sync()
        assert done == [b"\\x01"], done
        assert y.numpy()[0] == 2.0
    """,
    # A host function syncing its own queue gets the documented InvalidArgumentError.
    "sync_own_queue": """
        q = rt.device("host").queue()
        seen = []
        def hf():
            try:
                q.sync()
            except offload.InvalidArgumentError as e:
                seen.append("refused")
        q.enqueue_host_fn(hf)
        q.sync()
        assert seen == ["refused"], seen
    """,
    # Another Python thread holds the GIL busily while host functions need it.
    "gil_contention": """
        import threading
        q = rt.device("host").queue()
        stop = []
        def spin():
            while not stop:
                sum(range(1000))
        t = threading.Thread(target=spin); t.start()
        hits = []
        for i in range(200):
            q.enqueue_host_fn(lambda i=i: hits.append(i))
        q.sync()
        stop.append(1); t.join()
        assert hits == list(range(200))
    """,
    # Callbacks that use offload: setup allocates, teardown syncs a queue.
    "setup_teardown_use_offload": """
        dev = rt.device("host")
        q = dev.queue()
        seen = []
        p = offload.Program.from_source(SAXPY_C, "c",
            on_setup=lambda m: seen.append(dev.alloc(16).size),
            on_teardown=lambda m: seen.append(q.sync()))
        p.load(dev).unload()
        assert seen == [16, None], seen
    """,
    # The host function holds the last runtime reference, and drops it.
    "host_fn_drops_last_reference": """
        q = rt.device("host").queue()
        holder = [rt]
        del rt
        import builtins
        builtins.__dict__.pop("rt", None)
        globals().pop("rt", None)
        q.enqueue_host_fn(lambda: holder.clear())
        try:
            q.sync()
        except offload.ShutDownError:
            pass
    """,
    # A host function on a Vulkan queue (run on the calling thread) calling offload.
    "vulkan_host_fn": """
        try:
            gpu = rt.device("vulkan")
        except offload.OffloadError:
            gpu = None
        if gpu is not None:
            q, other = gpu.queue(), gpu.queue()
            b = gpu.alloc(64)
            seen = []
            def hf():
                other.fill(b, 0, 64, b"\\x07"); other.sync(); seen.append(b.read(0, 1))
            q.enqueue_host_fn(hf)
            q.sync()
            assert seen == [b"\\x07"], seen
    """,
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_reentry_without_deadlock(name):
    import textwrap

    body = textwrap.dedent(SCENARIOS[name])
    code = "import numpy as np\nimport offload\nrt = offload.Offload()\n" + body + "\nprint('OK')\n"
    for _ in range(3):
        r = run_script(code, timeout=20)
        assert r.returncode == 0, r.stderr.decode()
        assert r.stdout.decode().strip().endswith("OK")
        assert r.stderr == b""
