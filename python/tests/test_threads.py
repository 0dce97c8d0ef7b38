"""numba-cuda's threading scenario: 32 Python threads launch the same kernel of a fresh
Program at once. Offload loads a program once per device however many threads ask (P2), and
each load releases the GIL, so setup runs once and every thread gets the same module."""

import threading

import numpy as np

import offload
from conftest import fresh_c

THREADS = 32


def test_32_threads_one_compile_one_load_one_setup(host):
    setups = []
    program = offload.Program.from_source(fresh_c(), "c", on_setup=lambda m: setups.append(m.id))
    before_compiles = offload.compile_stats()["compiles"]
    before_loads = offload.host_stats()["loads"]
    n = 4096
    barrier = threading.Barrier(THREADS)
    results, errors, modules = [None] * THREADS, [], [None] * THREADS

    def worker(i):
        try:
            x = host.upload(np.full(n, i, dtype=np.float32))
            y = host.zeros(n, np.float32)
            q = host.queue()
            barrier.wait()
            m = program.load(host)
            modules[i] = m.id
            q.launch(m.kernel("saxpy"), n, x, y, 2.0, n)
            q.sync()
            results[i] = y.numpy().copy()
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert errors == []
    assert offload.compile_stats()["compiles"] - before_compiles == 1
    assert offload.host_stats()["loads"] - before_loads == 1
    assert len(setups) == 1
    assert len(set(modules)) == 1 and modules[0] == setups[0]
    for i, r in enumerate(results):
        np.testing.assert_array_equal(r, np.full(n, 2.0 * i, dtype=np.float32))
