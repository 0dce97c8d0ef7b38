// SAXPY on Vulkan: y[i] = a * x[i] + y[i] for i < n.
//
// Offload's parameters are the storage buffers of group 0 in binding order, then the
// push-constant members in order (naga 28 spells push constants `var<immediate>`):
// saxpy(x: f32[], y: f32[], a: f32, n: u32). The workgroup size is Dims::for_num_elems's
// block, 256.

struct Params {
    a: f32,
    n: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
var<immediate> params: Params;

@compute @workgroup_size(256)
fn saxpy(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i < params.n {
        y[i] = params.a * x[i] + y[i];
    }
}
