//! The proptest state machine: random operation lists run by 1–4 real threads at once,
//! each against its own model of its buffers and modules (see the suite's documentation).

#![allow(unsafe_code)]

use super::*;

/// One operation of a thread. Indices are taken modulo the number of live objects when the
/// operation runs (so shrinking keeps every list valid); operations that need a runtime
/// while the thread holds none, or an object it does not have, are skipped.
#[derive(Clone, Debug)]
pub(super) enum Op {
    /// Take a reference: `init()` when the thread holds none; otherwise a second one
    /// (`clone()` or `init()`) that must be of the same generation and not the last.
    Init { clone: bool },
    /// Give the reference back, then use every old handle once (`ShutDown` or success) and
    /// drop them. With `verify`, first read every buffer back and compare it with the model;
    /// without, shut down with launches possibly in flight (L4 drains them).
    Shutdown { verify: bool },
    /// Allocate `size` bytes (0 must be `InvalidArgument`), exportable to other processes
    /// where the backend can, and fill them with `pattern`.
    Alloc {
        size: u16,
        pattern: u8,
        exportable: bool,
    },
    /// Share a range of an exportable buffer: export it and import it again
    /// (`Buffer::export` + `Device::import`), or send it from one of this thread's
    /// endpoints to the other; read the view against the model, write `byte` through it.
    Share {
        buffer: u8,
        offset: u16,
        len: u16,
        via_endpoint: bool,
        byte: u8,
    },
    /// Free a buffer: `free()` or drop. Unless `racing`, first sync and compare it with
    /// the model; `racing` frees it while queued work may still use it (Q1: the release
    /// waits for, or defers behind, that work).
    Free {
        buffer: u8,
        explicit: bool,
        racing: bool,
    },
    /// Write `data` at `offset % (len + 9)` (or near `usize::MAX` if `huge`): queued on the
    /// first or `second` queue (`via_queue`), or from the host, which must order after the
    /// queued work on the buffer (Q1).
    Write {
        buffer: u8,
        offset: u16,
        data: Vec<u8>,
        huge: bool,
        via_queue: bool,
        second: bool,
    },
    /// Queue a fill of `len % 65` bytes at `offset % (size + 9)` with `pattern` (1–16
    /// bytes; a length it does not divide must be `InvalidArgument`).
    Fill {
        buffer: u8,
        offset: u16,
        len: u16,
        pattern: Vec<u8>,
        second: bool,
    },
    /// Queue a copy of `len % 65` bytes between two buffers (or two ranges of one, which
    /// must not overlap).
    Copy {
        src: u8,
        dst: u8,
        src_offset: u16,
        dst_offset: u16,
        len: u16,
        second: bool,
    },
    /// Queue a host function that checks it runs after every host function enqueued
    /// before it, on either queue.
    HostFn { second: bool },
    /// Read `len` bytes at `offset % (len + 9)` (or near `usize::MAX` if `huge`): through
    /// the first queue, or from the host, which must see the queued work (Q1).
    Read {
        buffer: u8,
        offset: u16,
        len: u8,
        huge: bool,
        via_queue: bool,
    },
    /// Load the program shared by all threads, or this thread's own.
    Load { shared: bool },
    /// Drop a module handle (shared program), or `unload()` it (own program).
    Unload { module: u8 },
    /// Launch a kernel of a held module on a buffer, on the first or `second` queue; `n` is
    /// taken modulo the buffer's words + 1; `cached` reuses a `Kernel` looked up before.
    Launch {
        module: u8,
        kernel: KernelKind,
        buffer: u8,
        n: u16,
        value: u32,
        grid: u8,
        block: u8,
        cached: bool,
        second: bool,
    },
    /// Sync both queues (`Queue::sync`, or the first through an event), then check that
    /// they are idle, the event complete, and every host function ran in order.
    Sync { event: bool },
}

pub(super) fn op_strategy() -> impl Strategy<Value = Op> {
    let kernel = prop_oneof![
        Just(KernelKind::AddOne),
        Just(KernelKind::Fill),
        Just(KernelKind::Noop)
    ];
    let size = prop_oneof![1 => Just(0u16), 24 => 1u16..=256];
    let huge = proptest::bool::weighted(0.05);
    let pattern = prop_oneof![
        (0usize..5).prop_flat_map(|k| vec(any::<u8>(), 1usize << k)),
        vec(any::<u8>(), 1..=16),
    ];
    prop_oneof![
        3 => any::<bool>().prop_map(|clone| Op::Init { clone }),
        2 => any::<bool>().prop_map(|verify| Op::Shutdown { verify }),
        6 => (size, any::<u8>(), any::<bool>())
            .prop_map(|(size, pattern, exportable)| Op::Alloc { size, pattern, exportable }),
        3 => (any::<u8>(), any::<u16>(), any::<u16>(), any::<bool>(), any::<u8>())
            .prop_map(|(buffer, offset, len, via_endpoint, byte)| Op::Share {
                buffer, offset, len, via_endpoint, byte,
            }),
        2 => (any::<u8>(), any::<bool>(), any::<bool>())
            .prop_map(|(buffer, explicit, racing)| Op::Free { buffer, explicit, racing }),
        5 => (any::<u8>(), any::<u16>(), vec(any::<u8>(), 0..=32), huge, any::<bool>(), any::<bool>())
            .prop_map(|(buffer, offset, data, huge, via_queue, second)| Op::Write {
                buffer, offset, data, huge, via_queue, second,
            }),
        3 => (any::<u8>(), any::<u16>(), any::<u16>(), pattern, any::<bool>())
            .prop_map(|(buffer, offset, len, pattern, second)| Op::Fill {
                buffer, offset, len, pattern, second,
            }),
        3 => (any::<u8>(), any::<u8>(), any::<u16>(), any::<u16>(), any::<u16>(), any::<bool>())
            .prop_map(|(src, dst, src_offset, dst_offset, len, second)| Op::Copy {
                src, dst, src_offset, dst_offset, len, second,
            }),
        2 => any::<bool>().prop_map(|second| Op::HostFn { second }),
        5 => (any::<u8>(), any::<u16>(), 0u8..=64, huge, any::<bool>())
            .prop_map(|(buffer, offset, len, huge, via_queue)| Op::Read {
                buffer, offset, len, huge, via_queue,
            }),
        3 => any::<bool>().prop_map(|shared| Op::Load { shared }),
        2 => any::<u8>().prop_map(|module| Op::Unload { module }),
        8 => (any::<u8>(), kernel, any::<u8>(), any::<u16>(), any::<u32>(), 1u8..=4, 1u8..=64, (any::<bool>(), any::<bool>()))
            .prop_map(|(module, kernel, buffer, n, value, grid, block, (cached, second))| Op::Launch {
                module, kernel, buffer, n, value, grid, block, cached, second,
            }),
        3 => any::<bool>().prop_map(|event| Op::Sync { event }),
    ]
}

/// What the threads of one case share.
pub(super) struct CaseShared<'a> {
    image: &'a [u8],
    /// The program every thread loads (modules shared across threads).
    program: Program,
    tracker: Arc<Tracker>,
    /// Per generation: the id of the shared program's module and how many threads hold a
    /// handle to it under a live reference (P2: while any does, every load gives that id).
    registry: Mutex<HashMap<u64, (u64, usize)>>,
}

/// A thread's live reference and what it made first.
pub(super) struct Held<P> {
    rt: Offload<Ready, P>,
    generation: u64,
    dev: Device,
    queue: Queue,
    /// A second queue of the same device: work on one queue after work on the other waits
    /// for an event of the other first, so the model stays sequential.
    queue2: Queue,
    /// Two endpoints, the first connected to the second (made at the first send).
    ipc: Option<(IpcEndpoint, IpcEndpoint, PeerId)>,
}

impl<P> Held<P> {
    fn q(&self, i: usize) -> &Queue {
        if i == 0 { &self.queue } else { &self.queue2 }
    }
}

pub(super) struct BufferModel {
    buffer: Buffer,
    model: Vec<u8>,
    exportable: bool,
}

pub(super) struct ModuleSlot {
    id: u64,
    shared: bool,
    /// `None` once this handle was consumed by `unload()`.
    module: Option<Module>,
    kernels: Vec<(KernelKind, Kernel)>,
    /// The module was unloaded explicitly (through this or another handle).
    unloaded: bool,
}

/// One thread of a case, with its model.
pub(super) struct Worker<'a, P> {
    shared: &'a CaseShared<'a>,
    /// This thread's own program.
    private: Program,
    held: Option<Held<P>>,
    buffers: Vec<BufferModel>,
    modules: Vec<ModuleSlot>,
    /// Work may be queued on each queue (no sync since).
    pending: [bool; 2],
    /// Host functions this thread enqueued, ran, and whether one ran out of order.
    host_fns: (u64, Arc<AtomicU64>, Arc<AtomicBool>),
    /// The generation in which this thread counts as a holder of the shared module.
    registered: Option<u64>,
}

pub(super) fn resolve_offset(offset: u16, huge: bool, size: usize) -> usize {
    if huge {
        usize::MAX - usize::from(offset % 64)
    } else {
        usize::from(offset) % (size + 9)
    }
}

pub(super) fn in_range(offset: usize, len: usize, size: usize) -> bool {
    offset.checked_add(len).is_some_and(|end| end <= size)
}

impl<'a, P: Platforms> Worker<'a, P> {
    fn new(shared: &'a CaseShared<'a>) -> Self {
        Worker {
            shared,
            private: tracked_program(shared.image, &shared.tracker),
            held: None,
            buffers: Vec::new(),
            modules: Vec::new(),
            pending: [false; 2],
            host_fns: Default::default(),
            registered: None,
        }
    }

    fn register(&mut self, generation: u64, id: u64) -> Check {
        let mut registry = lock(&self.shared.registry);
        match registry.get_mut(&generation) {
            Some((held_id, holders)) => {
                ensure!(
                    *held_id == id,
                    "P2: load gave module {id} while module {held_id} of the same program and \
                     device is held in generation {generation} by {holders} thread(s)"
                );
                if self.registered.is_none() {
                    *holders += 1;
                }
            }
            None => {
                registry.insert(generation, (id, 1));
            }
        }
        self.registered = Some(generation);
        Ok(())
    }

    fn deregister(&mut self) {
        if let Some(generation) = self.registered.take() {
            let mut registry = lock(&self.shared.registry);
            if let Some(entry) = registry.get_mut(&generation) {
                entry.1 -= 1;
                if entry.1 == 0 {
                    registry.remove(&generation);
                }
            }
        }
    }

    fn sync_if_pending(&mut self) -> Check {
        if let Some(h) = &self.held {
            for (i, q) in [&h.queue, &h.queue2].into_iter().enumerate() {
                if self.pending[i] {
                    ok("Queue::sync", q.sync())?;
                }
            }
        }
        self.pending = [false; 2];
        self.check_host_fns()
    }

    /// With both queues synced: every host function enqueued ran, each after the ones
    /// enqueued before it.
    fn check_host_fns(&self) -> Check {
        let (issued, ran, out_of_order) = &self.host_fns;
        ensure!(
            !out_of_order.load(Ordering::SeqCst),
            "Q1: a host function ran before one enqueued earlier (same or other queue, \
             ordered by an event)"
        );
        let ran = ran.load(Ordering::SeqCst);
        ensure!(
            ran == *issued,
            "Q1: {ran} of {issued} host functions had run when both queues were synced"
        );
        Ok(())
    }

    /// The queue for work on queue `second`, after making it wait for the other queue's
    /// pending work through an event (so the model stays sequential).
    fn queue_for(&mut self, second: bool) -> Check<usize> {
        let (i, j) = if second { (1, 0) } else { (0, 1) };
        if self.pending[j] {
            if let Some(h) = &self.held {
                let (qi, qj) = if second {
                    (&h.queue2, &h.queue)
                } else {
                    (&h.queue, &h.queue2)
                };
                let e = ok("Queue::record", qj.record())?;
                ensure!(
                    e.queue_id() == qj.id(),
                    "Event::queue_id is {}, recorded on queue {}",
                    e.queue_id(),
                    qj.id()
                );
                ok("Queue::wait for the other queue's event", qi.wait(&e))?;
            }
        }
        Ok(i)
    }

    fn step(&mut self, op: &Op) -> Check {
        match *op {
            Op::Init { clone } => self.init(clone),
            Op::Shutdown { verify } => self.shutdown(verify),
            Op::Alloc {
                size,
                pattern,
                exportable,
            } => {
                let Some(h) = &self.held else { return Ok(()) };
                let size = usize::from(size);
                let (r, exportable) = if exportable {
                    match h.dev.alloc_exportable(size, MemKind::Device) {
                        // A backend without IPC: an ordinary buffer, and no sharing.
                        Err(Error::Unsupported { .. }) => {
                            (h.dev.alloc(size, MemKind::Device), false)
                        }
                        r => (r, true),
                    }
                } else {
                    (h.dev.alloc(size, MemKind::Device), false)
                };
                if size == 0 {
                    return invalid_arg("Device::alloc(0)", r);
                }
                let buffer = ok("Device::alloc", r)?;
                ensure!(
                    buffer.len() == size,
                    "Buffer::len is {}, allocated {size}",
                    buffer.len()
                );
                ok(
                    "Buffer::fill of a new buffer",
                    buffer.fill(0, size, pattern),
                )?;
                self.buffers.push(BufferModel {
                    buffer,
                    model: vec![pattern; size],
                    exportable,
                });
                Ok(())
            }
            Op::Share {
                buffer,
                offset,
                len,
                via_endpoint,
                byte,
            } => self.share(buffer, offset, len, via_endpoint, byte),
            Op::Free {
                buffer,
                explicit,
                racing,
            } => {
                if self.held.is_none() || self.buffers.is_empty() {
                    return Ok(());
                }
                let index = usize::from(buffer) % self.buffers.len();
                if !racing {
                    self.sync_if_pending()?;
                    self.verify(index)?;
                }
                let b = self.buffers.remove(index);
                if explicit {
                    ok("Buffer::free", b.buffer.free())?;
                }
                Ok(())
            }
            Op::Write {
                buffer,
                offset,
                ref data,
                huge,
                via_queue,
                second,
            } => {
                if self.held.is_none() || self.buffers.is_empty() {
                    return Ok(());
                }
                let q = if via_queue {
                    self.queue_for(second)?
                } else {
                    0
                };
                let Some(h) = &self.held else { return Ok(()) };
                let index = usize::from(buffer) % self.buffers.len();
                let b = &mut self.buffers[index];
                let offset = resolve_offset(offset, huge, b.model.len());
                let what = format!(
                    "write of {} bytes at {offset} into buffer {index} ({} bytes)",
                    data.len(),
                    b.model.len()
                );
                let r = if via_queue {
                    h.q(q).write(&b.buffer, offset, data)
                } else {
                    b.buffer.write(offset, data)
                };
                if !in_range(offset, data.len(), b.model.len()) {
                    return invalid_arg(what, r);
                }
                ok(what, r)?;
                b.model[offset..offset + data.len()].copy_from_slice(data);
                if via_queue {
                    self.pending[q] = true;
                }
                Ok(())
            }
            Op::Fill {
                buffer,
                offset,
                len,
                ref pattern,
                second,
            } => self.fill(buffer, offset, len, pattern, second),
            Op::Copy {
                src,
                dst,
                src_offset,
                dst_offset,
                len,
                second,
            } => self.copy(src, dst, (src_offset, dst_offset), len, second),
            Op::HostFn { second } => {
                if self.held.is_none() {
                    return Ok(());
                }
                let q = self.queue_for(second)?;
                let Some(h) = &self.held else { return Ok(()) };
                let (issued, ran, out_of_order) = &mut self.host_fns;
                let (n, ran, out_of_order) = (*issued, ran.clone(), out_of_order.clone());
                ok(
                    "Queue::enqueue_host_fn",
                    h.q(q).enqueue_host_fn(move || {
                        if ran
                            .compare_exchange(n, n + 1, Ordering::SeqCst, Ordering::SeqCst)
                            .is_err()
                        {
                            out_of_order.store(true, Ordering::SeqCst);
                        }
                    }),
                )?;
                self.host_fns.0 += 1;
                self.pending[q] = true;
                Ok(())
            }
            Op::Read {
                buffer,
                offset,
                len,
                huge,
                via_queue,
            } => {
                let Some(h) = &self.held else { return Ok(()) };
                if self.buffers.is_empty() {
                    return Ok(());
                }
                let index = usize::from(buffer) % self.buffers.len();
                let b = &self.buffers[index];
                let offset = resolve_offset(offset, huge, b.model.len());
                let mut out = vec![0xEEu8; usize::from(len)];
                let what = format!(
                    "read of {len} bytes at {offset} from buffer {index} ({} bytes)",
                    b.model.len()
                );
                let use_queue = via_queue;
                let r = if use_queue {
                    h.queue.read(&b.buffer, offset, &mut out)
                } else {
                    b.buffer.read(offset, &mut out)
                };
                if !in_range(offset, out.len(), b.model.len()) {
                    return invalid_arg(what, r);
                }
                ok(&what, r)?;
                same_bytes(&what, &out, &b.model[offset..offset + out.len()])?;
                if use_queue {
                    self.pending[0] = false;
                }
                Ok(())
            }
            Op::Load { shared } => self.load(shared),
            Op::Unload { module } => self.unload(module),
            Op::Launch {
                module,
                kernel,
                buffer,
                n,
                value,
                grid,
                block,
                cached,
                second,
            } => {
                if self.held.is_none() {
                    return Ok(());
                }
                let q = self.queue_for(second)?;
                self.launch(module, kernel, buffer, n, value, (grid, block), cached, q)
            }
            Op::Sync { event } => {
                let Some(h) = &self.held else { return Ok(()) };
                if event {
                    let e = ok("Queue::record", h.queue.record())?;
                    ok("Event::sync", e.sync())?;
                    ensure!(
                        ok("Event::is_complete", e.is_complete())?,
                        "Event::is_complete is false after Event::sync"
                    );
                } else {
                    ok("Queue::sync", h.queue.sync())?;
                }
                ok("Queue::sync", h.queue2.sync())?;
                for q in [&h.queue, &h.queue2] {
                    ensure!(
                        ok("Queue::is_idle", q.is_idle())?,
                        "Queue::is_idle is false after the queue was synced"
                    );
                }
                self.pending = [false; 2];
                self.check_host_fns()
            }
        }
    }

    fn init(&mut self, clone: bool) -> Check {
        if let Some(h) = &self.held {
            let extra = if clone {
                h.rt.clone()
            } else {
                ok(
                    "Offload::init while holding a reference",
                    Offload::<Ready, P>::init(),
                )?
            };
            ensure!(
                extra.generation() == h.generation,
                "L1: a second reference taken while this thread holds generation {} is of \
                 generation {}",
                h.generation,
                extra.generation()
            );
            let down = ok("Offload::shutdown of a second reference", extra.shutdown())?;
            ensure!(
                !down.was_last(),
                "L1: shutting down a second reference said it was the last while this thread \
                 still holds one"
            );
            return Ok(());
        }
        let rt = ok("Offload::init", Offload::<Ready, P>::init())?;
        let dev = first_device(&rt)?;
        let queue = ok("Device::queue", dev.queue())?;
        let queue2 = ok("Device::queue", dev.queue())?;
        let generation = rt.generation();
        self.held = Some(Held {
            rt,
            generation,
            dev,
            queue,
            queue2,
            ipc: None,
        });
        Ok(())
    }

    /// `Op::Share`: a range of an exportable buffer through `export` + `import`, or through
    /// an endpoint; the view must hold the model's bytes, and a write through it must be
    /// seen by the buffer.
    fn share(&mut self, buffer: u8, offset: u16, len: u16, via_endpoint: bool, byte: u8) -> Check {
        if self.held.is_none() {
            return Ok(());
        }
        let Some(index) = (0..self.buffers.len())
            .map(|i| (i + usize::from(buffer)) % self.buffers.len())
            .find(|&i| self.buffers[i].exportable)
        else {
            return Ok(());
        };
        // Kernels still running on the buffer would race the view's reads.
        self.sync_if_pending()?;
        let Some(h) = &mut self.held else {
            return Ok(());
        };
        let b = &mut self.buffers[index];
        let size = b.model.len();
        let offset = usize::from(offset) % size;
        let len = usize::from(len) % (size - offset) + 1;
        let what = format!("{len} bytes at {offset} of exportable buffer {index} ({size} bytes)");
        let view = if via_endpoint {
            if h.ipc.is_none() {
                let a = ok("Offload::ipc_endpoint", h.rt.ipc_endpoint())?;
                let b = ok("Offload::ipc_endpoint", h.rt.ipc_endpoint())?;
                let peer = ok("IpcEndpoint::connect", a.connect(b.name()))?;
                h.ipc = Some((a, b, peer));
            }
            let Some((a, b_end, peer)) = &h.ipc else {
                return Ok(());
            };
            ok(
                format!("IpcEndpoint::send of {what}"),
                a.send(*peer, &b.buffer, offset, len, index as u64),
            )?;
            let got = ok(
                "IpcEndpoint::recv",
                b_end.recv_timeout(std::time::Duration::from_secs(10)),
            )?;
            let Some(got) = got else {
                return Err(format!(
                    "IpcEndpoint::recv: nothing arrived for a send of {what}"
                ));
            };
            ensure!(
                got.tag() == index as u64,
                "the view came with tag {}",
                got.tag()
            );
            got.into_buffer()
        } else {
            let handle = ok(format!("Buffer::export of {what}"), b.buffer.export())?;
            let handle = ok("IpcHandle::range", handle.range(offset as u64, len as u64))?;
            let (bytes, fd) = handle.into_parts();
            let handle = ok("IpcHandle::from_parts", IpcHandle::from_parts(&bytes, fd))?;
            ok(format!("Device::import of {what}"), h.dev.import(handle))?
        };
        ensure!(
            view.len() == len,
            "the view of {what} has {} bytes",
            view.len()
        );
        let mut out = vec![0u8; len];
        ok(
            format!("read of the view of {what}"),
            view.read(0, &mut out),
        )?;
        same_bytes(
            &format!("view of {what}"),
            &out,
            &b.model[offset..offset + len],
        )?;
        ok(
            format!("write through the view of {what}"),
            view.write(0, &[byte]),
        )?;
        b.model[offset] = byte;
        drop(view);
        Ok(())
    }

    fn load(&mut self, shared: bool) -> Check {
        let Some(h) = &self.held else { return Ok(()) };
        let program = if shared {
            &self.shared.program
        } else {
            &self.private
        };
        let which = if shared {
            "the shared program"
        } else {
            "this thread's program"
        };
        let module = ok(format!("Program::load of {which}"), program.load(&h.dev))?;
        let id = module.id();
        ensure!(
            module.device() == h.dev,
            "Module::device is not the device it was loaded on"
        );
        for slot in self.modules.iter().filter(|s| s.shared == shared) {
            if slot.unloaded {
                ensure!(
                    slot.id != id,
                    "loading {which} after Module::unload gave back the unloaded module {id}"
                );
            } else {
                ensure!(
                    slot.id == id,
                    "P2: this thread holds module {} of {which}, and loading it again gave \
                     module {id}",
                    slot.id
                );
            }
        }
        let generation = h.generation;
        if shared {
            self.register(generation, id)?;
        }
        self.modules.push(ModuleSlot {
            id,
            shared,
            module: Some(module),
            kernels: Vec::new(),
            unloaded: false,
        });
        Ok(())
    }

    fn unload(&mut self, module: u8) -> Check {
        if self.held.is_none() || self.modules.is_empty() {
            return Ok(());
        }
        // No sync: unloading while launches of the module are queued must wait for (or
        // defer behind) them.
        let index = usize::from(module) % self.modules.len();
        if self.modules[index].shared {
            let slot = self.modules.remove(index);
            if !self.modules.iter().any(|s| s.shared) {
                // Before the handle goes: the registry must never count a holder that is not.
                self.deregister();
            }
            drop(slot);
        } else if let Some(m) = self.modules[index].module.take() {
            let id = self.modules[index].id;
            ok("Module::unload", m.unload())?;
            for slot in self.modules.iter_mut().filter(|s| !s.shared && s.id == id) {
                slot.unloaded = true;
            }
        } else {
            self.modules.remove(index);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn launch(
        &mut self,
        module: u8,
        kind: KernelKind,
        buffer: u8,
        n: u16,
        value: u32,
        (grid, block): (u8, u8),
        cached: bool,
        q: usize,
    ) -> Check {
        let Some(h) = &self.held else { return Ok(()) };
        if self.modules.is_empty() {
            return Ok(());
        }
        let target = match kind {
            KernelKind::Noop => None,
            _ if self.buffers.is_empty() => return Ok(()),
            _ => Some(usize::from(buffer) % self.buffers.len()),
        };
        let count = self.modules.len();
        let slot = &mut self.modules[usize::from(module) % count];
        let known = slot
            .kernels
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, k)| k.clone());
        let kernel = match (known, &slot.module) {
            (Some(k), _) if cached || slot.module.is_none() => k,
            (_, Some(m)) => {
                let r = m.kernel(kind.name());
                if slot.unloaded {
                    return invalid_arg(
                        format!("Module::kernel({:?}) of an unloaded module", kind.name()),
                        r,
                    );
                }
                let k = ok(format!("Module::kernel({:?})", kind.name()), r)?;
                ensure!(
                    kind.declared_by(k.params()),
                    "kernel `{}` declares {:?}, expected {:?}",
                    kind.name(),
                    k.params(),
                    kind.params()
                );
                if cached {
                    slot.kernels.push((kind, k.clone()));
                }
                k
            }
            (_, None) => return Ok(()),
        };
        let (grid, block) = (u32::from(grid), u32::from(block));
        let b = target.map(|i| &self.buffers[i]);
        let words = b.map_or(0, |b| b.model.len() / 4) as u32;
        let n = u32::from(n) % (words + 1);
        let args = kind.args(b.map(|b| &b.buffer), value, n);
        let what = format!(
            "launch of {}(value {value}, n {n}) on {grid}x{block} threads{}",
            kind.name(),
            target.map_or(String::new(), |i| format!(" on buffer {i}"))
        );
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        let r = unsafe { h.q(q).launch(&kernel, dims(grid, block), &args) };
        drop(args);
        if slot.unloaded {
            return invalid_arg(format!("{what} (its module was unloaded)"), r);
        }
        ok(&what, r)?;
        if let Some(i) = target {
            kind.apply(
                &mut self.buffers[i].model,
                value,
                n,
                u64::from(grid) * u64::from(block),
            );
        }
        self.pending[q] = true;
        Ok(())
    }

    /// `Op::Fill`.
    fn fill(&mut self, buffer: u8, offset: u16, len: u16, pattern: &[u8], second: bool) -> Check {
        if self.held.is_none() || self.buffers.is_empty() {
            return Ok(());
        }
        let q = self.queue_for(second)?;
        let Some(h) = &self.held else { return Ok(()) };
        let index = usize::from(buffer) % self.buffers.len();
        let b = &mut self.buffers[index];
        let offset = usize::from(offset) % (b.model.len() + 9);
        let len = usize::from(len) % 65;
        let what = format!(
            "queued fill of {len} bytes at {offset} of buffer {index} ({} bytes) with a \
             {}-byte pattern",
            b.model.len(),
            pattern.len()
        );
        let r = h.q(q).fill(&b.buffer, offset, len, pattern);
        if !in_range(offset, len, b.model.len()) || len % pattern.len() != 0 {
            return invalid_arg(what, r);
        }
        ok(what, r)?;
        for (byte, p) in b.model[offset..offset + len]
            .iter_mut()
            .zip(pattern.iter().cycle())
        {
            *byte = *p;
        }
        self.pending[q] = true;
        Ok(())
    }

    /// `Op::Copy`.
    fn copy(&mut self, src: u8, dst: u8, offsets: (u16, u16), len: u16, second: bool) -> Check {
        if self.held.is_none() || self.buffers.is_empty() {
            return Ok(());
        }
        let q = self.queue_for(second)?;
        let Some(h) = &self.held else { return Ok(()) };
        let (s, d) = (
            usize::from(src) % self.buffers.len(),
            usize::from(dst) % self.buffers.len(),
        );
        let (ss, ds) = (self.buffers[s].model.len(), self.buffers[d].model.len());
        let so = usize::from(offsets.0) % (ss + 9);
        let dof = usize::from(offsets.1) % (ds + 9);
        let len = usize::from(len) % 65;
        let what = format!(
            "queued copy of {len} bytes from {so} of buffer {s} ({ss} bytes) to {dof} of \
             buffer {d} ({ds} bytes)"
        );
        let r = h.q(q).copy(
            &self.buffers[s].buffer,
            so,
            &self.buffers[d].buffer,
            dof,
            len,
        );
        let overlap = s == d && so.abs_diff(dof) < len;
        if !in_range(so, len, ss) || !in_range(dof, len, ds) || overlap {
            return invalid_arg(what, r);
        }
        ok(what, r)?;
        let bytes = self.buffers[s].model[so..so + len].to_vec();
        self.buffers[d].model[dof..dof + len].copy_from_slice(&bytes);
        self.pending[q] = true;
        Ok(())
    }

    /// Reads buffer `index` back whole and compares it with the model.
    fn verify(&self, index: usize) -> Check {
        let Some(h) = &self.held else { return Ok(()) };
        let b = &self.buffers[index];
        let mut out = vec![0u8; b.model.len()];
        let what = format!("read of all of buffer {index} ({} bytes)", out.len());
        ok(&what, h.queue.read(&b.buffer, 0, &mut out))?;
        same_bytes(&what, &out, &b.model)
    }

    /// Gives the reference back (with `verify`, after comparing every buffer with the
    /// model), then uses every old handle once and drops them.
    fn shutdown(&mut self, verify: bool) -> Check {
        if verify {
            for index in 0..self.buffers.len() {
                self.verify(index)?;
            }
        }
        let Some(held) = self.held.take() else {
            return Ok(());
        };
        self.deregister();
        let Held {
            rt,
            generation,
            dev,
            queue,
            queue2,
            ipc,
        } = held;
        let down = ok("Offload::shutdown", rt.shutdown())?;
        // From here on this thread only uses and drops stale handles.
        ensure!(
            down.generation() == generation,
            "Offload<Shutdown>::generation is {}, the reference was of generation {generation}",
            down.generation()
        );
        self.pending = [false; 2];
        self.host_fns = Default::default();
        let buffers = std::mem::take(&mut self.buffers);
        let modules = std::mem::take(&mut self.modules);

        for (i, b) in buffers.iter().enumerate() {
            let mut out = vec![0u8; b.model.len()];
            if stale("Queue::read", queue.read(&b.buffer, 0, &mut out))?.is_some() {
                same_bytes(
                    &format!(
                        "buffer {i} read after this thread's shutdown (the runtime is still held elsewhere)"
                    ),
                    &out,
                    &b.model,
                )?;
            }
            stale("Buffer::write", b.buffer.write(0, &[0xA5]))?;
        }
        stale("Queue::sync", queue.sync())?;
        stale("Queue::sync of the second queue", queue2.sync())?;
        stale("Device::alloc", dev.alloc(8, MemKind::Device))?;
        stale("Device::queue", dev.queue())?;
        for slot in &modules {
            let Some(m) = &slot.module else { continue };
            let r = m.kernel(KernelKind::Noop.name());
            if slot.unloaded {
                expect_err(
                    "Module::kernel of an unloaded module after this thread's shutdown",
                    r,
                    "Error::InvalidArgument or Error::ShutDown",
                    |e| matches!(e, Error::InvalidArgument { .. } | Error::ShutDown { .. }),
                )?;
            } else if let Some(k) = stale("Module::kernel", r)? {
                // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
                stale("Queue::launch", unsafe {
                    queue.launch(&k, dims(1, 1), &[])
                })?;
            }
        }
        stale("Program::load", self.shared.program.load(&dev))?;
        if let Some((a, b, peer)) = ipc {
            stale("IpcEndpoint::poll", a.poll())?;
            if let Some(first) = buffers.iter().find(|b| b.exportable) {
                if stale("IpcEndpoint::send", a.send(peer, &first.buffer, 0, 1, 0))?.is_some() {
                    drop(stale(
                        "IpcEndpoint::recv",
                        b.recv_timeout(Default::default()),
                    )?);
                }
            }
            drop((a, b));
        }
        for (i, b) in buffers.into_iter().enumerate() {
            if i % 2 == 0 {
                stale("Buffer::free", b.buffer.free())?;
            }
        }
        for slot in modules {
            if let (false, Some(m)) = (slot.shared, slot.module) {
                stale("Module::unload", m.unload())?;
            }
        }
        Ok(())
    }
}

pub(super) fn run_thread<P: Platforms>(index: usize, ops: &[Op], shared: &CaseShared<'_>) -> Check {
    let mut worker = Worker::<P>::new(shared);
    // Every thread starts by taking a reference, at about the same time as the others.
    worker
        .init(false)
        .map_err(|e| format!("thread {index}, first init: {e}"))?;
    for (k, op) in ops.iter().enumerate() {
        worker
            .step(op)
            .map_err(|e| format!("thread {index}, operation {k} {op:?}: {e}"))?;
    }
    worker
        .shutdown(true)
        .map_err(|e| format!("thread {index}, final shutdown: {e}"))
}

/// One case: every thread runs its operations at once; then the runtime must be free.
pub(super) fn run_case<P: Platforms>(image: &[u8], threads: &[Vec<Op>]) -> Check {
    take_unreported_errors();
    let tracker = Arc::new(Tracker::default());
    let shared = CaseShared {
        image,
        program: tracked_program(image, &tracker),
        tracker: tracker.clone(),
        registry: Mutex::new(HashMap::new()),
    };
    let start = Barrier::new(threads.len());
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = threads
            .iter()
            .enumerate()
            .map(|(index, ops)| {
                let (shared, start) = (&shared, &start);
                s.spawn(move || {
                    start.wait();
                    run_thread::<P>(index, ops, shared)
                })
            })
            .collect();
        join_all(handles)
    });
    let errors: Vec<String> = results.into_iter().filter_map(|r| r.err()).collect();
    ensure!(errors.is_empty(), "{}", errors.join("\n"));

    // Every thread has shut down: nothing holds the runtime, and it works again.
    let rt = ok(
        "Offload::init after every thread shut down",
        Offload::<Ready, P>::init(),
    )?;
    let down = ok(
        "Offload::shutdown after every thread shut down",
        rt.shutdown(),
    )?;
    ensure!(
        down.was_last(),
        "after every thread shut down, init + shutdown was not the last reference: a \
         reference leaked"
    );
    ensure!(
        lock(&shared.registry).is_empty(),
        "internal: the P2 registry still lists holders"
    );
    tracker.finish()?;
    nothing_unreported("implicit shutdowns reported errors")
}
