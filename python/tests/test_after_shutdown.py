"""L3 by exhaustion, from Python: every public method and property of every handle class,
used after the last shutdown (and again while a new runtime is live), raises
`offload.ShutDownError` when it needs the runtime, or gives the handle's identity (its size,
its name, its backend). `TABLE` lists them all; a class gaining a public name that the table
lacks fails the test, so a new method cannot skip L3."""

import faulthandler

import numpy as np
import pytest

import offload
from conftest import SAXPY_C, run_script

SHUT = "ShutDownError"
VALUE = "value"


def _handles():
    rt = offload.Offload()
    dev = rt.device("host")
    buf = dev.alloc(64)
    other = dev.alloc(64)
    q = dev.queue()
    event = q.record()
    later = q.record()
    program = offload.Program.from_source(SAXPY_C, "c")
    module = program.load(dev)
    kernel = module.kernel("saxpy")
    sender = rt.ipc_endpoint()
    receiver = rt.ipc_endpoint()
    assert sender.connect(receiver.name) == 0
    handle = dev.alloc(64, exportable=True).ipc_handle(offset=8, nbytes=8)
    q.sync()
    return rt, dict(
        rt=rt, dev=dev, buf=buf, other=other, q=q, event=event, later=later,
        program=program, module=module, kernel=kernel, sender=sender, receiver=receiver,
        handle=handle,
    )


# (class, name) -> (call on the handles `h`, expected answer)
TABLE = {
    ("Offload", "device"): (lambda h: h["rt"].device("host"), SHUT),
    ("Offload", "devices"): (lambda h: h["rt"].devices(), SHUT),
    ("Offload", "ipc_endpoint"): (lambda h: h["rt"].ipc_endpoint(), SHUT),
    ("Offload", "unavailable"): (lambda h: h["rt"].unavailable(), SHUT),
    ("Offload", "generation"): (lambda h: h["rt"].generation, VALUE),
    ("Offload", "is_shut_down"): (lambda h: h["rt"].is_shut_down, VALUE),
    ("Offload", "shutdown"): (lambda h: h["rt"].shutdown(), VALUE),
    ("Device", "alloc"): (lambda h: h["dev"].alloc(8), SHUT),
    ("Device", "empty"): (lambda h: h["dev"].empty(4), SHUT),
    ("Device", "zeros"): (lambda h: h["dev"].zeros(4), SHUT),
    ("Device", "upload"): (lambda h: h["dev"].upload(np.zeros(4, np.float32)), SHUT),
    ("Device", "info"): (lambda h: h["dev"].info(), SHUT),
    ("Device", "queue"): (lambda h: h["dev"].queue(), SHUT),
    ("Device", "backend"): (lambda h: h["dev"].backend, VALUE),
    ("Buffer", "read"): (lambda h: h["buf"].read(), SHUT),
    ("Buffer", "read_into"): (lambda h: h["buf"].read_into(bytearray(4)), SHUT),
    ("Buffer", "write"): (lambda h: h["buf"].write(b"abcd"), SHUT),
    ("Buffer", "fill"): (lambda h: h["buf"].fill(1), SHUT),
    ("Buffer", "numpy"): (lambda h: h["buf"].numpy(), SHUT),
    ("Buffer", "view"): (lambda h: h["buf"].view("float32").numpy(), SHUT),
    ("Buffer", "export_handle"): (lambda h: h["buf"].export_handle(), SHUT),
    ("Buffer", "ipc_handle"): (lambda h: h["buf"].ipc_handle(), SHUT),
    ("Buffer", "label"): (lambda h: h["buf"].label("after"), VALUE),
    ("Buffer", "device"): (lambda h: h["buf"].device(), VALUE),
    ("Buffer", "size"): (lambda h: h["buf"].size, VALUE),
    ("Buffer", "backend"): (lambda h: h["buf"].backend, VALUE),
    ("Buffer", "kind"): (lambda h: h["buf"].kind, VALUE),
    ("Buffer", "exports"): (lambda h: h["buf"].exports, VALUE),
    ("Buffer", "shape"): (lambda h: h["buf"].shape, VALUE),
    ("Buffer", "nbytes"): (lambda h: h["buf"].nbytes, VALUE),
    ("Buffer", "dtype"): (lambda h: h["buf"].dtype, VALUE),
    ("Buffer", "freed"): (lambda h: h["buf"].freed, VALUE),
    ("Buffer", "free"): (lambda h: h["other"].free(), SHUT),
    ("Queue", "launch"): (
        lambda h: h["q"].launch(h["kernel"], ((1, 1, 1), (4, 1, 1)), h["buf"], h["buf"], 1.0, 4),
        SHUT,
    ),
    ("Queue", "sync"): (lambda h: h["q"].sync(), SHUT),
    ("Queue", "is_idle"): (lambda h: h["q"].is_idle(), SHUT),
    ("Queue", "enqueue_host_fn"): (lambda h: h["q"].enqueue_host_fn(lambda: None), SHUT),
    ("Queue", "record"): (lambda h: h["q"].record(), SHUT),
    ("Queue", "wait"): (lambda h: h["q"].wait(h["event"]), SHUT),
    ("Queue", "write"): (lambda h: h["q"].write(h["buf"], b"abcd"), SHUT),
    ("Queue", "read"): (lambda h: h["q"].read(h["buf"], 0, 4), SHUT),
    ("Queue", "fill"): (lambda h: h["q"].fill(h["buf"], 0, 4, b"\x01"), SHUT),
    ("Queue", "copy"): (lambda h: h["q"].copy(h["buf"], 0, h["other"], 0, 4), SHUT),
    ("Event", "sync"): (lambda h: h["event"].sync(), SHUT),
    ("Event", "is_complete"): (lambda h: h["event"].is_complete(), SHUT),
    ("Event", "elapsed_since"): (lambda h: h["later"].elapsed_since(h["event"]), SHUT),
    ("Program", "load"): (lambda h: h["program"].load(h["dev"]), SHUT),
    ("Program", "id"): (lambda h: h["program"].id, VALUE),
    ("Program", "from_source"): (lambda h: offload.Program.from_source("int x;", "c"), VALUE),
    ("Module", "kernel"): (lambda h: h["module"].kernel("saxpy"), SHUT),
    ("Module", "kernels"): (lambda h: h["module"].kernels(), SHUT),
    ("Module", "unload"): (lambda h: h["module"].unload(), SHUT),
    ("Module", "id"): (lambda h: h["module"].id, VALUE),
    ("Kernel", "name"): (lambda h: h["kernel"].name, VALUE),
    ("Kernel", "params"): (lambda h: h["kernel"].params, VALUE),
    ("Kernel", "is_verified"): (lambda h: h["kernel"].is_verified, VALUE),
    ("IpcEndpoint", "name"): (lambda h: h["sender"].name, VALUE),
    ("IpcEndpoint", "connect"): (lambda h: h["sender"].connect(h["receiver"].name), SHUT),
    ("IpcEndpoint", "send"): (lambda h: h["sender"].send(0, h["buf"]), SHUT),
    ("IpcEndpoint", "recv"): (lambda h: h["receiver"].recv(timeout=0.01), SHUT),
    ("IpcEndpoint", "poll"): (lambda h: h["sender"].poll(), SHUT),
    ("IpcEndpoint", "close"): (lambda h: h["sender"].close(), SHUT),
    ("IpcHandle", "open"): (lambda h: h["handle"].open(h["rt"]), SHUT),
    ("IpcHandle", "offset"): (lambda h: h["handle"].offset, VALUE),
    ("IpcHandle", "nbytes"): (lambda h: h["handle"].nbytes, VALUE),
    ("IpcHandle", "backend"): (lambda h: h["handle"].backend, VALUE),
    ("IpcHandle", "pid"): (lambda h: h["handle"].pid, VALUE),
}

CLASSES = ["Offload", "Device", "Buffer", "Queue", "Event", "Program", "Module", "Kernel",
           "IpcEndpoint", "IpcHandle"]


def test_the_table_lists_every_public_name_of_every_handle_class():
    declared = {(c, n) for c in CLASSES for n in dir(getattr(offload, c)) if not n.startswith("_")}
    assert declared - TABLE.keys() == set(), "public names missing from TABLE"
    assert TABLE.keys() - declared == set(), "TABLE rows for no public name"


def _answers(h):
    # The watchdog: a call that hangs ends the run with every thread's traceback.
    faulthandler.dump_traceback_later(60, exit=True)
    try:
        return _calls(h)
    finally:
        faulthandler.cancel_dump_traceback_later()


def _calls(h):
    got = {}
    for (cls, name), (call, _) in TABLE.items():
        try:
            call(h)
            got[(cls, name)] = VALUE
        except offload.ShutDownError:
            got[(cls, name)] = SHUT
        except Exception as e:  # noqa: BLE001 -- any other answer is the failure reported
            got[(cls, name)] = f"{type(e).__name__}: {e}"
    return got


@pytest.mark.parametrize("when", ["after the last shutdown", "with the next runtime live"])
def test_every_handle_after_the_last_shutdown(when):
    rt, h = _handles()
    assert rt.shutdown() is True
    nxt = offload.Offload() if when != "after the last shutdown" else None
    try:
        got = _answers(h)
    finally:
        if nxt is not None:
            assert nxt.device("host").alloc(8).size == 8, "the next runtime works"
            nxt.shutdown()
    wrong = {k: v for k, v in got.items() if v != TABLE[k][1]}
    assert wrong == {}, f"{when}: answers other than the table's (L3)"
    assert offload.take_unreported_errors() == []


def test_a_send_to_an_unknown_peer_is_refused_not_a_hang():
    # The error used to take the peer list's lock a second time: this call hung for good.
    r = run_script(
        """
        import offload
        with offload.Offload() as rt:
            ep = rt.ipc_endpoint()
            buf = rt.device("host").alloc(64)
            try:
                ep.send(3, buf)
            except offload.InvalidArgumentError as e:
                print("refused:", e)
        """,
        timeout=20,
    )
    assert r.returncode == 0, r.stderr.decode()
    assert b"refused: IpcEndpoint.send" in r.stdout
    assert b"peer 3" in r.stdout
