"""The WGSL bounds report from Python: with OFFLOAD_VULKAN_BOUNDS_REPORT=1 a kernel writing
past the end of a 10-element buffer raises offload.OutOfBoundsError from the queue's next
sync, with the kernel, argument, index and length as attributes; the 10 elements hold
what their threads wrote; the queue stays usable. Without it the same launch syncs and is
still protected. Each runs in a fresh interpreter (the variable is read when Vulkan
opens)."""

import json

import pytest
from conftest import run_script

SCRIPT = r'''
import json, numpy as np, offload
STRAY = """
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(64)
fn stray(@builtin(global_invocation_id) id: vec3<u32>) { out[id.x] = id.x + 1u; }
"""
rt = offload.Offload()
try:
    gpu = rt.device("vulkan")
except offload.OffloadError as e:
    print(json.dumps({"skip": str(e)}))
    raise SystemExit(0)
k = offload.Program.from_source(STRAY, "wgsl").load(gpu).kernel("stray")
out = gpu.zeros(10, np.uint32)
q = gpu.queue()
q.launch(k, (1, 64), out)
seen = {}
try:
    q.sync()
except offload.OutOfBoundsError as e:
    seen = {a: getattr(e, a) for a in ("kernel", "argument", "binding", "index", "length", "access")}
    seen["message"] = str(e)
q.sync()
seen["out"] = out.numpy().tolist()
q.launch(k, (1, 64), gpu.zeros(64, np.uint32))
q.sync()
rt.shutdown()
print(json.dumps(seen))
'''


def run(report):
    r = run_script(SCRIPT, timeout=120, env={"OFFLOAD_VULKAN_BOUNDS_REPORT": report})
    assert r.returncode == 0, r.stderr.decode()
    seen = json.loads(r.stdout.decode().strip().splitlines()[-1])
    if "skip" in seen:
        pytest.skip(f"no Vulkan device: {seen['skip']}")
    return seen


def test_out_of_bounds_error_names_the_kernel_argument_and_index():
    seen = run("1")
    assert seen["kernel"] == "stray"
    assert (seen["argument"], seen["binding"], seen["length"]) == (1, 0, 10)
    assert 10 <= seen["index"] < 64 and seen["access"] == "write"
    assert "kernel `stray` wrote index" in seen["message"]
    assert seen["out"] == list(range(1, 11))


def test_without_the_report_the_launch_syncs_and_is_protected():
    seen = run("0")
    assert "kernel" not in seen
    assert seen["out"] == list(range(1, 11))
