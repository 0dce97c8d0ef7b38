"""Shared fixtures: a host runtime, the kernels, and a runner for scripts in a fresh
interpreter (exit, fork and deadlock checks run there, under a timeout)."""

import os
import subprocess
import sys
import textwrap
import uuid

import pytest

import offload

# y = a*x + y over n elements; "bbfI": two buffers, an f32, a u32.
SAXPY_C = r"""
#include "offload_host.h"
OFFLOAD_KERNEL(saxpy, "bbfI") {
    const float *x = OFFLOAD_BUFFER(const float, 0);
    float *y = OFFLOAD_BUFFER(float, 1);
    float a = OFFLOAD_SCALAR(float, 2);
    uint32_t n = OFFLOAD_SCALAR(uint32_t, 3);
    for (uint32_t t = 0; t < launch->block[0]; t++) {
        uint64_t i = OFFLOAD_INDEX_X(t);
        if (i < n) y[i] = a * x[i] + y[i];
    }
}
OFFLOAD_KERNEL(noop, "") { (void)launch; }
"""

SAXPY_WGSL = r"""
struct Params { a: f32, n: u32 }
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
var<immediate> params: Params;
@compute @workgroup_size(64)
fn saxpy(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i < params.n { y[i] = params.a * x[i] + y[i]; }
}
"""


def fresh_c(source=SAXPY_C):
    """The source with a unique comment: a program no cache has seen."""
    return f"/* {uuid.uuid4()} */\n{source}"


@pytest.fixture
def rt():
    r = offload.Offload()
    yield r
    r.shutdown()


@pytest.fixture
def host(rt):
    return rt.device("host")


def run_script(code, timeout=30, env=None):
    """Runs `code` in a fresh interpreter; returns the CompletedProcess (raises on timeout)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    prelude = f"SAXPY_C = {SAXPY_C!r}\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        timeout=timeout,
        env=full_env,
    )
