"""offload from Python: one safe API over host, Vulkan, CUDA, HIP and Level Zero devices.

Objects are safe to drop in any order, after shutdown and at interpreter exit; every call
that waits releases the GIL. See docs/python.md.
"""

import atexit as _atexit
import os as _os

from ._offload import (  # noqa: F401
    Buffer,
    CallbackError,
    CompileError,
    Device,
    DeviceInfo,
    DriverError,
    DriverNotFoundError,
    Event,
    ForkedError,
    InvalidArgumentError,
    InvalidBinaryError,
    InvalidIpcHandleError,
    IpcEndpoint,
    IpcHandle,
    IpcError,
    Kernel,
    Module,
    MultipleError,
    NoDeviceError,
    Offload,
    OffloadError,
    OutOfBoundsError,
    OutOfMemoryError,
    Program,
    QuarantinedError,
    Queue,
    ShutDownError,
    SymbolNotFoundError,
    UnsupportedError,
    compile_stats,
    host_stats,
    ipc_stats,
    take_unreported_errors,
)
from ._offload import _after_fork_child, _at_exit

# Shut down every runtime the program still holds while the interpreter still runs, so
# pending host functions and teardown callbacks run normally (registered at import, so it
# runs after the program's own atexit handlers).
_atexit.register(_at_exit)

# A child forked after offload started cannot use the inherited runtime (every call raises
# ForkedError) and must not let offload's C exit hook tear it down at its exit.
_os.register_at_fork(after_in_child=_after_fork_child)


def _layout_of(dtype, shape):
    import numpy as np

    dtype = np.dtype(dtype)
    if not dtype.isnative or dtype.char not in "bBhHiIlLqQefd?":
        raise InvalidArgumentError(
            f"Device.empty: invalid argument: dtype {dtype} has no zero-copy layout "
            "(native integers, floats and bool only)"
        )
    shape = (shape,) if isinstance(shape, int) else tuple(int(n) for n in shape)
    return dtype, shape


def _empty(self, shape, dtype="float32", kind="device"):
    """An uninitialised buffer viewed as an array of `shape` and `dtype` (NumPy needed)."""
    import math

    dtype, shape = _layout_of(dtype, shape)
    buf = self.alloc(math.prod(shape) * dtype.itemsize, kind)
    buf._set_layout(dtype.char, dtype.itemsize, list(shape))
    return buf


def _zeros(self, shape, dtype="float32", kind="device"):
    """A zero-filled buffer of `shape` and `dtype`."""
    buf = _empty(self, shape, dtype, kind)
    buf.fill(0)
    return buf


def _upload(self, array, kind="device"):
    """A new buffer holding a copy of `array` (any array-like), with its dtype and shape."""
    import numpy as np

    a = np.ascontiguousarray(array)
    buf = _empty(self, a.shape, a.dtype, kind)
    buf.write(a)
    return buf


def _view(self, dtype, shape=None):
    """Sets how NumPy, memoryview and DLPack see the bytes; returns the buffer."""
    import numpy as np

    dtype = np.dtype(dtype)
    if shape is None:
        shape = (self.size // dtype.itemsize,)
    dtype, shape = _layout_of(dtype, shape)
    self._set_layout(dtype.char, dtype.itemsize, list(shape))
    return self


def _numpy(self):
    """The buffer as a NumPy array: zero-copy for host-device memory, a copy elsewhere."""
    import numpy as np

    fmt, _, shape = self._layout
    if self.backend == "host":
        return np.asarray(memoryview(self))
    return np.frombuffer(bytearray(self.read()), dtype=np.dtype(fmt)).reshape(shape)  # writable copy


def _array(self, dtype=None, copy=None):
    """NumPy's conversion, reached only where the buffer protocol is refused: a freed buffer
    or memory that is not the host device's. Both raise, as CuPy does, rather than give a
    0-d object array."""
    if self.freed:
        raise InvalidArgumentError(
            "numpy.asarray(Buffer): invalid argument: the buffer was freed (Buffer.free); "
            "allocate a new one (Device.alloc)"
        )
    raise UnsupportedError(
        f"{self.backend}: numpy.asarray(Buffer): unsupported: zero-copy views exist for "
        "host-device memory only; copy with Buffer.numpy() or Buffer.read()"
    )


def _dtype(self):
    """The NumPy dtype views see (uint8 bytes until `view`, `zeros`, `empty` or `upload`
    gave the buffer one)."""
    import numpy as np

    return np.dtype(self._layout[0])


Buffer.__array__ = _array
Buffer.dtype = property(_dtype)
Device.empty = _empty
Device.zeros = _zeros
Device.upload = _upload
Buffer.view = _view
Buffer.numpy = _numpy


def _rebuild_ipc_handle(state):
    """Unpickles an IpcHandle (what its __reduce__ names)."""
    return IpcHandle._from_state(state)


def from_dlpack(obj, device=None, copy=None):
    """An offload Buffer from a DLPack producer.

    An offload Buffer comes back as that same Buffer, no copy. Device memory (a CuPy array,
    a PyTorch tensor on CUDA, another offload Buffer's DLPack capsule) becomes a buffer of
    `device`, which must be the device DLPack names, over that same memory (no copy; the
    producer's memory is kept until the buffer is released). Host memory (a NumPy array)
    becomes a buffer of `device`: on the host
    device a buffer over that same memory (no copy: writes through either are seen through
    the other; the buffer keeps the array alive until it is released), when the memory is
    writable and C-contiguous; otherwise, or with copy=True, a new buffer holding a copy.
    copy=False where no zero-copy buffer can be made raises UnsupportedError.
    """
    if isinstance(obj, Buffer):
        return obj
    if device is None:
        raise InvalidArgumentError(
            "offload.from_dlpack: invalid argument: name the device to adopt or copy into "
            "(device=...)"
        )
    if hasattr(obj, "__dlpack_device__") and obj.__dlpack_device__()[0] != 1:
        # Device memory (a CuPy array, a PyTorch tensor on CUDA): adopted, never copied.
        if copy is True:
            raise UnsupportedError(
                f"{device.backend}: offload.from_dlpack: unsupported: copy=True of device "
                "memory: adopt it (copy=None)"
            )
        buf, fmt, itemsize, shape = device._adopt_dlpack(obj)
        buf._set_layout(fmt, itemsize, shape)
        return buf
    import numpy as np

    array = np.from_dlpack(obj)
    if (
        copy is not True
        and device.backend == "host"
        and array.nbytes > 0
        and array.flags.c_contiguous
        and array.flags.writeable
    ):
        buf = device._adopt(memoryview(array).cast("B"))
        buf._set_layout(array.dtype.char, array.dtype.itemsize, list(array.shape))
        return buf
    if copy is False:
        raise UnsupportedError(
            f"{device.backend}: offload.from_dlpack: unsupported: no buffer over this memory "
            "without a copy (it must be writable, C-contiguous host memory, for the host "
            "device); pass copy=None or True to copy it"
        )
    return device.upload(array)


__all__ = [name for name in dir() if not name.startswith("_")]
