"""The GPU kit's DLPack step (run by run.sh with the kit's `offload` package on PYTHONPATH):
CUDA memory exchanged between offload and CuPy, and offload and PyTorch, both ways, with no
copy — each side writes, the other sees it. offload's own hand-over (a CUDA buffer's capsule
adopted by offload again) runs first, on a GPU or on the protocol fake (the dry run). A
library that is not installed is reported as skipped, never as passed.

Prints one line per check: `PASS <check>` or `SKIP <check>: <why>`; exits non-zero on the
first failure.
"""

import gc
import sys

import numpy as np

import offload


def check(name, ok, detail=""):
    if not ok:
        print(f"FAIL {name} {detail}")
        sys.exit(1)
    print(f"PASS {name}")


class Producer:
    """Hands over a buffer's DLPack capsule without being an offload Buffer."""

    def __init__(self, b):
        self.b = b

    def __dlpack__(self, **kw):
        return self.b.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.b.__dlpack_device__()


def words(buf, n, dtype=np.float32):
    return np.frombuffer(buf.read(), dtype=dtype)[:n]


def offload_round_trip(cuda):
    buf = cuda.upload(np.arange(1024, dtype=np.float32))
    check("offload: __dlpack_device__ is CUDA device 0", buf.__dlpack_device__() == (2, 0))
    view = offload.from_dlpack(Producer(buf), device=cuda)
    view.write(np.full(1024, 3.0, dtype=np.float32))
    check("offload: an adopted capsule is the same memory", (words(buf, 1024) == 3.0).all())
    del view
    gc.collect()
    check("offload: the adopted capsule is given back", buf.exports == 0)


def with_cupy(cuda):
    try:
        import cupy
    except Exception as e:  # ImportError, or a CuPy without its CUDA libraries
        print(f"SKIP cupy: {type(e).__name__}: {e}")
        return
    buf = cuda.upload(np.arange(1024, dtype=np.float32))
    c = cupy.from_dlpack(buf)
    check("cupy: from_dlpack(offload buffer) shape and dtype", c.shape == (1024,) and c.dtype == cupy.float32)
    c += 1  # a CuPy kernel on offload's memory
    cupy.cuda.runtime.deviceSynchronize()
    check("cupy: a CuPy kernel's writes are seen by offload", words(buf, 4).tolist() == [1, 2, 3, 4])
    buf.write(np.full(1024, 7.0, dtype=np.float32))
    check("cupy: offload's writes are seen by CuPy", float(c[10]) == 7.0)
    del c
    gc.collect()
    x = cupy.arange(256, dtype=cupy.float32) * 2
    b = offload.from_dlpack(x, device=cuda)
    check("cupy: offload adopts a CuPy array (no copy)", words(b, 3).tolist() == [0.0, 2.0, 4.0])
    b.write(np.full(256, 5.0, dtype=np.float32))
    check("cupy: offload's writes to the adopted array are seen by CuPy", float(x[100]) == 5.0)
    x += 1
    cupy.cuda.runtime.deviceSynchronize()
    check("cupy: CuPy's later writes are seen through the adopted buffer", words(b, 1)[0] == 6.0)
    del b
    gc.collect()
    check("cupy: the array outlives the adopted buffer", float(x[0]) == 6.0)


def with_torch(cuda):
    try:
        import torch
    except Exception as e:
        print(f"SKIP torch: {type(e).__name__}: {e}")
        return
    if not torch.cuda.is_available():
        print("SKIP torch: torch.cuda.is_available() is False")
        return
    buf = cuda.upload(np.arange(512, dtype=np.float32))
    t = torch.from_dlpack(buf)
    check("torch: from_dlpack(offload buffer) is on CUDA", t.is_cuda and t.shape == (512,))
    t.mul_(2)
    torch.cuda.synchronize()
    check("torch: a PyTorch kernel's writes are seen by offload", words(buf, 3).tolist() == [0.0, 2.0, 4.0])
    del t
    gc.collect()
    u = torch.arange(128, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    b = offload.from_dlpack(u, device=cuda)
    check("torch: offload adopts a CUDA tensor (no copy)", words(b, 3).tolist() == [0.0, 1.0, 2.0])
    b.write(np.full(128, 9.0, dtype=np.float32))
    check("torch: offload's writes to the adopted tensor are seen by PyTorch", float(u[127]) == 9.0)
    del b
    gc.collect()


def main():
    rt = offload.Offload()
    try:
        cuda = rt.device("cuda")
    except offload.OffloadError as e:
        print(f"FAIL no CUDA device: {e}")
        sys.exit(1)
    offload_round_trip(cuda)
    with_cupy(cuda)
    with_torch(cuda)
    rt.shutdown()
    print("dlpack: done")


if __name__ == "__main__":
    main()
