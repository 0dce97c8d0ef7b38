"""Picklable IPC handles for multiprocessing (issue 43; I1-I5 through endpoints): a buffer's
range pickled into real worker processes (ProcessPoolExecutor and multiprocessing.Pool,
spawn and forkserver), opened there, written, and unmapped from every worker by the
parent's free, which returns once each acknowledged (timed: FREE_MS); the workers' views
raise from then on. Every
multi-process test runs in a fresh interpreter under a timeout, and every wait in the
workers is bounded, so a hang fails the test instead of stalling the suite."""

import os
import pickle

import numpy as np
import pytest

import offload
from conftest import run_script

TESTS = os.path.dirname(os.path.abspath(__file__))

# The parent: a 64 MiB exportable buffer of consecutive uint32s, 16 disjoint 4 MiB ranges
# pickled to 4 workers (each round of 4 tasks spread over the 4 by a barrier), range i
# incremented by i + 1; then the free, timed; then each worker checks its views raise.
SHARED = """
import sys, time
sys.path.insert(0, TESTS)
import multiprocessing as mp
import concurrent.futures as cf
import numpy as np
import offload
import ipc_workers as w

ctx = mp.get_context(METHOD)
N, R = 64 << 20, 16
step = N // R
rt = offload.Offload()
buf = rt.device("host").alloc(N, exportable=True)
base = np.arange(N // 4, dtype=np.uint32)
buf.write(base)
handles = [buf.ipc_handle(offset=i * step, nbytes=step) for i in range(R)]
assert len(set(handles)) == R and [h.offset for h in handles] == [i * step for i in range(R)]
barrier = ctx.Barrier(4)
if KIND == "executor":
    pool = cf.ProcessPoolExecutor(4, mp_context=ctx, initializer=w.init, initargs=(barrier,))
    run = lambda f, *args: list(pool.map(f, *args, timeout=120))
    close = lambda: pool.shutdown()
else:
    pool = ctx.Pool(4, initializer=w.init, initargs=(barrier,))
    run = lambda f, *args: pool.starmap_async(f, list(zip(*args)), chunksize=1).get(120)
    close = lambda: (pool.close(), pool.join())
pids = run(w.increment, handles, [i + 1 for i in range(R)])
assert len(set(pids)) == 4, pids
got = np.frombuffer(buf.read(), dtype=np.uint32)
want = base + np.repeat(np.arange(1, R + 1, dtype=np.uint32), (N // 4) // R)
assert np.array_equal(got, want), "the workers' increments"
# The sender-side cache (I2): each worker mapped the allocation once for its 4 ranges; the
# parent exported it once per worker and sent the other 12 ranges as cache hits.
counts = run(w.ipc_counts, range(4))
assert [c[1]["imports"] for c in counts] == [1] * 4, counts
mine = offload.ipc_stats()
assert (mine["cache_misses"], mine["cache_hits"], mine["one_shots"]) == (4, R - 4, 0), mine
# The same free of memory no process mapped, just before: what releasing 64 MiB costs
# here without IPC (the kernel's page release alone is tens of ms on a loaded machine).
control = rt.device("host").alloc(N, exportable=True)
control.write(want)
start = time.perf_counter()
control.free()
alone = time.perf_counter() - start
start = time.perf_counter()
buf.free()
took = time.perf_counter() - start
checks = run(w.check_views, range(4))
close()
assert sorted(c[0] for c in checks) == sorted(set(pids)), (checks, pids)
assert sum(c[1] for c in checks) == R and all(c[1] == c[2] for c in checks), checks
print("FREE_MS %.2f ALONE_MS %.2f" % (took * 1000, alone * 1000), flush=True)
# Every worker acknowledged: a silent one costs the whole unmap timeout (2 s) and a
# QuarantinedError. The 50 ms goal itself is measured, not asserted (docs/python.md): on
# a 2-core machine shared with builds the kernel's release of the 64 MiB alone (ALONE_MS)
# took 12-230 ms.
assert took < 1.0, "free took %.1f ms" % (took * 1000)
rt.shutdown()
print("OK", flush=True)
"""


@pytest.mark.parametrize("kind", ["executor", "pool"])
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_workers_increment_a_shared_buffer_then_the_free_unmaps_them(kind, method):
    code = f"TESTS = {TESTS!r}\nKIND = {kind!r}\nMETHOD = {method!r}\n" + SHARED
    r = run_script(code, timeout=240)
    out, err = r.stdout.decode(), r.stderr.decode()
    assert r.returncode == 0, out + err
    assert "OK" in out, out + err
    print([line for line in out.splitlines() if line.startswith("FREE_MS")])


def test_a_handle_pickles_and_opens_its_own_range(rt, host):
    buf = host.alloc(64, exportable=True)
    buf.write(bytes(range(64)))
    first, second = buf.ipc_handle(offset=0, nbytes=16), buf.ipc_handle(offset=16, nbytes=16)
    # Two ranges of one allocation: two handles, each naming its range (cupy #9436).
    assert first != second and (second.offset, second.nbytes) == (16, 16)
    assert buf.ipc_handle(offset=16, nbytes=16) == second
    assert buf.ipc_handle().nbytes == 64 and buf.ipc_handle(offset=60).nbytes == 4
    data = pickle.dumps(second)
    assert len(data) < 300, len(data)
    again = pickle.loads(data)
    assert again == second and again.pid == os.getpid() and again.backend == "host"
    view = again.open(rt)                           # here in-process; normally in a worker
    assert view.nbytes == 16 and view.read() == bytes(range(16, 32))
    view.write(b"\xff" * 4)
    assert buf.read(16, 4) == b"\xff" * 4
    with pytest.raises(offload.UnsupportedError):   # another process's memory: copies only
        memoryview(view)
    buf.free()
    with pytest.raises(offload.InvalidIpcHandleError, match=r"Buffer\.read"):
        view.read()
    with pytest.raises(offload.InvalidIpcHandleError, match="freed"):
        second.open(rt)


def test_handles_refuse_what_cannot_be_shared(rt, host):
    # The fix in no language's syntax (the core words it for every caller), and no Rust.
    with pytest.raises(offload.InvalidArgumentError, match=r"Buffer\.ipc_handle: .*allocate it as exportable memory") as refused:
        host.alloc(64).ipc_handle()
    assert "::" not in str(refused.value)
    buf = host.alloc(64, exportable=True)
    for offset, nbytes in [(0, 0), (60, 8), (64, None)]:
        with pytest.raises(offload.InvalidArgumentError, match=r"Buffer\.ipc_handle"):
            buf.ipc_handle(offset=offset, nbytes=nbytes)
    state = buf.ipc_handle().__reduce__()[1][0]
    forged = offload._rebuild_ipc_handle(state[:2] + (state[2] ^ 1,) + state[3:])
    with pytest.raises(offload.InvalidIpcHandleError, match="no such handle"):
        forged.open(rt)
    with pytest.raises(offload.InvalidIpcHandleError, match="version"):
        offload._rebuild_ipc_handle((99,) + state[1:])
    with pytest.raises(offload.InvalidIpcHandleError, match=r"IpcHandle\.open.*cannot be reached"):
        offload._rebuild_ipc_handle(state[:1] + ("0-0-0.sock",) + state[2:]).open(rt)
    collected = host.alloc(64, exportable=True)
    handle = collected.ipc_handle()
    del collected
    with pytest.raises(offload.InvalidIpcHandleError, match="freed"):
        handle.open(rt)


def test_a_handle_outlives_its_process_as_a_typed_error():
    # The sender exits; the handle it printed is stale (I1): typed, at once.
    r = run_script(
        """
        import pickle, sys, offload
        rt = offload.Offload()
        buf = rt.device("host").alloc(64, exportable=True)
        sys.stdout.buffer.write(pickle.dumps(buf.ipc_handle()))
        """,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr.decode()
    handle = pickle.loads(r.stdout)
    with offload.Offload() as rt:
        with pytest.raises(offload.InvalidIpcHandleError, match="cannot be reached"):
            handle.open(rt)


def test_threads_open_handles_at_once(rt, host):
    # Opens are serialised per process (one endpoint's answers are never another open's):
    # 8 threads opening 32 ranges at once each get their own range.
    from concurrent.futures import ThreadPoolExecutor

    buf = host.alloc(32 * 64, exportable=True)
    buf.fill(0)
    handles = [buf.ipc_handle(offset=64 * i, nbytes=64) for i in range(32)]

    def mark(i):
        view = pickle.loads(pickle.dumps(handles[i])).open(rt)
        view.fill(i + 1)
        return view

    with ThreadPoolExecutor(8) as pool:
        views = list(pool.map(mark, range(32), timeout=120))
    assert buf.read() == b"".join(bytes([i + 1]) * 64 for i in range(32))
    buf.free()
    for view in views:
        with pytest.raises(offload.InvalidIpcHandleError):
            view.fill(0)
