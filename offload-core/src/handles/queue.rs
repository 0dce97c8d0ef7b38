//! Queues and launches (kernel arguments are checked in `args`, events live in `event`,
//! the entry a queue or event is listed by in `entry`).
//!
//! A [`Queue`] is an in-order stream of work on one device. `launch` checks everything the
//! backend must not see wrong — the kernel's module is loaded, on the queue's device, in
//! this generation; the arguments match the kernel's declared parameters; every buffer is
//! live and on the same device — and only then calls the backend. During the call it holds
//! the queue, the module (so an `unload` waits for it) and every buffer argument
//! (exclusively, in address order, each once).
//!
//! Host functions are user code that offload runs (L6): each is wrapped ([`HostFn`]) so
//! that running it and dropping what it captured are marked as such on whatever thread the
//! backend uses, and its panic is caught there and returned by the queue's next `sync` on
//! every backend. A host function that waits for its own queue, or for an unfinished event
//! of it, gets `InvalidArgument` at once (it would wait for itself); a queue dropped inside
//! its own host function is released on a helper thread once the function returned.

use crate::sync::{Arc, lock, read};
use smallvec::SmallVec;
use std::fmt;

use crate::erased::{DynBuffer, DynQueue};
use crate::error::{Caller, Error, Result};
use crate::hal::{Dims, KernelArg};
use crate::handles::args::{Arg, check_args};
use crate::handles::entry::{Entry, Panics, forget, host_fn_panicked};
use crate::handles::event::Event;
use crate::handles::fixes::Fix;
use crate::handles::{Buffer, Device, Kernel};
use crate::runtime::generation::{Generation, Kind, ResourceKey};
use crate::runtime::reentry;

/// An in-order stream of work on one device. Dropping it waits for its work and destroys
/// it (errors go to the runtime's next `shutdown`).
///
/// ```
/// use offload::{Arg, Dims, MemKind, Offload, Program};
/// let rt = Offload::init()?;
/// let dev = rt.devices()?.remove(0);
/// let add_one = Program::new(offload::host::fixtures::KERNELS).load(&dev)?.kernel("add_one")?;
/// let buf = dev.alloc(4 * 64, MemKind::Device)?;
/// let queue = dev.queue()?;
/// // SAFETY: add_one adds 1 to the first 64 u32s of its 256-byte buffer.
/// unsafe { queue.launch(&add_one, Dims::grid([1, 1, 1]).block([64, 1, 1]), &[Arg::buffer(&buf), Arg::value(64u32)])? };
/// queue.sync()?;
/// let mut out = [0u8; 4];
/// buf.read(0, &mut out)?;
/// assert_eq!(u32::from_ne_bytes(out), 1);
/// # Ok::<(), offload::Error>(())
/// ```
pub struct Queue {
    generation: Arc<Generation>,
    key: ResourceKey,
    entry: Arc<Entry<dyn DynQueue>>,
    /// The language of the code that makes this queue's calls ([`Queue::for_caller`]).
    caller: Caller,
}

/// A host function as offload hands it to a backend (L6): running it, and dropping it if it
/// never ran (the queue was destroyed first), is user code of its queue on whatever thread
/// the backend uses; a panic in either is caught there and kept for the queue's next
/// `sync`, so no backend sees one.
struct HostFn {
    f: Option<Box<dyn FnOnce() + Send>>,
    /// (generation id, queue id).
    queue: (u64, u64),
    panics: Arc<crate::sync::Mutex<Panics>>,
    /// Where a panic goes once the queue was released.
    generation: crate::sync::Weak<Generation>,
    /// The queue, for that error's words.
    queue_entry: crate::sync::Weak<Entry<dyn DynQueue>>,
}

impl HostFn {
    fn run(mut self) {
        if let Some(f) = self.f.take() {
            self.as_user_code(f);
        }
    }

    fn as_user_code(&self, f: impl FnOnce()) {
        let _user = reentry::enter(Some(self.queue));
        if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            let text = crate::error::panic_text(&*payload);
            let mut panics = lock(&self.panics);
            if !panics.released {
                panics.texts.push(text);
                return;
            }
            drop(panics);
            let named = self
                .queue_entry
                .upgrade()
                .map_or_else(|| "a queue".to_string(), |e| e.to_string());
            if let Some(generation) = self.generation.upgrade() {
                generation.defer(Err(host_fn_panicked(&named, &[text])));
            }
        }
    }
}

impl Drop for HostFn {
    fn drop(&mut self) {
        if let Some(f) = self.f.take() {
            self.as_user_code(move || drop(f));
        }
    }
}

impl Queue {
    /// Creates a queue on `device` and lists it in its generation.
    pub(crate) fn create(device: &Device) -> Result<Queue> {
        let generation = device.generation();
        generation.with_live(|live| {
            if generation.is_closing() {
                return Err(Error::shut_down());
            }
            let raw = live.device(device.key())?.clone().queue()?;
            let entry = Entry::new(device.key(), device.backend(), "queue", raw);
            let (key, entry) = live.register(Kind::Queue, |_| entry)?;
            Ok(Queue {
                generation: generation.clone(),
                key,
                entry,
                caller: Caller::Rust,
            })
        })
    }
}

impl Queue {
    /// Names the queue, as wgpu's `label:` does: errors and logs call it by this name.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// let uploads = rt.devices()?[0].queue()?.label("uploads");
    /// assert_eq!(uploads.to_string(), r#"queue "uploads" (host)"#);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn label(self, label: impl Into<String>) -> Self {
        *crate::sync::write(&self.entry.label) = Some(Arc::from(label.into()));
        self
    }

    /// Says which language's code makes this queue's calls: the fixes its launch refusals
    /// suggest are written in that language (Rust's by default). A binding sets it on the
    /// queues it hands out — the Python package to `Caller::Python` (a tuple for a
    /// `vec2<f32>`, dims `(grid, (64, 1, 1))`), the C API to `Caller::C` — so its users
    /// read fixes they can type, and no binding rewrites a message's text. The call an
    /// error names is the binding's to set ([`Error::for_call`]).
    ///
    /// ```
    /// # use offload::{Caller, Dims, Offload, Program};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let noop = Program::new(offload::host::fixtures::KERNELS).load(&dev)?.kernel("noop")?;
    /// let one = Dims::grid([1, 1, 1]);
    /// // `run` takes verified kernels only; the refusal's fix is in the queue's caller's words.
    /// let rust = dev.queue()?.run(&noop, one, &[]).unwrap_err().to_string();
    /// assert!(rust.contains("`unsafe { queue.launch(..) }`"), "{rust}");
    /// let c = dev.queue()?.for_caller(Caller::C).run(&noop, one, &[]);
    /// let c = c.unwrap_err().to_string();
    /// assert!(c.contains("launch it with `offload_queue_launch`"), "{c}");
    /// assert!(!c.contains("unsafe {"), "{c}");
    /// # Ok::<(), offload::Error>(())
    /// ```
    #[must_use]
    pub fn for_caller(mut self, caller: Caller) -> Self {
        self.caller = caller;
        self
    }

    /// The device this queue runs on.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// assert_eq!(dev.queue()?.device(), dev);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn device(&self) -> Device {
        Device::new(
            self.generation.clone(),
            self.entry.device,
            self.entry.backend,
        )
    }

    /// Enqueues `kernel` over `dims` with `args`; returns once enqueued (Q1).
    ///
    /// Offload checks what it can before the backend sees anything: the argument count,
    /// each argument's kind and, where the image declares it, its scalar type; that every
    /// buffer (or range of one) is live, inside its buffer and on the queue's device; that
    /// the kernel's module is loaded on this device. Those failures are
    /// `Error::InvalidArgument`; anything of a finished runtime is `Error::ShutDown`.
    ///
    /// # Safety
    ///
    /// Launching hands control to code offload cannot verify: native machine code in this
    /// process on the host backend, device code on a GPU, with raw addresses of your
    /// buffers. The caller promises that running `kernel` with these arguments is sound:
    ///
    /// - it reads and writes only inside the buffers and ranges it is given (so every
    ///   count or index argument agrees with their lengths), its module's globals, and the
    ///   shared memory `dims` asks for;
    /// - on the host backend it returns, does not unwind across its C ABI, and touches no
    ///   process state it does not own (it runs on offload's threads, concurrently with
    ///   other queues' work);
    /// - when the same buffer is passed twice, or to kernels on different queues, the
    ///   kernels tolerate the aliasing (offload orders work within one queue only).
    ///
    /// ```
    /// # use offload::{Arg, Dims, Error, MemKind, Offload, Program};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let fill = Program::new(offload::host::fixtures::KERNELS).load(&dev)?.kernel("fill")?;
    /// let buf = dev.alloc(16, MemKind::Device)?;
    /// let q = dev.queue()?;
    /// // SAFETY: `fill` writes `n` u32s of its buffer; missing arguments are refused first.
    /// let wrong = unsafe { q.launch(&fill, Dims::grid([1, 1, 1]), &[Arg::buffer(&buf)]) };
    /// assert!(matches!(wrong, Err(Error::InvalidArgument { .. })));
    /// // SAFETY: 4 u32s fit in the 16-byte buffer.
    /// unsafe { q.launch(&fill, Dims::for_num_elems(4), &offload::args![&buf, 9u32, 4u32])? };
    /// # Ok::<(), offload::Error>(())
    /// ```
    ///
    /// Launching is `unsafe`; code that forgets it does not compile:
    ///
    /// ```compile_fail,E0133
    /// # use offload::{Dims, Offload, Program};
    /// # let rt = Offload::init().unwrap();
    /// # let dev = rt.devices().unwrap().remove(0);
    /// let noop = Program::new(offload::host::fixtures::KERNELS).load(&dev).unwrap().kernel("noop").unwrap();
    /// dev.queue().unwrap().launch(&noop, Dims::grid([1, 1, 1]), &[]).unwrap();
    /// ```
    // The one `unsafe` of the core: a contract the caller takes on. The body does nothing
    // unsafe itself; the backend's launch is where the unverified code runs.
    #[allow(unsafe_code)]
    pub unsafe fn launch(&self, kernel: &Kernel, dims: Dims, args: &[Arg<'_>]) -> Result<()> {
        // SAFETY: the caller took on this function's contract.
        unsafe { self.enqueue_launch("Queue::launch", kernel, dims, args) }
    }

    /// Enqueues a kernel offload proved memory-safe ([`Kernel::is_verified`]: WGSL that
    /// offload compiled, every access bounds-checked against its buffers) without `unsafe`; the same
    /// checks as [`Queue::launch`] run first. Any other kernel is `Error::InvalidArgument`,
    /// pointing at `launch`.
    ///
    /// What the kernel declares is what runs (S1): a kernel that declares its workgroup
    /// size ([`Kernel::workgroup_size`], WGSL's `@workgroup_size`) runs with blocks of that
    /// size only; `dims` with another block is `Error::InvalidArgument` naming both (a WGSL
    /// author may rely on the size, e.g. for a `var<workgroup>` tile). To run another size
    /// on purpose, say so: [`Queue::run_resized`].
    ///
    /// ```
    /// # use offload::{Dims, Error, Offload, Program};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let noop = Program::new(offload::host::fixtures::KERNELS).load(&dev)?.kernel("noop")?;
    /// let refused = dev.queue()?.run(&noop, Dims::grid([1, 1, 1]), &[]);
    /// assert!(matches!(refused, Err(Error::InvalidArgument { .. })));
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn run(&self, kernel: &Kernel, dims: Dims, args: &[Arg<'_>]) -> Result<()> {
        self.run_verified("Queue::run", kernel, dims, args, true)
    }

    /// [`Queue::run`] with a block size other than the one the kernel declares, chosen on
    /// purpose: the backend resizes the kernel's workgroup (Vulkan respecialises or
    /// patches it, keeping the dimensions the shader indexes; a size it cannot make is
    /// `InvalidArgument`). Still memory-safe — every access stays bounds-checked against its buffers
    /// — but a kernel whose code depends on its declared size (a `var<workgroup>` tile of
    /// that many elements, a reduction over `local_invocation_id`) computes something else:
    /// use it only for kernels written for any size.
    ///
    /// ```
    /// # use offload::{Dims, Error, Offload, Program};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let noop = Program::new(offload::host::fixtures::KERNELS).load(&dev)?.kernel("noop")?;
    /// // Like `run`, only for kernels offload verified.
    /// let refused = dev.queue()?.run_resized(&noop, Dims::grid([1, 1, 1]), &[]);
    /// assert!(matches!(refused, Err(Error::InvalidArgument { .. })));
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn run_resized(&self, kernel: &Kernel, dims: Dims, args: &[Arg<'_>]) -> Result<()> {
        self.run_verified("Queue::run_resized", kernel, dims, args, false)
    }

    /// The launch of `run` and `run_resized`: verified kernels only, and with
    /// `declared_size`, only with the block the kernel declares.
    fn run_verified(
        &self,
        call: &'static str,
        kernel: &Kernel,
        dims: Dims,
        args: &[Arg<'_>],
        declared_size: bool,
    ) -> Result<()> {
        self.check_live(call, kernel)?;
        if !kernel.is_verified() {
            return Err(Error::invalid(
                call,
                format!(
                    "{kernel} is code offload cannot verify (only WGSL programs offload \
                     compiled are): {}",
                    Fix::UnsafeLaunch.words(self.caller)
                ),
            ));
        }
        if declared_size
            && let Some(declared) = kernel.workgroup_size()
            && dims.block != declared
        {
            return Err(Error::invalid(
                call,
                format!(
                    "{kernel} declares @workgroup_size{declared:?}, the launch asks for \
                     blocks of {:?}: the safe run launches a kernel with the size it declares \
                     {}",
                    dims.block,
                    Fix::DeclaredBlock(declared).words(self.caller)
                ),
            ));
        }
        // SAFETY: the kernel is verified: its every access is bounds-checked against its buffer
        // arguments, and the backend refuses buffers too small for its bindings.
        #[allow(unsafe_code)]
        unsafe {
            self.enqueue_launch(call, kernel, dims, args)
        }
    }

    /// `ShutDown` when the queue or the kernel's module belongs to a finished generation
    /// (L3: before the safe path's own refusals, which would name something else).
    fn check_live(&self, call: &'static str, kernel: &Kernel) -> Result<()> {
        self.entry.with(call, |_| Ok(()))?;
        kernel.module().with_loaded(call, |_| Ok(()))
    }

    /// The checks and enqueue of `launch` and `run`.
    ///
    /// # Safety
    /// The contract of [`Queue::launch`], or a verified kernel.
    #[allow(unsafe_code)]
    unsafe fn enqueue_launch(
        &self,
        call: &'static str,
        kernel: &Kernel,
        dims: Dims,
        args: &[Arg<'_>],
    ) -> Result<()> {
        let _span =
            tracing::debug_span!(target: "offload::launch", "launch", kernel = kernel.name())
                .entered();
        let module = kernel.module();
        self.entry
            .with(call, |queue| {
                module.with_loaded(call, |loaded| {
                    if !Arc::ptr_eq(module.generation(), &self.generation) {
                        return Err(Error::shut_down());
                    }
                    if module.entry.device != self.entry.device {
                        return Err(Error::invalid(
                            call,
                            format!("{kernel:?} is on another device than {self}"),
                        ));
                    }
                    check_args(
                        call,
                        self.caller,
                        kernel,
                        args,
                        &self.entry.device,
                        &self.generation,
                    )?;
                    // Every distinct buffer once, exclusively (no allocation per launch).
                    let locked =
                        Buffer::lock_all_exclusive(call, args.iter().filter_map(Arg::buffer_of))?;
                    let mut raw_args: SmallVec<[KernelArg<'_, dyn DynBuffer>; 8]> =
                        SmallVec::with_capacity(args.len());
                    for arg in args {
                        raw_args.push(match arg.buffer_of() {
                            Some(b) => {
                                let allocation = locked.allocation(call, b)?;
                                let (offset, len) = arg.byte_range().unwrap_or((0, b.len()));
                                let offset = b.offset_in_allocation() + offset;
                                if offset == 0 && len == b.entry().size() {
                                    KernelArg::Buffer(allocation.raw())
                                } else {
                                    KernelArg::Range {
                                        buffer: allocation.raw(),
                                        offset,
                                        len,
                                    }
                                }
                            }
                            None => match arg {
                                Arg::Scalar { bytes, ty } => KernelArg::Scalar(&bytes[..ty.size()]),
                                Arg::Pod { bytes, .. } => KernelArg::Scalar(bytes),
                                _ => KernelArg::Scalar(&[]),
                            },
                        });
                    }
                    let kernels = read(&loaded.kernels);
                    let raw_kernel = kernels.get(kernel.index).ok_or_else(Error::shut_down)?;
                    tracing::debug!(
                        target: "offload::launch",
                        kernel = kernel.name(),
                        queue = %self.entry,
                        grid = ?dims.grid,
                        block = ?dims.block,
                        shared_memory = dims.shared_memory,
                        args = args.len(),
                        "launch"
                    );
                    // SAFETY: our caller took on the contract of `Queue::launch`, which is the
                    // backend's; the arguments were checked above.
                    unsafe { queue.launch(&*raw_kernel.raw, &dims, &raw_args) }
                })
            })
            .map_err(|e| e.on(call, kernel))
    }

    /// Waits until all work enqueued so far has finished.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// rt.devices()?[0].queue()?.sync()?;
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn sync(&self) -> Result<()> {
        if self.is_running_here() {
            return Err(Error::invalid(
                "Queue::sync",
                format!(
                    "a host function of {self} waits for its own queue, which cannot finish \
                     before the function returns (L6); sync it after the function, or from \
                     another thread"
                ),
            ));
        }
        let _span =
            tracing::debug_span!(target: "offload::launch", "sync", queue = self.id()).entered();
        self.entry.with("Queue::sync", |q| q.sync())?;
        self.entry.take_panics(false)
    }

    /// Whether this thread is running a host function of this queue.
    fn is_running_here(&self) -> bool {
        reentry::host_fn_of() == Some((self.generation.id, self.id()))
    }

    /// Enqueues a copy of `src` into `buffer` at `offset`, after the work enqueued so far;
    /// returns once enqueued (Q1). `src` is copied first, so it need not outlive the call.
    ///
    /// ```
    /// # use offload::{MemKind, Offload};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let buf = dev.alloc(4, MemKind::Device)?;
    /// let q = dev.queue()?;
    /// q.write(&buf, 0, &[1, 2, 3, 4])?;
    /// let mut out = [0u8; 4];
    /// q.read(&buf, 0, &mut out)?;
    /// assert_eq!(out, [1, 2, 3, 4]);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn write(&self, buffer: &Buffer, offset: usize, src: &[u8]) -> Result<()> {
        const CALL: &str = "Queue::write";
        self.with_buffers(CALL, &[(buffer, offset, src.len())], |q, raws, at| {
            q.enqueue_write(raws[0], at[0], src.to_vec())
        })
    }

    /// Copies from `buffer` at `offset` into `dst` once the work enqueued so far has
    /// finished: it waits (a queued read into a slice the caller gets back at once could
    /// not be sound).
    ///
    /// ```
    /// # use offload::{MemKind, Offload};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let buf = dev.alloc(4, MemKind::Device)?;
    /// let mut out = [9u8; 4];
    /// dev.queue()?.read(&buf, 0, &mut out)?;
    /// assert_eq!(out, [0; 4]);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn read(&self, buffer: &Buffer, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check_buffer("Queue::read", buffer)?;
        self.sync()?;
        buffer.read(offset, dst)
    }

    /// Enqueues filling `len` bytes of `buffer` at `offset` with `pattern` repeated: any
    /// non-empty pattern (1, 2, 4, 8, 16 bytes or another size) whose length divides `len`
    /// (liboffload's `olMemFill`); `InvalidArgument` otherwise.
    ///
    /// ```
    /// # use offload::{MemKind, Offload};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let buf = dev.alloc(8, MemKind::Device)?;
    /// let q = dev.queue()?;
    /// q.fill(&buf, 0, 8, &0xA1B2u16.to_le_bytes())?;
    /// let mut out = [0u8; 8];
    /// q.read(&buf, 0, &mut out)?;
    /// assert_eq!(out, [0xB2, 0xA1, 0xB2, 0xA1, 0xB2, 0xA1, 0xB2, 0xA1]);
    /// assert!(q.fill(&buf, 0, 7, &[1, 2]).is_err()); // 2 does not divide 7
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn fill(&self, buffer: &Buffer, offset: usize, len: usize, pattern: &[u8]) -> Result<()> {
        const CALL: &str = "Queue::fill";
        crate::hal::check_fill(len, pattern).map_err(|e| e.in_call(CALL))?;
        self.with_buffers(CALL, &[(buffer, offset, len)], |q, raws, at| {
            q.enqueue_fill(raws[0], at[0], len, pattern)
        })
    }

    /// Enqueues a copy of `len` bytes from `src` at `src_offset` into `dst` at `dst_offset`
    /// (two ranges of one buffer must not overlap).
    ///
    /// Both on this queue's device: queued on the device. One of them on another device
    /// (of this platform or another) is staged through host memory: from another device,
    /// `src` is read now (after the work queued on it) and the write into `dst` is queued
    /// here; to another device, this queue is synced and `dst` written now. Neither on this
    /// queue's device, or a buffer of another runtime, is `InvalidArgument`.
    ///
    /// ```
    /// # use offload::{MemKind, Offload};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let (a, b) = (dev.alloc(4, MemKind::Device)?, dev.alloc(4, MemKind::Device)?);
    /// let q = dev.queue()?;
    /// q.write(&a, 0, &[5; 4])?;
    /// q.copy(&a, 0, &b, 0, 4)?;
    /// let mut out = [0u8; 4];
    /// q.read(&b, 0, &mut out)?;
    /// assert_eq!(out, [5; 4]);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn copy(
        &self,
        src: &Buffer,
        src_offset: usize,
        dst: &Buffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        const CALL: &str = "Queue::copy";
        let here =
            |b: &Buffer| b.same_generation(&self.generation) && b.device_key() == self.entry.device;
        let of_runtime = |b: &Buffer| b.same_generation(&self.generation);
        if of_runtime(src) && of_runtime(dst) && here(src) != here(dst) {
            src.check_range(CALL, src_offset, len)?;
            dst.check_range(CALL, dst_offset, len)?;
            if here(dst) {
                let mut staged = vec![0u8; len];
                src.read(src_offset, &mut staged)?;
                return self.with_buffers(CALL, &[(dst, dst_offset, len)], |q, raws, at| {
                    q.enqueue_write(raws[0], at[0], staged)
                });
            }
            self.sync()?;
            return dst.copy_staged(dst_offset, src, src_offset, len);
        }
        let ranges = [(src, src_offset, len), (dst, dst_offset, len)];
        self.with_buffers(CALL, &ranges, |q, raws, at| {
            if std::ptr::addr_eq(raws[0], raws[1]) && at[0].abs_diff(at[1]) < len {
                return Err(Error::invalid(
                    CALL,
                    format!("the ranges at {} and {} of {dst} overlap", at[0], at[1]),
                ));
            }
            q.enqueue_copy(raws[0], at[0], raws[1], at[1], len)
        })
    }

    /// Enqueues `f`: it runs once the work enqueued before it has finished, and work
    /// enqueued after it waits for it (liboffload's `olLaunchHostFunction`). It runs on a
    /// thread of offload's choosing; it must not block on this queue.
    ///
    /// ```
    /// # use offload::Offload;
    /// # let rt = Offload::init()?;
    /// let q = rt.devices()?[0].queue()?;
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// q.enqueue_host_fn(move || tx.send(42).unwrap())?;
    /// q.sync()?;
    /// assert_eq!(rx.recv().unwrap(), 42);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn enqueue_host_fn(&self, f: impl FnOnce() + Send + 'static) -> Result<()> {
        let wrapped = HostFn {
            f: Some(Box::new(f)),
            queue: (self.generation.id, self.id()),
            panics: self.entry.panics.clone(),
            generation: crate::sync::Arc::downgrade(&self.generation),
            queue_entry: Arc::downgrade(&self.entry),
        };
        self.entry.with("Queue::enqueue_host_fn", |q| {
            q.enqueue_host_fn(Box::new(move || wrapped.run()))
        })
    }

    /// Whether all work enqueued so far has finished, without waiting.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// let q = rt.devices()?[0].queue()?;
    /// q.sync()?;
    /// assert!(q.is_idle()?);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn is_idle(&self) -> Result<bool> {
        self.entry.with("Queue::is_idle", |q| q.is_idle())
    }

    /// A number that identifies this queue among the live queues of its runtime; an
    /// event's [`Event::queue_id`] names the queue it was recorded on.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// let q = rt.devices()?[0].queue()?;
    /// assert_eq!(q.record()?.queue_id(), q.id());
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn id(&self) -> u64 {
        slotmap::Key::data(&self.key).as_ffi()
    }

    /// Runs `f` on the backend queue and the buffers of `ranges` (each checked: of this
    /// queue's device, the range inside it), locked exclusively in address order, each
    /// once, with each range's offset in its allocation.
    fn with_buffers<T>(
        &self,
        call: &'static str,
        ranges: &[(&Buffer, usize, usize)],
        f: impl FnOnce(&dyn DynQueue, &[&dyn DynBuffer], &[usize]) -> Result<T>,
    ) -> Result<T> {
        for (buffer, _, _) in ranges {
            self.check_buffer(call, buffer)?;
        }
        let mut at = Vec::with_capacity(ranges.len());
        for (buffer, offset, len) in ranges {
            at.push(buffer.check_range(call, *offset, *len)?);
        }
        self.entry.with(call, |q| {
            let locked = Buffer::lock_all_exclusive(call, ranges.iter().map(|r| r.0))?;
            let mut raws: Vec<&dyn DynBuffer> = Vec::with_capacity(ranges.len());
            for (buffer, _, _) in ranges {
                raws.push(locked.allocation(call, buffer)?.raw());
            }
            f(q, &raws, &at)
        })
    }

    fn check_buffer(&self, call: &'static str, buffer: &Buffer) -> Result<()> {
        if !buffer.same_generation(&self.generation) || buffer.device_key() != self.entry.device {
            // A dead buffer says ShutDown first.
            buffer.read(0, &mut [])?;
            self.sync()?;
            return Err(Error::invalid(
                call,
                format!("{buffer} is not on the device of {self}"),
            ));
        }
        Ok(())
    }

    /// Records an event after the work enqueued so far.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// let q = rt.devices()?[0].queue()?;
    /// let start = q.record()?;
    /// let end = q.record()?;
    /// end.sync()?;
    /// assert!(end.elapsed_since(&start)? >= std::time::Duration::ZERO);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn record(&self) -> Result<Event> {
        // The generation is held across (locks in the order generation, then object, as
        // everywhere): teardown cannot release its events before this one is listed.
        self.generation.with_live(|live| {
            let raw = self.entry.with("Queue::record", |q| q.record())?;
            let entry = Entry::new(self.entry.device, self.entry.backend, "event", raw);
            let (key, entry) = live.register(Kind::Event, |_| entry)?;
            Ok(Event {
                generation: self.generation.clone(),
                key,
                entry,
                queue: self.id(),
                in_own_host_fn: self.is_running_here(),
            })
        })
    }

    /// Makes later work on this queue wait until `event` has completed.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let (a, b) = (dev.queue()?, dev.queue()?);
    /// let e = a.record()?;
    /// b.wait(&e)?;
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn wait(&self, event: &Event) -> Result<()> {
        self.entry.with("Queue::wait", |q| {
            event.entry.with("Queue::wait", |e| {
                if event.entry.device != self.entry.device {
                    return Err(Error::invalid(
                        "Queue::wait",
                        format!("{event:?} is of another device than {self}"),
                    ));
                }
                q.wait(e)
            })
        })
    }
}

// The call of a `Device` that makes a queue on it: here, so that `device` names no queue.
impl Device {
    /// Creates a queue on this device.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// let queue = rt.devices()?[0].queue()?;
    /// queue.sync()?;
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn queue(&self) -> Result<Queue> {
        Queue::create(self).map_err(|e| e.on("Device::queue", self))
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // In a forked child the handle is forgotten, its queue with it (L9).
        if crate::runtime::fork::forget_in_child(&self.generation) {
            crate::runtime::fork::forget_in_child(&self.entry);
            return;
        }
        if self.is_running_here() {
            // Dropped by its own host function (L6): releasing it waits for the function
            // to return (and, on some backends, joins the thread running it), so a helper
            // thread releases it once it has. Without one, the generation's teardown does.
            let (generation, key, entry) = (self.generation.clone(), self.key, self.entry.clone());
            // `false` (no thread): the teardown releases it, as said above; nothing is lost.
            let _ = crate::runtime::lifecycle::run_later("offload-queue-release", move || {
                forget(&generation, Kind::Queue, key, entry);
            });
            return;
        }
        forget(&self.generation, Kind::Queue, self.key, self.entry.clone());
    }
}

impl fmt::Display for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.entry, f)
    }
}

impl fmt::Debug for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
