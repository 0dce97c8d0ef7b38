"""The API tour: runtime, devices, buffers, programs, launches, queues, events, errors."""

import numpy as np
import pytest

import offload
from conftest import SAXPY_WGSL, fresh_c


def test_context_manager_and_shutdown_twice():
    with offload.Offload() as rt:
        assert not rt.is_shut_down
        assert any(d.backend == "host" for d in rt.devices())
    assert rt.is_shut_down
    assert rt.shutdown() is False  # a second shutdown does nothing
    with pytest.raises(offload.ShutDownError):
        rt.devices()


def test_handles_after_shutdown_raise_shut_down():
    rt = offload.Offload()
    dev = rt.device("host")
    buf = dev.alloc(64)
    q = dev.queue()
    assert rt.shutdown() is True
    with pytest.raises(offload.ShutDownError, match="has been shut down"):
        buf.read()
    with pytest.raises(offload.ShutDownError):
        q.sync()
    with pytest.raises(offload.ShutDownError):
        dev.alloc(8)


def test_error_hierarchy_mirrors_rust():
    assert issubclass(offload.ShutDownError, offload.OffloadError)
    assert issubclass(offload.CompileError, offload.OffloadError)
    assert issubclass(offload.ForkedError, offload.OffloadError)


def test_device_info_is_typed(host):
    info = host.info()
    assert info.backend == "host"
    assert isinstance(info.memory, int) and info.memory > 0
    assert isinstance(info.compute_units, int) and info.compute_units >= 1
    assert isinstance(info.name, str)


def test_buffer_copies_and_fill(host):
    buf = host.alloc(16)
    buf.write(b"\x01" * 8, offset=8)
    buf.fill(7, offset=0, nbytes=8)
    assert buf.read() == b"\x07" * 8 + b"\x01" * 8
    out = bytearray(16)
    buf.read_into(out)
    assert bytes(out) == buf.read()
    with pytest.raises(offload.InvalidArgumentError):
        buf.write(b"x" * 17)


def test_saxpy_on_host(host):
    n = 1000
    x = host.upload(np.arange(n, dtype=np.float32))
    y = host.zeros(n, np.float32)
    k = offload.Program.from_source(fresh_c(), "c").load(host).kernel("saxpy")
    assert k.params == ["buffer", "buffer", "f32", "u32"]
    q = host.queue()
    q.launch(k, n, x, y, 2.0, n)
    q.sync()
    np.testing.assert_array_equal(y.numpy(), 2.0 * np.arange(n, dtype=np.float32))
    # NumPy scalars keep their own type; Python numbers take the declared one.
    q.launch(k, n, x, y, np.float32(1.0), np.uint32(n))
    q.sync()
    np.testing.assert_array_equal(y.numpy(), 3.0 * np.arange(n, dtype=np.float32))


def test_launch_arguments_are_checked_like_rust(host):
    k = offload.Program.from_source(fresh_c(), "c").load(host).kernel("saxpy")
    x, y = host.zeros(4, np.float32), host.zeros(4, np.float32)
    q = host.queue()
    # The same message the README shows for Rust.
    with pytest.raises(offload.InvalidArgumentError, match="argument 4 of `saxpy` is a u32; got an f32"):
        q.launch(k, 4, x, y, 2.0, np.float32(4))
    with pytest.raises(offload.InvalidArgumentError, match="takes 4 arguments"):
        q.launch(k, 4, x, y, 2.0)
    with pytest.raises(offload.InvalidArgumentError, match="argument 4 of `saxpy` is a u32"):
        q.launch(k, 4, x, y, 2.0, -1)
    with pytest.raises(offload.InvalidArgumentError, match="argument 1 of `saxpy` is a buffer"):
        q.launch(k, 4, 1.0, y, 2.0, 4)
    with pytest.raises(offload.InvalidArgumentError, match="expected an offload.Buffer"):
        q.launch(k, 4, "x", y, 2.0, 4)


def test_compile_error_has_log(host):
    p = offload.Program.from_source("this is not C", "c")
    with pytest.raises(offload.CompileError, match="compile failed"):
        p.load(host)


def test_bad_image_and_missing_kernel(host):
    with pytest.raises(offload.InvalidBinaryError):
        offload.Program(b"garbage").load(host)
    m = offload.Program.from_source(fresh_c(), "c").load(host)
    with pytest.raises(offload.SymbolNotFoundError, match="saxpy"):
        m.kernel("nope")
    assert sorted(m.kernels()) == ["noop", "saxpy"]


def test_setup_and_teardown_run_once_per_path(host):
    events = []
    src = fresh_c()

    def prog():
        return offload.Program.from_source(
            src, "c", on_setup=lambda m: events.append("setup"), on_teardown=lambda m: events.append("teardown")
        )

    # 1. unload()
    m = prog().load(host)
    m.unload()
    assert events == ["setup", "teardown"]
    # 2. the Program collected (and its modules' handles)
    events.clear()
    p = prog()
    m = p.load(host)
    del p, m
    import gc

    gc.collect()
    assert events == ["setup", "teardown"]
    # 3. runtime shutdown
    events.clear()
    rt = offload.Offload()
    p = prog()
    p.load(rt.device("host"))
    # `host`'s runtime (the fixture) is the same generation: only the last shutdown tears down.
    rt.shutdown()
    del p
    gc.collect()
    assert events == ["setup", "teardown"]


def test_failing_setup_is_callback_error(host):
    def boom(m):
        raise RuntimeError("no weights")

    p = offload.Program.from_source(fresh_c(), "c", on_setup=boom)
    with pytest.raises(offload.CallbackError, match="no weights"):
        p.load(host)


def test_queue_ops_and_events(host):
    a, b = host.alloc(1024), host.alloc(1024)
    q1, q2 = host.queue(), host.queue()
    q1.fill(a, 0, 1024, (0xDEADBEEF).to_bytes(4, "little"))
    ev = q1.record()
    q2.wait(ev)
    q2.copy(a, 0, b, 0, 1024)
    seen = []
    q2.enqueue_host_fn(lambda: seen.append("copied"))
    assert q2.read(b, 0, 4) == (0xDEADBEEF).to_bytes(4, "little")
    q2.sync()
    assert seen == ["copied"]
    assert q2.is_idle()
    ev.sync()
    assert ev.is_complete()
    e2 = q1.record()
    assert e2.elapsed_since(ev) >= 0.0
    q1.write(a, b"\x05" * 4, 8)
    q1.sync()
    assert a.read(8, 4) == b"\x05" * 4


def test_host_function_exception_comes_back_from_sync(host):
    q = host.queue()
    q.enqueue_host_fn(lambda: 1 / 0)
    with pytest.raises(offload.CallbackError) as info:
        q.sync()
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    q.sync()  # reported once


def test_wgsl_on_vulkan(rt):
    try:
        gpu = rt.device("vulkan")
    except offload.OffloadError as e:
        pytest.skip(f"no Vulkan device: {e}")
    n = 1000
    m = offload.Program.from_source(SAXPY_WGSL, "wgsl").load(gpu)
    k = m.kernel("saxpy")
    assert k.is_verified
    x = gpu.upload(np.arange(n, dtype=np.float32))
    y = gpu.zeros(n, np.float32)
    q = gpu.queue()
    q.launch(k, ((n + 63) // 64, 64), x, y, 2.0, n)
    q.sync()
    np.testing.assert_array_equal(y.numpy(), 2.0 * np.arange(n, dtype=np.float32))
    # Vulkan memory has no zero-copy view.
    with pytest.raises(offload.UnsupportedError):
        memoryview(y)
    # A Python host function on a Vulkan queue.
    seen = []
    q.enqueue_host_fn(lambda: seen.append(1))
    q.sync()
    assert seen == [1]


def test_ipc_endpoint_in_process(host):
    rt = offload.Offload()
    try:
        a, b = rt.ipc_endpoint(), rt.ipc_endpoint()
        peer = a.connect(b.name)
        buf = host.alloc(64, exportable=True)
        buf.write(b"\x2a" * 64)
        a.send(peer, buf, tag=9)
        got = b.recv(timeout=5)
        assert got is not None
        _, tag, view = got
        assert tag == 9 and view.read() == b"\x2a" * 64
        del view
        a.close()
        b.close()
    finally:
        rt.shutdown()


def test_oversized_reads_are_refused_before_allocating(host):
    buf = host.alloc(16)
    with pytest.raises(offload.InvalidArgumentError, match="16-byte buffer"):
        buf.read(0, 1 << 60)
    with pytest.raises(offload.InvalidArgumentError, match="16-byte buffer"):
        host.queue().read(buf, 0, 1 << 60)
