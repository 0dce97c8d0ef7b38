"""What the multiprocessing workers of test_ipc_handles.py run: a module, so spawn and
forkserver children import it by name. Each worker keeps the views it opened, so a later
task can check that they raise once the parent freed the memory."""

import os

import numpy as np

import offload

_VIEWS = []
_BARRIER = None
# A worker waits this long for its three siblings before the barrier breaks the test.
WAIT = 60


def init(barrier):
    """The pool's initializer: the barrier that spreads each round of 4 tasks over the 4
    workers (a worker waiting in it takes no other task)."""
    global _BARRIER
    _BARRIER = barrier


def increment(handle, by):
    """Opens the handle, adds `by` to each of its uint32s (read, add, write: views of
    another process's memory are copied, never viewed in place), keeps the view."""
    view = handle.open()
    assert view.nbytes == handle.nbytes, (view.nbytes, handle.nbytes)
    words = np.frombuffer(view.read(), dtype=np.uint32) + np.uint32(by)
    view.write(words)
    _VIEWS.append(view)
    _BARRIER.wait(WAIT)
    return os.getpid()


def ipc_counts(_round):
    """This worker's IPC counters (offload.ipc_stats())."""
    _BARRIER.wait(WAIT)
    return os.getpid(), offload.ipc_stats()


def check_views(_round):
    """How many views this worker holds, and how many of them raise InvalidIpcHandleError
    on read, write and fill (each must raise every time)."""
    _BARRIER.wait(WAIT)
    raised = 0
    for view in _VIEWS:
        errors = 0
        for call in (lambda: view.read(0, 4), lambda: view.write(b"\0" * 4), lambda: view.fill(0)):
            try:
                call()
            except offload.InvalidIpcHandleError:
                errors += 1
        raised += errors == 3
    return os.getpid(), len(_VIEWS), raised
