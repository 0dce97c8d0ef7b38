// BabelStream's five kernels on f32, for benches/babelstream.rs: compiled to SPIR-V by naga
// once (the same words run through offload and through raw ash), and compiled by offload
// itself (`Source::wgsl`, with its bounds checks) for the info line.
//
// Offload's argument convention: the storage buffers an entry point uses, in binding order,
// then the members of its push-constant ("immediate") block in declaration order.
//
//   copy(a, c, n)             c[i] = a[i]
//   mul(b, c, scalar, n)      b[i] = scalar * c[i]
//   add(a, b, c, n)           c[i] = a[i] + b[i]
//   triad(a, b, c, scalar, n) a[i] = b[i] + scalar * c[i]
//   dot(a, b, sums, n)        sums[group] = this group's part of sum(a[i] * b[i])
//
// The element kernels run one thread per element in workgroups of 256 on a 2-D grid (a
// dimension holds at most 65,535 groups, and 2^25 elements need 131,072):
// i = global_invocation_id.x + global_invocation_id.y * num_workgroups.x * 256.
// dot runs a fixed grid of DOT_GROUPS groups of 256 (1-D): each thread sums its elements
// grid-stride, the group reduces its 256 sums in workgroup memory as a tree, and thread 0
// writes the group's sum; the host adds the groups' sums.

struct Count {
    n: u32,
}

struct Scaled {
    scalar: f32,
    n: u32,
}

@group(0) @binding(0) var<storage, read_write> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<storage, read_write> sums: array<f32>;

var<immediate> copy_args: Count;
var<immediate> mul_args: Scaled;
var<immediate> add_args: Count;
var<immediate> triad_args: Scaled;
var<immediate> dot_args: Count;

const BLOCK: u32 = 256u;

var<workgroup> partial: array<f32, 256>;

fn element(id: vec3<u32>, groups: vec3<u32>) -> u32 {
    return id.x + id.y * groups.x * BLOCK;
}

@compute @workgroup_size(256)
fn copy(@builtin(global_invocation_id) id: vec3<u32>,
        @builtin(num_workgroups) groups: vec3<u32>) {
    let i = element(id, groups);
    if i < copy_args.n {
        c[i] = a[i];
    }
}

@compute @workgroup_size(256)
fn mul(@builtin(global_invocation_id) id: vec3<u32>,
       @builtin(num_workgroups) groups: vec3<u32>) {
    let i = element(id, groups);
    if i < mul_args.n {
        b[i] = mul_args.scalar * c[i];
    }
}

@compute @workgroup_size(256)
fn add(@builtin(global_invocation_id) id: vec3<u32>,
       @builtin(num_workgroups) groups: vec3<u32>) {
    let i = element(id, groups);
    if i < add_args.n {
        c[i] = a[i] + b[i];
    }
}

@compute @workgroup_size(256)
fn triad(@builtin(global_invocation_id) id: vec3<u32>,
         @builtin(num_workgroups) groups: vec3<u32>) {
    let i = element(id, groups);
    if i < triad_args.n {
        a[i] = b[i] + triad_args.scalar * c[i];
    }
}

@compute @workgroup_size(256)
fn dot(@builtin(global_invocation_id) id: vec3<u32>,
       @builtin(local_invocation_id) local: vec3<u32>,
       @builtin(workgroup_id) group: vec3<u32>,
       @builtin(num_workgroups) groups: vec3<u32>) {
    let stride = groups.x * BLOCK;
    var sum = 0.0;
    for (var i = id.x; i < dot_args.n; i += stride) {
        sum += a[i] * b[i];
    }
    partial[local.x] = sum;
    for (var width = BLOCK / 2u; width > 0u; width /= 2u) {
        workgroupBarrier();
        if local.x < width {
            partial[local.x] += partial[local.x + width];
        }
    }
    if local.x == 0u {
        sums[group.x] = partial[0];
    }
}
