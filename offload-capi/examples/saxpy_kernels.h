/* The SAXPY kernels of the C API's example (saxpy.c), which its test suite
 * (tests/c/suite.c) launches too: y = a * x + y, in host C and in WGSL. */
#ifndef OFFLOAD_SAXPY_KERNELS_H
#define OFFLOAD_SAXPY_KERNELS_H

/* A host kernel runs once per block and loops over the block's threads; "bbfI" declares
 * its parameters: two buffers, a float, a uint32_t. */
static const char SAXPY_C[] =
    "#include \"offload_host.h\"\n"
    "OFFLOAD_KERNEL(saxpy, \"bbfI\") {\n"
    "    const float *x = OFFLOAD_BUFFER(const float, 0);\n"
    "    float *y = OFFLOAD_BUFFER(float, 1);\n"
    "    float a = OFFLOAD_SCALAR(float, 2);\n"
    "    uint32_t n = OFFLOAD_SCALAR(uint32_t, 3);\n"
    "    for (uint32_t t = 0; t < launch->block[0]; t++) {\n"
    "        uint64_t i = OFFLOAD_INDEX_X(t);\n"
    "        if (i < n) y[i] = a * x[i] + y[i];\n"
    "    }\n"
    "}\n";

/* The same kernel in WGSL: storage buffers in binding order, then the immediate members. */
static const char SAXPY_WGSL[] =
    "struct Params { a: f32, n: u32 }\n"
    "@group(0) @binding(0) var<storage, read> x: array<f32>;\n"
    "@group(0) @binding(1) var<storage, read_write> y: array<f32>;\n"
    "var<immediate> params: Params;\n"
    "@compute @workgroup_size(64)\n"
    "fn saxpy(@builtin(global_invocation_id) id: vec3<u32>) {\n"
    "    let i = id.x;\n"
    "    if i < params.n { y[i] = params.a * x[i] + y[i]; }\n"
    "}\n";

#endif
