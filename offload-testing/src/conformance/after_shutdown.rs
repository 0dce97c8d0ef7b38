//! L3 by exhaustion: every public method of every handle type, called on handles of a
//! generation that ended — once right after its last shutdown and once more while a new
//! generation is live — answers as [`METHODS`] says: `Error::ShutDown` for everything
//! that touches the runtime, the value for what is the handle's identity (its length, its
//! name, its device's index), never a panic or another error. Dropping every handle
//! afterwards is a no-op, and nothing is left unreported.
//!
//! [`METHODS`] is the list; the facade's `tests/after_shutdown.rs` checks it against the
//! public methods offload-core's source declares, so a method added without a row fails
//! there, and the fixed test (`handles_after_the_last_shutdown`) fails on a row it did not
//! call.

use std::collections::BTreeMap;
use std::time::Duration;

use offload_core::ipc::{IpcEndpoint, IpcHandle, PeerId, Received};
use offload_core::{
    Arg, Buffer, BufferView, Caller, Device, Dims, Error, Event, Kernel, MemKind, Module,
    Platforms, Program, Queue, Result, Source, TypedBuffer, take_unreported_errors,
};

use super::lifecycle::{first_device, init, last};
use super::{Check, Fixtures, err_text, nothing_unreported, ok};

/// What a method of a handle whose generation ended answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// `Err(Error::ShutDown)`: the call needs the runtime.
    ShutDown,
    /// The handle's identity, which outlives its runtime: the call succeeds (or returns a
    /// plain value).
    Identity,
}

use Answer::{Identity, ShutDown};

/// Every public method of the handle types, `(type, method, answer)`, as the facade
/// exports them. A `Program` belongs to no generation: only what needs a device answers
/// `ShutDown`.
///
/// ```
/// use offload_testing::conformance::after_shutdown::{Answer, METHODS};
/// assert!(METHODS.contains(&("Buffer", "read", Answer::ShutDown)));
/// ```
pub const METHODS: &[(&str, &str, Answer)] = &[
    ("Device", "backend", Identity),
    ("Device", "index", Identity),
    ("Device", "info", ShutDown),
    ("Device", "alloc", ShutDown),
    ("Device", "alloc_exportable", ShutDown),
    ("Device", "adopt", ShutDown),
    ("Device", "validate", ShutDown),
    ("Device", "queue", ShutDown),
    ("Device", "alloc_zeros", ShutDown),
    ("Device", "alloc_zeros_in", ShutDown),
    ("Device", "upload", ShutDown),
    ("Device", "import", ShutDown),
    ("Buffer", "label", Identity),
    ("Buffer", "label_text", Identity),
    ("Buffer", "len", Identity),
    ("Buffer", "is_empty", Identity),
    ("Buffer", "kind", Identity),
    ("Buffer", "device", Identity),
    ("Buffer", "read", ShutDown),
    ("Buffer", "write", ShutDown),
    ("Buffer", "fill", ShutDown),
    ("Buffer", "copy_from", ShutDown),
    ("Buffer", "address", ShutDown),
    ("Buffer", "with_mapped", ShutDown),
    ("Buffer", "export", ShutDown),
    ("Buffer", "free", ShutDown),
    ("TypedBuffer", "from_bytes", Identity),
    ("TypedBuffer", "label", Identity),
    ("TypedBuffer", "len", Identity),
    ("TypedBuffer", "is_empty", Identity),
    ("TypedBuffer", "as_bytes", Identity),
    ("TypedBuffer", "into_bytes", Identity),
    ("TypedBuffer", "slice", Identity),
    ("TypedBuffer", "to_vec", ShutDown),
    ("TypedBuffer", "read", ShutDown),
    ("TypedBuffer", "write", ShutDown),
    ("TypedBuffer", "free", ShutDown),
    ("BufferView", "len", Identity),
    ("BufferView", "is_empty", Identity),
    ("BufferView", "arg", Identity),
    ("BufferView", "to_vec", ShutDown),
    ("BufferView", "write", ShutDown),
    ("Queue", "label", Identity),
    ("Queue", "for_caller", Identity),
    ("Queue", "device", Identity),
    ("Queue", "id", Identity),
    ("Queue", "launch", ShutDown),
    ("Queue", "run", ShutDown),
    ("Queue", "run_resized", ShutDown),
    ("Queue", "sync", ShutDown),
    ("Queue", "write", ShutDown),
    ("Queue", "read", ShutDown),
    ("Queue", "fill", ShutDown),
    ("Queue", "copy", ShutDown),
    ("Queue", "enqueue_host_fn", ShutDown),
    ("Queue", "is_idle", ShutDown),
    ("Queue", "record", ShutDown),
    ("Queue", "wait", ShutDown),
    ("Event", "sync", ShutDown),
    ("Event", "is_complete", ShutDown),
    ("Event", "queue_id", Identity),
    ("Event", "elapsed_since", ShutDown),
    ("Program", "new", Identity),
    ("Program", "from_source", Identity),
    ("Program", "source", Identity),
    ("Program", "label", Identity),
    ("Program", "id", Identity),
    ("Program", "image", Identity),
    ("Program", "on_setup", Identity),
    ("Program", "on_teardown", Identity),
    ("Program", "load", ShutDown),
    ("Program", "compile_in_background", ShutDown),
    ("Program", "compile_finished", Identity),
    ("Module", "id", Identity),
    ("Module", "device", Identity),
    ("Module", "program", Identity),
    ("Module", "kernel", ShutDown),
    ("Module", "kernels", ShutDown),
    ("Module", "globals", ShutDown),
    ("Module", "global", ShutDown),
    ("Module", "read_global", ShutDown),
    ("Module", "write_global", ShutDown),
    ("Module", "unload", ShutDown),
    ("Kernel", "is_verified", Identity),
    ("Kernel", "workgroup_size", Identity),
    ("Kernel", "dims_for", Identity),
    ("Kernel", "name", Identity),
    ("Kernel", "params", Identity),
    ("Kernel", "check_arg_count", Identity),
    ("Kernel", "module", Identity),
    ("IpcEndpoint", "name", Identity),
    ("IpcEndpoint", "path", Identity),
    ("IpcEndpoint", "connect", ShutDown),
    ("IpcEndpoint", "send", ShutDown),
    ("IpcEndpoint", "recv", ShutDown),
    ("IpcEndpoint", "recv_timeout", ShutDown),
    ("IpcEndpoint", "wait_answered", ShutDown),
    ("IpcEndpoint", "poll", ShutDown),
    ("IpcEndpoint", "peers", Identity),
    ("IpcEndpoint", "mappings", Identity),
    ("IpcEndpoint", "cache_entries", Identity),
    ("IpcEndpoint", "close", ShutDown),
    ("Received", "peer", Identity),
    ("Received", "tag", Identity),
    ("Received", "buffer", Identity),
    ("Received", "into_buffer", Identity),
];

/// One of each handle, made while the generation ran.
struct Handles {
    dev: Device,
    buf: Buffer,
    other: Buffer,
    typed: TypedBuffer<u32>,
    queue: Queue,
    event: Event,
    later: Event,
    program: Program,
    module: Module,
    kernel: Kernel,
    /// `None` where the backend shares no memory between processes.
    ipc: Option<Ipc>,
}

/// The IPC handles: an imported buffer, two connected endpoints, a received range.
struct Ipc {
    imported: Buffer,
    sender: IpcEndpoint,
    receiver: IpcEndpoint,
    peer: PeerId,
    received: Received,
    exported: Option<IpcHandle>,
}

/// The rows a backend without IPC cannot reach.
fn needs_ipc(ty: &str, method: &str) -> bool {
    matches!(ty, "IpcEndpoint" | "Received") || (ty, method) == ("Device", "import")
}

/// What one call answered: `Ok(())` for a value, the error otherwise.
type Answered = BTreeMap<(&'static str, &'static str), Result<()>>;

/// Calls every method of [`METHODS`] on `h` (consuming methods on clones, or on `h`'s
/// own handles at the end).
fn call_all(mut h: Handles) -> Answered {
    let mut ipc = h.ipc.take();
    let mut got = Answered::new();
    let mut put = |ty: &'static str, method: &'static str, r: Result<()>| {
        got.insert((ty, method), r);
    };
    let value = |_: &dyn std::fmt::Debug| Ok(());
    let n = 4u32;
    let dims = Dims::grid([1, 1, 1]).block([4, 1, 1]);

    put("Device", "backend", value(&h.dev.backend()));
    put("Device", "index", value(&h.dev.index()));
    put("Device", "info", h.dev.info().map(drop));
    put(
        "Device",
        "alloc",
        h.dev.alloc(16, MemKind::Device).map(drop),
    );
    put(
        "Device",
        "alloc_exportable",
        h.dev.alloc_exportable(16, MemKind::Device).map(drop),
    );
    let mut host = vec![0u8; 16];
    // SAFETY: the memory is a live Vec of 16 bytes that the owner keeps; after shutdown
    // the call is refused before anything is touched.
    let adopted = unsafe { h.dev.adopt(host.as_mut_ptr() as u64, 16, MemKind::Host, ()) };
    put("Device", "adopt", adopted.map(drop));
    put("Device", "validate", h.dev.validate(b"junk"));
    put("Device", "queue", h.dev.queue().map(drop));
    put(
        "Device",
        "alloc_zeros",
        h.dev.alloc_zeros::<u32>(4).map(drop),
    );
    put(
        "Device",
        "alloc_zeros_in",
        h.dev.alloc_zeros_in::<u32>(4, MemKind::Host).map(drop),
    );
    put("Device", "upload", h.dev.upload(&[1u32, 2]).map(drop));
    if let Some(exported) = ipc.as_mut().and_then(|x| x.exported.take()) {
        put("Device", "import", h.dev.import(exported).map(drop));
    }

    let mut buffers = vec![&h.buf];
    if let Some(x) = &ipc {
        buffers.extend([&x.imported, x.received.buffer()]);
    }
    for b in buffers {
        put("Buffer", "label_text", value(&b.label_text()));
        put("Buffer", "len", value(&b.len()));
        put("Buffer", "is_empty", value(&b.is_empty()));
        put("Buffer", "kind", value(&b.kind()));
        put("Buffer", "device", value(&b.device()));
        let mut out = [0u8; 4];
        put("Buffer", "read", b.read(0, &mut out));
        put("Buffer", "write", b.write(0, &out));
        put("Buffer", "fill", b.fill(0, 4, 1));
        put("Buffer", "copy_from", h.other.copy_from(0, b, 0, 4));
        put("Buffer", "address", b.address().map(drop));
        put("Buffer", "with_mapped", b.with_mapped(|_| ()));
        put("Buffer", "export", b.export().map(drop));
    }

    put("TypedBuffer", "len", value(&h.typed.len()));
    put("TypedBuffer", "is_empty", value(&h.typed.is_empty()));
    put("TypedBuffer", "as_bytes", value(&h.typed.as_bytes().len()));
    put("TypedBuffer", "to_vec", h.typed.to_vec().map(drop));
    let mut words = [0u32; 2];
    put("TypedBuffer", "read", h.typed.read(0, &mut words));
    put("TypedBuffer", "write", h.typed.write(0, &words));
    {
        let view: BufferView<'_, u32> = h.typed.slice(1..3);
        put("TypedBuffer", "slice", value(&view.len()));
        put("BufferView", "len", value(&view.len()));
        put("BufferView", "is_empty", value(&view.is_empty()));
        put("BufferView", "arg", value(&view.arg()));
        put("BufferView", "to_vec", view.to_vec().map(drop));
        put("BufferView", "write", view.write(&words));
    }

    let q = &h.queue;
    put("Queue", "device", value(&q.device()));
    put("Queue", "id", value(&q.id()));
    let args = [Arg::buffer(&h.buf), Arg::scalar(&n)];
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    put("Queue", "launch", unsafe {
        q.launch(&h.kernel, dims, &args)
    });
    put("Queue", "run", q.run(&h.kernel, dims, &args));
    put(
        "Queue",
        "run_resized",
        q.run_resized(&h.kernel, dims, &args),
    );
    put("Queue", "sync", q.sync());
    put("Queue", "write", q.write(&h.buf, 0, &[1; 4]));
    let mut out = [0u8; 4];
    put("Queue", "read", q.read(&h.buf, 0, &mut out));
    put("Queue", "fill", q.fill(&h.buf, 0, 4, &[2]));
    put("Queue", "copy", q.copy(&h.buf, 0, &h.other, 0, 4));
    put("Queue", "enqueue_host_fn", q.enqueue_host_fn(|| {}));
    put("Queue", "is_idle", q.is_idle().map(drop));
    put("Queue", "record", q.record().map(drop));
    put("Queue", "wait", q.wait(&h.event));

    put("Event", "sync", h.event.sync());
    put("Event", "is_complete", h.event.is_complete().map(drop));
    put("Event", "queue_id", value(&h.event.queue_id()));
    put(
        "Event",
        "elapsed_since",
        h.later.elapsed_since(&h.event).map(drop),
    );

    let p = &h.program;
    put("Program", "new", value(&Program::new(p.image()).id()));
    put(
        "Program",
        "from_source",
        value(&Program::from_source(Source::c("int x;")).id()),
    );
    put("Program", "source", value(&p.source().is_some()));
    put("Program", "id", value(&p.id()));
    put("Program", "image", value(&p.image().len()));
    put("Program", "label", value(&p.clone().label("after").id()));
    put(
        "Program",
        "on_setup",
        value(&p.clone().on_setup(|_| Ok(())).id()),
    );
    put(
        "Program",
        "on_teardown",
        value(&p.clone().on_teardown(|_| Ok(())).id()),
    );
    put("Program", "load", p.load(&h.dev).map(drop));
    put(
        "Program",
        "compile_in_background",
        p.compile_in_background(&h.dev),
    );
    put(
        "Program",
        "compile_finished",
        value(&p.compile_finished(&h.dev)),
    );

    let m = &h.module;
    put("Module", "id", value(&m.id()));
    put("Module", "device", value(&m.device()));
    put("Module", "program", value(&m.program().id()));
    put("Module", "kernel", m.kernel("add_one").map(drop));
    put("Module", "kernels", m.kernels().map(drop));
    put("Module", "globals", m.globals().map(drop));
    put("Module", "global", m.global("counter").map(drop));
    put(
        "Module",
        "read_global",
        m.read_global("counter", 0, &mut out),
    );
    put("Module", "write_global", m.write_global("counter", 0, &out));

    let k = &h.kernel;
    put("Kernel", "is_verified", value(&k.is_verified()));
    put("Kernel", "workgroup_size", value(&k.workgroup_size()));
    put("Kernel", "dims_for", value(&k.dims_for(64)));
    put("Kernel", "name", value(&k.name()));
    put("Kernel", "params", value(&k.params()));
    put(
        "Kernel",
        "check_arg_count",
        k.check_arg_count(Caller::Rust, "Kernel::check_arg_count", k.params().len()),
    );
    put("Kernel", "module", value(&k.module().id()));

    if let Some(x) = ipc {
        let e = &x.sender;
        put("IpcEndpoint", "name", value(&e.name()));
        put("IpcEndpoint", "path", value(&e.path()));
        put(
            "IpcEndpoint",
            "connect",
            e.connect(x.receiver.name()).map(drop),
        );
        put("IpcEndpoint", "send", e.send(x.peer, &x.imported, 0, 4, 9));
        put("IpcEndpoint", "recv", x.receiver.recv().map(drop));
        put(
            "IpcEndpoint",
            "recv_timeout",
            x.receiver.recv_timeout(Duration::from_millis(10)).map(drop),
        );
        put(
            "IpcEndpoint",
            "wait_answered",
            e.wait_answered(x.peer, Duration::from_millis(10)),
        );
        put("IpcEndpoint", "poll", e.poll());
        put("IpcEndpoint", "peers", value(&e.peers()));
        put("IpcEndpoint", "mappings", value(&e.mappings()));
        put("IpcEndpoint", "cache_entries", value(&e.cache_entries()));

        put("Received", "peer", value(&x.received.peer()));
        put("Received", "tag", value(&x.received.tag()));

        // What consumes its handle, last.
        put("Received", "buffer", value(&x.received.buffer().len()));
        let from_received = x.received.into_buffer();
        put("Received", "into_buffer", value(&from_received.len()));
        put("Buffer", "free", from_received.free());
        put("IpcEndpoint", "close", x.sender.close());
        drop(x.receiver);
        put("Buffer", "free", x.imported.free());
    }
    put("Module", "unload", h.module.unload());
    let queue = h.queue.for_caller(Caller::C);
    put("Queue", "for_caller", value(&queue.id()));
    put("Queue", "label", value(&queue.label("after").id()));
    let bytes = h.typed.label("after").into_bytes();
    put("TypedBuffer", "label", Ok(()));
    put("TypedBuffer", "into_bytes", value(&bytes.len()));
    put(
        "TypedBuffer",
        "free",
        TypedBuffer::<u32>::from_bytes(bytes).and_then(TypedBuffer::free),
    );
    put(
        "TypedBuffer",
        "from_bytes",
        TypedBuffer::<u32>::from_bytes(h.other).map(drop),
    );
    let labelled = h.buf.label("after");
    put("Buffer", "label", value(&labelled.len()));
    put("Buffer", "free", labelled.free());
    drop((h.event, h.later, h.kernel, h.dev, host));
    got
}

/// Checks `got` against [`METHODS`]: every row called, each with its answer.
fn check(when: &str, with_ipc: bool, got: &Answered) -> Check {
    let mut wrong = Vec::new();
    for &(ty, method, answer) in METHODS {
        let what = format!("{ty}::{method}");
        match (got.get(&(ty, method)), answer) {
            (None, _) if !with_ipc && needs_ipc(ty, method) => {}
            (None, _) => wrong.push(format!("{what}: not called by the table test")),
            (Some(Err(Error::ShutDown { .. })), ShutDown) | (Some(Ok(())), Identity) => {}
            (Some(Ok(())), ShutDown) => wrong.push(format!("{what}: Ok, not Error::ShutDown")),
            (Some(Err(e)), _) => wrong.push(format!("{what}: {}", err_text(e))),
        }
    }
    for (ty, method) in got.keys() {
        if !METHODS.iter().any(|&(t, m, _)| (t, m) == (*ty, *method)) {
            wrong.push(format!("{ty}::{method}: called, but not in METHODS"));
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{when}, {} of {} methods answered wrongly (L3):\n  {}",
            wrong.len(),
            METHODS.len(),
            wrong.join("\n  ")
        ))
    }
}

/// Makes one of each handle in a fresh generation; returns them with the runtime.
fn make<P: Platforms>(
    fixtures: &Fixtures,
) -> Check<(offload_core::Offload<offload_core::Ready, P>, Handles)> {
    let rt = init::<P>()?;
    let dev = first_device(&rt)?;
    let buf = ok("Device::alloc", dev.alloc(16, MemKind::Device))?;
    let other = ok("Device::alloc", dev.alloc(16, MemKind::Device))?;
    let typed = ok("Device::upload", dev.upload(&[1u32, 2, 3, 4]))?;
    let queue = ok("Device::queue", dev.queue())?;
    let event = ok("Queue::record", queue.record())?;
    let later = ok("Queue::record", queue.record())?;
    let program = Program::new(&fixtures.image);
    let module = ok("Program::load", program.load(&dev))?;
    let kernel = ok("Module::kernel", module.kernel("add_one"))?;
    let ipc = match dev.alloc_exportable(64, MemKind::Device) {
        Err(Error::Unsupported { .. }) => None,
        shared => {
            let shared = ok("Device::alloc_exportable", shared)?;
            let exported = ok("Buffer::export", shared.export())?;
            let imported = ok("Device::import", dev.import(exported))?;
            let exported = Some(ok("Buffer::export", shared.export())?);
            let sender = ok("Offload::ipc_endpoint", rt.ipc_endpoint())?;
            let receiver = ok("Offload::ipc_endpoint", rt.ipc_endpoint())?;
            let peer = ok("IpcEndpoint::connect", sender.connect(receiver.name()))?;
            ok("IpcEndpoint::send", sender.send(peer, &shared, 0, 16, 7))?;
            let received = ok("IpcEndpoint::recv", receiver.recv())?;
            Some(Ipc {
                imported,
                sender,
                receiver,
                peer,
                received,
                exported,
            })
        }
    };
    ok("Queue::sync", queue.sync())?;
    let handles = Handles {
        dev,
        buf,
        other,
        typed,
        queue,
        event,
        later,
        program,
        module,
        kernel,
        ipc,
    };
    Ok((rt, handles))
}

/// The fixed test: the table right after the last shutdown, then again with a new
/// generation live; the new generation still works and nothing is left unreported.
pub(super) fn handles_after_the_last_shutdown<P: Platforms>(fixtures: &Fixtures) -> Check {
    // What earlier tests' implicit shutdowns left (the re-entrancy cells plant panics).
    drop(take_unreported_errors());
    let (rt, handles) = make::<P>(fixtures)?;
    let with_ipc = handles.ipc.is_some();
    last(rt)?;
    check("after the last shutdown", with_ipc, &call_all(handles))?;

    let (rt, handles) = make::<P>(fixtures)?;
    last(rt)?;
    let rt2 = init::<P>()?;
    check(
        "with the next generation live",
        with_ipc,
        &call_all(handles),
    )?;
    let dev = first_device(&rt2)?;
    let buf = ok(
        "Device::alloc (new generation)",
        dev.alloc(16, MemKind::Device),
    )?;
    ok("Buffer::fill (new generation)", buf.fill(0, 16, 3))?;
    ok("Buffer::free (new generation)", buf.free())?;
    drop(dev);
    last(rt2)?;
    nothing_unreported("left unreported")
}
