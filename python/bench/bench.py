"""Python overhead of offload, measured against the same work done from Rust.

1. noop launch + sync: a kernel that does nothing, launched on one block and synced, from a
   Python loop vs. from a Rust loop inside the extension (Queue._bench_launch_sync, the same
   queue and kernel). Overhead = Python - Rust per iteration. Goal: <= 2 us.
2. 1 MiB upload from NumPy: Buffer.write(array) vs. NumPy's own copy into a preallocated
   array (np.copyto). Goal: >= 0.9x NumPy's bandwidth.

Batches of the two sides alternate (paired sampling), so drift in a shared machine's load
hits both; medians of the batches are reported. `--check` exits 1 when a goal is missed.
"""

import statistics
import sys
import time

import numpy as np

import offload

NOOP = r"""
#include "offload_host.h"
OFFLOAD_KERNEL(noop, "") { (void)launch; }
"""


def launch_overhead(q, k, batches=15, n=5000):
    py, rs = [], []
    dims = (1, 1)
    for _ in range(batches):
        t = time.perf_counter_ns()
        for _ in range(n):
            q.launch(k, dims)
            q.sync()
        py.append((time.perf_counter_ns() - t) / n)
        rs.append(q._bench_launch_sync(k, dims, n))
    return statistics.median(py), statistics.median(rs)


def upload_bandwidth(dev, batches=15, n=200):
    src = np.random.default_rng(0).integers(0, 255, 1 << 20, dtype=np.uint8)
    dst = np.empty_like(src)
    buf = dev.alloc(src.nbytes)
    ours, numpy = [], []
    for _ in range(batches):
        t = time.perf_counter_ns()
        for _ in range(n):
            buf.write(src)
        ours.append(src.nbytes * n / (time.perf_counter_ns() - t))
        t = time.perf_counter_ns()
        for _ in range(n):
            np.copyto(dst, src)
        numpy.append(src.nbytes * n / (time.perf_counter_ns() - t))
    assert buf.read(0, 16) == src[:16].tobytes()
    return statistics.median(ours), statistics.median(numpy)


def main():
    check = "--check" in sys.argv
    with offload.Offload() as rt:
        dev = rt.device("host")
        k = offload.Program.from_source(NOOP, "c").load(dev).kernel("noop")
        q = dev.queue()
        launch_overhead(q, k, batches=1, n=500)  # warm up
        py, rs = launch_overhead(q, k)
        over = (py - rs) / 1000
        print(f"noop launch+sync: python {py / 1000:.2f} us, rust {rs / 1000:.2f} us, "
              f"overhead {over:.2f} us (goal <= 2 us)")
        ours, theirs = upload_bandwidth(dev)
        ratio = ours / theirs
        print(f"1 MiB upload: Buffer.write {ours:.2f} GB/s, np.copyto {theirs:.2f} GB/s, "
              f"ratio {ratio:.2f} (goal >= 0.9)")
    if check and (over > 2.0 or ratio < 0.9):
        sys.exit(1)


if __name__ == "__main__":
    main()
