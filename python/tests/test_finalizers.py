"""Finalizers in any order: 10,000 seeded random create / drop / collect / shutdown steps
over every kind of object, then interpreter exit with live objects and a pending host
function (a fresh interpreter: exit code 0, nothing on stderr)."""

import gc
import os
import random

import numpy as np
import pytest

import offload
from conftest import fresh_c, run_script

STEPS = int(os.environ.get("OFFLOAD_FINALIZER_STEPS", "10000"))
SEED = int(os.environ.get("OFFLOAD_FINALIZER_SEED", "27"))


def test_random_create_drop_collect_shutdown(capfd):
    rng = random.Random(SEED)
    src = fresh_c()
    runtimes, objects = [], []
    counts = {}

    def live_rt():
        alive = [r for r in runtimes if not r.is_shut_down]
        return rng.choice(alive) if alive else None

    def pick(kind):
        found = [o for k, o in objects if k == kind]
        return rng.choice(found) if found else None

    def step():
        op = rng.randrange(15)
        counts[op] = counts.get(op, 0) + 1
        if op == 0 or not runtimes:
            runtimes.append(offload.Offload())
        elif op == 1:
            r = live_rt()
            if r is not None:
                r.shutdown()
        elif op == 2:
            r = live_rt()
            if r is not None:
                objects.append(("device", r.device("host")))
        elif op == 3:
            d = pick("device")
            if d is not None:
                objects.append(("buffer", d.alloc(rng.choice([8, 64, 4096]))))
        elif op == 4:
            d = pick("device")
            if d is not None:
                objects.append(("queue", d.queue()))
        elif op == 5:
            q = pick("queue")
            if q is not None:
                q.enqueue_host_fn(lambda: objects and None)
        elif op == 6:
            d = pick("device")
            if d is not None:
                p = offload.Program.from_source(
                    src, "c", on_setup=lambda m: None, on_teardown=lambda m: None
                )
                objects.append(("program", p))
                if rng.random() < 0.8:
                    m = p.load(d)
                    objects.append(("module", m))
                    objects.append(("kernel", m.kernel("saxpy")))
        elif op == 7:
            b = pick("buffer")
            if b is not None:
                objects.append(("view", np.asarray(memoryview(b))))
        elif op == 8:
            b = pick("buffer")
            if b is not None:
                objects.append(("capsule", np.from_dlpack(b)))
        elif op == 9:
            q, k, b = pick("queue"), pick("kernel"), pick("buffer")
            if q is not None and k is not None and b is not None:
                q.launch(k, 1, b, b, 1.0, 0)
        elif op == 10:
            q = pick("queue")
            if q is not None:
                q.sync()
        elif op == 11:
            if objects:
                objects.pop(rng.randrange(len(objects)))
        elif op == 12:
            gc.collect()
        elif op == 13:
            m = pick("module")
            if m is not None:
                m.unload()
        else:
            q = pick("queue")
            if q is not None:
                objects.append(("event", q.record()))
        if len(objects) > 200:
            rng.shuffle(objects)
            del objects[100:]

    for _ in range(STEPS):
        try:
            step()
        except (offload.ShutDownError, BufferError):
            pass  # a handle of a shut-down runtime, a free refused: both documented
        except offload.InvalidArgumentError as e:
            # A kernel of a module unloaded meanwhile: documented (P2).
            assert "was unloaded" in str(e), e
    rng.shuffle(objects)
    objects.clear()
    for r in runtimes:
        r.shutdown()
    runtimes.clear()
    gc.collect()
    stats = offload.host_stats()
    assert stats["opened"] == stats["deinitialised"], stats
    assert stats["live_allocations"] == 0, stats
    out, err = capfd.readouterr()
    assert err == ""
    assert len(counts) == 15, counts


EXIT_SCRIPT = """
import sys, threading, time
import numpy as np
import offload
rt = offload.Offload()
dev = rt.device("host")
bufs = [dev.upload(np.arange(100, dtype=np.float32)) for _ in range(4)]
views = [np.asarray(memoryview(bufs[0])), np.from_dlpack(bufs[1])]
teardowns = []
prog = offload.Program.from_source(SAXPY_C, "c", on_teardown=lambda m: teardowns.append(1))
mod = prog.load(dev)
k = mod.kernel("saxpy")
q, q2 = dev.queue(), dev.queue()
q.launch(k, 100, bufs[2], bufs[3], 2.0, 100)
def slow():
    time.sleep(0.2)
    q2.enqueue_host_fn(lambda: None)   # calls offload from the host function
    dev.alloc(64)
q.enqueue_host_fn(slow)                # still pending when the script ends
cycle = [rt, q]; cycle.append(cycle)   # a reference cycle holding the runtime
MODE
"""


@pytest.mark.parametrize(
    "mode",
    [
        "pass",
        "sys.exit(0)",
        "rt.shutdown()",
        "del rt, q, q2, mod, k, prog",
        # Daemon threads still inside offload calls when the interpreter finalises.
        "threading.Thread(target=lambda: [q.launch(k, 100, bufs[2], bufs[3], 1.0, 100) or q.sync() for _ in range(10**6)], daemon=True).start(); time.sleep(0.05)",
        "[threading.Thread(target=lambda: [dev.alloc(4096).read(0, 8) or q2.enqueue_host_fn(lambda: None) or q2.sync() for _ in range(10**6)], daemon=True).start() for _ in range(4)]; time.sleep(0.05)",
    ],
)
def test_interpreter_exit_with_live_objects(mode):
    for _ in range(3):
        r = run_script(EXIT_SCRIPT.replace("MODE", mode), timeout=60)
        assert r.returncode == 0, r.stderr.decode()
        assert r.stderr == b""
