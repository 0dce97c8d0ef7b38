"""Zero-copy with NumPy: DLPack and the buffer protocol share memory both ways, and a view
keeps its memory valid (pinning the runtime) past shutdown."""

import gc

import numpy as np
import pytest

import offload
from conftest import run_script


def test_np_from_dlpack_shares_memory(host):
    buf = host.upload(np.arange(16, dtype=np.float32))
    a = np.from_dlpack(buf)
    assert a.dtype == np.float32 and a.shape == (16,)
    a[3] = 42.0  # through NumPy ...
    assert np.frombuffer(buf.read(), dtype=np.float32)[3] == 42.0  # ... seen by offload
    buf.write(np.full(16, 7.0, dtype=np.float32))  # through offload ...
    assert (a == 7.0).all()  # ... seen by NumPy: no copy
    assert buf.__dlpack_device__() == (1, 0)


def test_buffer_protocol_shares_memory_with_shape(host):
    buf = host.empty((4, 8), np.int32)
    m = memoryview(buf)
    assert m.format == "i" and m.shape == (4, 8) and not m.readonly
    a = np.asarray(buf)  # NumPy through the buffer protocol
    a[:] = np.arange(32, dtype=np.int32).reshape(4, 8)
    assert np.frombuffer(buf.read(), dtype=np.int32)[31] == 31
    assert buf.numpy().base is not None  # numpy() on the host is a view too


def test_offload_from_dlpack_shares_memory_on_the_host(host):
    src = np.arange(8, dtype=np.float64)
    buf = offload.from_dlpack(src, device=host)
    np.testing.assert_array_equal(buf.numpy(), src)
    src[2] = 99.0  # through NumPy ...
    assert np.frombuffer(buf.read(), dtype=np.float64)[2] == 99.0  # ... seen by offload
    buf.write(np.full(8, 7.0))  # through offload ...
    assert (src == 7.0).all()  # ... seen by NumPy: no copy
    assert buf.numpy().dtype == np.float64 and buf.numpy().shape == (8,)
    assert offload.from_dlpack(buf) is buf  # an offload buffer comes back as itself
    assert offload.from_dlpack(src, device=host, copy=False).size == 64


def test_offload_from_dlpack_keeps_the_array_alive(host):
    src = np.arange(1 << 16, dtype=np.int32)
    buf = offload.from_dlpack(src, device=host)
    del src
    gc.collect()
    assert np.frombuffer(buf.read(), dtype=np.int32)[65535] == 65535  # still valid
    with pytest.raises(ValueError):  # NumPy refuses to resize an array a buffer holds
        a = np.zeros(4)
        b = offload.from_dlpack(a, device=host)
        a.resize(8)
    del b


def test_offload_from_dlpack_copies_what_it_cannot_share(host):
    ro = np.arange(8, dtype=np.float32)
    ro.flags.writeable = False
    buf = offload.from_dlpack(ro, device=host)  # read-only: a copy
    buf.write(np.zeros(8, dtype=np.float32))
    assert ro[3] == 3.0
    with pytest.raises(offload.UnsupportedError):
        offload.from_dlpack(ro, device=host, copy=False)
    strided = np.arange(16, dtype=np.float32)[::2]
    with pytest.raises(offload.UnsupportedError):
        offload.from_dlpack(strided, device=host, copy=False)
    shared = np.arange(4, dtype=np.float32)
    copied = offload.from_dlpack(shared, device=host, copy=True)
    copied.write(np.zeros(4, dtype=np.float32))
    assert shared[1] == 1.0  # copy=True copies even where sharing was possible


def test_views_pin_the_runtime_past_shutdown():
    rt = offload.Offload()
    buf = rt.device("host").upload(np.arange(1000, dtype=np.float32))
    a = np.from_dlpack(buf)
    m = np.asarray(memoryview(buf))
    with pytest.raises(BufferError):
        buf.free()  # views are alive
    before = offload.host_stats()["deinitialised"]
    rt.shutdown()
    # The memory is still valid: the views hold the runtime.
    assert a[999] == 999.0 and m[1] == 1.0
    a[0] = 5.0
    assert m[0] == 5.0
    del a, m
    gc.collect()
    assert buf.exports == 0
    assert offload.host_stats()["deinitialised"] == before + 1
    with pytest.raises(offload.ShutDownError):
        buf.read()


def test_non_host_memory_has_no_view(rt):
    try:
        gpu = rt.device("vulkan")
    except offload.OffloadError as e:
        pytest.skip(f"no Vulkan device: {e}")
    buf = gpu.alloc(64)
    with pytest.raises(offload.UnsupportedError):
        np.from_dlpack(buf)
    assert buf.numpy().nbytes == 64  # a copy


def test_the_shutdown_gives_an_adopted_array_back():
    rt = offload.Offload()
    a = np.zeros(4)
    buf = offload.from_dlpack(a, device=rt.device("host"))
    with pytest.raises(ValueError):  # viewed by the buffer: NumPy will not resize it
        a.resize(8)
    rt.shutdown()
    a.resize(8)  # the shutdown released the buffer, and its view
    with pytest.raises(offload.ShutDownError):
        buf.read()


def test_interpreter_exit_with_adopted_arrays_is_quiet():
    r = run_script(
        """
import numpy as np, offload
rt = offload.Offload()
host = rt.device("host")
kept = [offload.from_dlpack(np.arange(1000, dtype=np.float32), device=host) for _ in range(8)]
q = host.queue()
q.enqueue_host_fn(lambda: None)
# exits with the runtime, the buffers and their arrays alive
"""
    )
    assert r.returncode == 0, r.stderr.decode()
    assert r.stderr == b""
