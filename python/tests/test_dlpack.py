"""Zero-copy with NumPy: DLPack and the buffer protocol share memory both ways, and a view
keeps its memory valid (pinning the runtime) past shutdown."""

import gc

import numpy as np
import pytest

import offload


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


def test_offload_from_dlpack(host):
    src = np.arange(8, dtype=np.float64)
    buf = offload.from_dlpack(src, device=host)
    np.testing.assert_array_equal(buf.numpy(), src)
    assert offload.from_dlpack(buf) is buf  # an offload buffer comes back as itself
    with pytest.raises(offload.UnsupportedError):
        offload.from_dlpack(src, device=host, copy=False)


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
