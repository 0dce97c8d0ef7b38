"""DLPack on device memory, against offload's protocol fake libcuda (a fake over host
memory, not a GPU): a CUDA buffer's capsule names CUDA device 0 and its device pointer, and
`offload.from_dlpack` adopts such a capsule with no copy, keeping the producer's memory until
the adopted buffer goes. The same exchange with CuPy and PyTorch runs in the GPU kit
(scripts/gpu/dlpack_gpu.py) on a real GPU."""

import os
import pathlib
import shutil
import subprocess

import pytest

from conftest import run_script

ROOT = pathlib.Path(__file__).resolve().parents[2]

SCRIPT = """
import gc
import sys
import numpy as np
import offload

sys.path.insert(0, GPU_KIT)
from dlpack_gpu import Producer  # the kit's own: hands a buffer's capsule over as CuPy would

rt = offload.Offload()
cuda = rt.device("cuda")
buf = cuda.upload(np.arange(16, dtype=np.float32))
assert buf.__dlpack_device__() == (2, 0), buf.__dlpack_device__()

view = offload.from_dlpack(Producer(buf), device=cuda)
assert view.backend == "cuda" and view.size == 64
a = view.numpy()
assert a.dtype == np.float32 and a.shape == (16,) and a[5] == 5.0, a
view.write(np.full(16, 3.0, dtype=np.float32))  # through the adopted buffer ...
assert (np.frombuffer(buf.read(), dtype=np.float32) == 3.0).all()  # ... seen by the owner
assert buf.exports == 1  # the adopted buffer holds the producer's capsule
try:
    buf.free()
    raise SystemExit("freed while adopted")
except BufferError:
    pass
del view, a
gc.collect()
assert buf.exports == 0, buf.exports  # released: the tensor's deleter ran
host = rt.device("host")
try:
    offload.from_dlpack(Producer(buf), device=host)
    raise SystemExit("memory of CUDA device 0 adopted by the host device")
except offload.InvalidArgumentError as e:
    assert "DLPack device (2, 0)" in str(e), e
gc.collect()
assert buf.exports == 0, buf.exports  # the refused capsule was freed by its destructor
try:
    offload.from_dlpack(Producer(buf), device=cuda, copy=True)
    raise SystemExit("copy=True of device memory")
except offload.UnsupportedError:
    pass
kept = offload.from_dlpack(Producer(buf), device=cuda)
rt.shutdown()
# The capsule pins the runtime it views (as every view does), so the runtime lives on until
# the adopted buffer that holds it goes.
assert kept.read(0, 4) == np.float32(3.0).tobytes()
del kept
gc.collect()
assert buf.exports == 0, buf.exports
print("ok")
"""


@pytest.fixture(scope="module")
def fake_cuda(tmp_path_factory):
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        pytest.skip(f"no C compiler ({cc}) to build the fake libcuda")
    out = tmp_path_factory.mktemp("fake-cuda")
    subprocess.run(
        [cc, "-shared", "-fPIC", "-o", str(out / "libcuda.so.1"),
         str(ROOT / "offload-driver" / "fake" / "fake_cuda.c")],
        check=True,
    )
    return out


def test_cuda_buffers_hand_over_and_adopt_device_memory(fake_cuda):
    env = {"LD_LIBRARY_PATH": f"{fake_cuda}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    script = f"GPU_KIT = {str(ROOT / 'scripts' / 'gpu')!r}\n" + SCRIPT
    r = run_script(script, timeout=60, env=env)
    assert r.returncode == 0, r.stderr.decode() + r.stdout.decode()
    assert r.stdout.decode().strip().endswith("ok")
    assert r.stderr == b""
