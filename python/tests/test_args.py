"""Every argument kind Rust accepts, from Python (issue 43): vector and struct push-constant
members (a tuple of the elements, their bytes, a NumPy value), uniform buffers; a NumPy
array where a buffer goes is a TypeError saying to upload it."""

import struct

import numpy as np
import pytest

import offload
from conftest import fresh_c

# The task's kernel: a push-constant struct with a vec2<f32> member after three scalars.
GRID_WGSL = r"""
struct Params { w: u32, h: u32, scale: f32, offset: vec2<f32> }
var<immediate> params: Params;
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64)
fn grid(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i < params.w * params.h {
        let x = f32(i % params.w);
        let y = f32(i / params.w);
        out[i] = params.scale * (x + params.offset.x) + (y + params.offset.y);
    }
}
"""

UNIFORM_WGSL = r"""
struct U { scale: f32, bias: f32 }
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<uniform> u: U;
@compute @workgroup_size(64)
fn affine(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i < arrayLength(&out) { out[i] = u.scale * f32(i) + u.bias; }
}
"""


@pytest.fixture
def gpu(rt):
    try:
        return rt.device("vulkan")
    except offload.OffloadError as e:
        pytest.skip(f"no Vulkan device: {e}")


def expected(w, h, scale, offset):
    i = np.arange(w * h)
    return (scale * ((i % w) + offset[0]) + ((i // w) + offset[1])).astype(np.float32)


def test_a_vec2_push_constant_member_from_a_tuple_bytes_or_numpy(gpu):
    k = offload.Program.from_source(GRID_WGSL, "wgsl").load(gpu).kernel("grid")
    assert k.params == ["buffer", "u32", "u32", "f32", "vec2<f32> (8 bytes)"]
    w, h = 7, 5
    q = gpu.queue()
    for offset in (
        (0.5, 0.25),
        [0.5, 0.25],
        struct.pack("2f", 0.5, 0.25),
        np.array([0.5, 0.25], dtype=np.float32),
    ):
        out = gpu.zeros(w * h, np.float32)
        q.launch(k, w * h, out, w, h, 2.0, offset)
        q.sync()
        np.testing.assert_allclose(out.numpy(), expected(w, h, 2.0, (0.5, 0.25)))
    # The wrong element type or size is refused before anything runs, in the argument's
    # words.
    out = gpu.zeros(w * h, np.float32)
    with pytest.raises(offload.InvalidArgumentError, match="argument 5 of `grid`"):
        q.launch(k, w * h, out, w, h, 2.0, np.array([0.5, 0.25], dtype=np.float64))
    with pytest.raises(offload.InvalidArgumentError, match="argument 5 of `grid`"):
        q.launch(k, w * h, out, w, h, 2.0, (0.5, 0.25, 1.0))
    with pytest.raises(offload.InvalidArgumentError, match="argument 5 of `grid`"):
        q.launch(k, w * h, out, w, h, 2.0, "not a vector")


def test_a_uniform_buffer(gpu):
    k = offload.Program.from_source(UNIFORM_WGSL, "wgsl").load(gpu).kernel("affine")
    assert k.params == ["buffer", "uniform buffer"]
    out = gpu.zeros(100, np.float32)
    u = gpu.upload(np.array([3.0, 1.0], dtype=np.float32))
    q = gpu.queue()
    q.launch(k, 100, out, u)
    q.sync()
    np.testing.assert_allclose(out.numpy(), 3.0 * np.arange(100, dtype=np.float32) + 1.0)


def test_a_numpy_array_where_a_buffer_goes_says_to_upload_it(host):
    k = offload.Program.from_source(fresh_c(), "c").load(host).kernel("saxpy")
    x = np.ones(4, np.float32)
    y = host.zeros(4, np.float32)
    with pytest.raises(TypeError, match=r"argument 1 of `saxpy` is a buffer; got a NumPy array: upload it"):
        host.queue().launch(k, 4, x, y, 2.0, 4)
    with pytest.raises(TypeError, match="argument 3 of `saxpy` is a f32; got a NumPy array"):
        host.queue().launch(k, 4, y, y, np.ones(2, np.float32), 4)


def test_fixes_in_messages_are_written_in_python(gpu):
    k = offload.Program.from_source(GRID_WGSL, "wgsl").load(gpu).kernel("grid")
    out = gpu.zeros(64, np.float32)
    q = gpu.queue()
    # The vec2 passed as two numbers: refused where the first one lands, saying how.
    with pytest.raises(offload.InvalidArgumentError, match="is a vec2<f32>: pass a tuple"):
        q.launch(k, 64, out, 8, 8, 2.0, 0.5, 0.25)
    # One argument too many: offload's count check, with its hint in Python's words.
    with pytest.raises(offload.InvalidArgumentError) as e:
        q.launch(k, 64, out, 8, 8, 2.0, (0.5, 0.25), 1)
    text = str(e.value)
    assert text.startswith("Queue.launch: ") and "a tuple `(x, y)`" in text, text
    assert "::" not in text and "Arg" not in text, text
    # Another block than the declared @workgroup_size(64): the dims to pass instead.
    with pytest.raises(offload.InvalidArgumentError) as e:
        q.launch(k, ((2, 1, 1), (32, 1, 1)), out, 8, 8, 2.0, (0.5, 0.25))
    text = str(e.value)
    assert "(pass dims `(grid, (64, 1, 1))`)" in text, text
    assert "::" not in text and "run_resized" not in text, text


def test_configuration_refusals_advise_in_python(rt):
    # An empty backend list: the fix is the Python setting, not the Rust builder.
    with pytest.raises(offload.InvalidArgumentError) as e:
        offload.Offload(backends=[])
    text = str(e.value)
    assert text.startswith("Offload: invalid argument: "), text
    assert 'offload.Offload(backends=["host"])' in text, text
    assert "::" not in text and "platform(..)" not in text, text
    # Another configuration than the live runtime's (the fixture's): what to shut down is
    # said in Python's objects.
    with pytest.raises(offload.InvalidArgumentError) as e:
        offload.Offload(host_devices=7)
    text = str(e.value)
    assert text.startswith("Offload: invalid argument: "), text
    assert "every `offload.Offload` of it" in text, text
    assert "Offload<Ready>" not in text and "Offload::config" not in text, text
    # A backend this build lacks (CUDA, unless the package was built with it): the fix is
    # no cargo feature, which a Python user does not build.
    try:
        rt.device("cuda")
    except offload.OffloadError as e:
        text = str(e)
        if "not compiled" in text:
            assert "this build of the offload package is without it" in text, text
            assert "cargo" not in text, text
        # Or compiled in, without a driver on this machine: the advice names Python's
        # setting, also when it comes as the reason the platform is unavailable.
        if "driver not found" in text:
            assert "`offload.Offload(backends=[...])`" in text, text
            assert "::" not in text, text
