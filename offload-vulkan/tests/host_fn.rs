//! Host functions on Vulkan (Q1, L6): `enqueue_host_fn` returns without waiting for the
//! work before it; the function runs on an offload thread once that work has finished, and
//! the queue's later work (held in offload behind the function) runs after it. Checked
//! through the `hal` traits on whatever Vulkan driver the machine has (lavapipe in CI),
//! with kernels long enough (a spin loop) that "not yet" is a fact, not a race.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use common::{close, open, serial, spirv_of, words};
use offload_core::hal::{Device as _, Event as _, Platform as _, Program as _, Queue as _};
use offload_core::{Dims, Error, KernelArg, MemKind};
use offload_testing::watchdog;
use offload_vulkan::{VulkanBuffer, VulkanDevice, VulkanKernel, VulkanQueue, stats};

/// `spin(buf, iters)` over `groups` workgroups of 64 threads: each thread runs `iters`
/// rounds of a xorshift (kept by a store it almost never makes, so the loop stays), then
/// the first 64 threads add 1 to `buf[0..64]`. Work grows with the grid: lavapipe spreads
/// workgroups over its threads.
const SPIN_WGSL: &str = "
struct SpinArgs { iters: u32 }
@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
var<immediate> spin_args: SpinArgs;
@compute @workgroup_size(64)
fn spin(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    var x = i + 1u;
    for (var k = 0u; k < spin_args.iters; k++) {
        x = x ^ (x << 13u);
        x = x ^ (x >> 17u);
        x = x ^ (x << 5u);
    }
    if x == 0x9e3779b9u {
        buf[64u + (i % 64u)] = x;
    }
    if i < 64u {
        buf[i] = buf[i] + 1u;
    }
}
";

/// Words a spin buffer holds: 64 counters, 64 scratch words.
const SPIN_WORDS: usize = 128;

/// Rounds each thread of a spin launch runs.
const ITERS: u32 = 4096;

/// Launches `spin` over `groups` workgroups on `buf`.
fn spin(q: &VulkanQueue, k: &VulkanKernel, buf: &VulkanBuffer, groups: u32) {
    let iters = ITERS.to_ne_bytes();
    let dims = Dims::grid([groups, 1, 1]).block([64, 1, 1]);
    // SAFETY: the kernel touches the 128 words of `buf` (its length) and nothing else.
    unsafe {
        q.launch(
            k,
            &dims,
            &[KernelArg::Buffer(buf), KernelArg::Scalar(&iters)],
        )
    }
    .unwrap_or_else(|e| panic!("spin: {e}"));
}

fn counters(dev: &VulkanDevice, buf: &VulkanBuffer) -> Vec<u32> {
    let mut out = vec![0u8; SPIN_WORDS * 4];
    dev.read(buf, 0, &mut out).unwrap();
    words(&out)[..64].to_vec()
}

/// Workgroups that make one launch take at least `at_least` (measured; lavapipe compiles
/// the pipeline at its first dispatch, which is warmed up first).
fn calibrate(dev: &VulkanDevice, q: &VulkanQueue, k: &VulkanKernel, at_least: Duration) -> u32 {
    let buf = dev.alloc(SPIN_WORDS * 4, MemKind::Device).unwrap();
    spin(q, k, &buf, 1);
    q.sync().unwrap();
    let mut groups = 1;
    loop {
        let t = Instant::now();
        spin(q, k, &buf, groups);
        q.sync().unwrap();
        if t.elapsed() >= at_least || groups >= 1 << 16 {
            dev.free(buf).unwrap();
            return groups;
        }
        groups *= 2;
    }
}

/// `enqueue_host_fn` behind 20 long launches returns before they finish, and before the
/// function runs; the function runs on another thread after them (it reads their
/// results), and work enqueued after it is held until it returns. (Before: the call
/// submitted, waited and ran the function on the caller's thread: 6.8 s behind 20
/// launches.)
#[test]
fn enqueue_host_fn_returns_at_once_and_orders_work() {
    let _serial = serial();
    let _watch = watchdog(Duration::from_secs(120), "enqueue_host_fn_returns_at_once");
    let Some(vk) = open("enqueue_host_fn_returns_at_once_and_orders_work") else {
        return;
    };
    let dev = vk.devices().remove(0);
    let module = dev.load(&spirv_of(SPIN_WGSL, (1, 3))).unwrap();
    let k = module.kernel("spin").unwrap();
    let q = dev.queue().unwrap();
    let groups = calibrate(&dev, &q, &k, Duration::from_millis(50));
    let zeroed = || {
        let mut b = dev.alloc(SPIN_WORDS * 4, MemKind::Device).unwrap();
        dev.write(&mut b, 0, &[0; SPIN_WORDS * 4]).unwrap();
        b
    };
    let buf = Arc::new(zeroed());
    let later = zeroed();

    let launches = 20;
    for _ in 0..launches {
        spin(&q, &k, &buf, groups);
    }
    let ran = Arc::new(AtomicBool::new(false));
    let (seen_tx, seen_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (flag, dev2, buf2) = (ran.clone(), dev.clone(), buf.clone());
    let t = Instant::now();
    q.enqueue_host_fn(Box::new(move || {
        flag.store(true, Ordering::SeqCst);
        // The launches before it have finished: a host access waits for nothing.
        let seen = counters(&dev2, &buf2);
        seen_tx.send((std::thread::current().id(), seen)).unwrap();
        // Bounded: where the function runs on the caller's thread, nobody says go.
        let _ = go_rx.recv_timeout(Duration::from_secs(10));
    }))
    .unwrap();
    let returned = t.elapsed();
    // Facts, not timings: right after the call the function has not run, and the queue
    // still has the launches to do.
    let ran_early = ran.load(Ordering::SeqCst);
    let idle_early = q.is_idle().unwrap();
    // Work after the function: held until it returns.
    spin(&q, &k, &later, 1);
    let after = q.record().unwrap();
    let (thread, seen) = seen_rx.recv_timeout(Duration::from_secs(60)).unwrap();
    let waited = t.elapsed();
    let held = !after.is_complete().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let still_held = !after.is_complete().unwrap();
    // The function may have given up waiting (where it ran on this thread).
    let _ = go_tx.send(());
    after.sync().unwrap();
    q.sync().unwrap();
    println!(
        "enqueue_host_fn returned after {returned:?} behind {launches} launches of \
         {groups} workgroups; the function ran after {waited:?}"
    );
    assert!(
        !ran_early,
        "the host function ran before enqueue_host_fn returned"
    );
    assert!(
        !idle_early,
        "the queue was idle right after enqueue_host_fn returned"
    );
    assert_ne!(
        thread,
        std::thread::current().id(),
        "ran on the caller's thread"
    );
    assert_eq!(
        seen,
        vec![launches; 64],
        "the function ran before the launches finished"
    );
    assert!(
        held && still_held,
        "work after the function ran while it was running"
    );
    assert_eq!(counters(&dev, &later), vec![1; 64]);
    assert!(q.is_idle().unwrap());
    after.destroy().unwrap();
    q.destroy().unwrap();
    let Ok(buf) = Arc::try_unwrap(buf) else {
        panic!("the host function kept the buffer")
    };
    for b in [buf, later] {
        dev.free(b).unwrap();
    }
    drop(k);
    module.unload().unwrap();
    close(vk);
}

/// A fixture: the platform, its device, the spin kernel, and launches that each take at
/// least `at_least`.
struct Scene {
    vk: offload_vulkan::VulkanPlatform,
    dev: VulkanDevice,
    module: offload_vulkan::VulkanModule,
    k: VulkanKernel,
    groups: u32,
}

impl Scene {
    fn open(test: &str, at_least: Duration) -> Option<Scene> {
        let vk = open(test)?;
        let dev = vk.devices().remove(0);
        let module = dev.load(&spirv_of(SPIN_WGSL, (1, 3))).unwrap();
        let k = module.kernel("spin").unwrap();
        let q = dev.queue().unwrap();
        let groups = calibrate(&dev, &q, &k, at_least);
        q.destroy().unwrap();
        Some(Scene {
            vk,
            dev,
            module,
            k,
            groups,
        })
    }

    /// A zeroed spin buffer.
    fn buffer(&self) -> VulkanBuffer {
        let mut buf = self.dev.alloc(SPIN_WORDS * 4, MemKind::Device).unwrap();
        self.dev.write(&mut buf, 0, &[0; SPIN_WORDS * 4]).unwrap();
        buf
    }

    fn spin(&self, q: &VulkanQueue, buf: &VulkanBuffer) {
        spin(q, &self.k, buf, self.groups);
    }

    fn close(self) {
        drop(self.k);
        self.module.unload().unwrap();
        close(self.vk);
    }
}

fn is_invalid(r: &offload_core::Result<()>) -> bool {
    matches!(r, Err(Error::InvalidArgument { .. }))
}

/// A panic in a host function is the next sync's `Error::Callback` (once); the queue goes
/// on working.
#[test]
fn a_panic_is_the_next_syncs_callback_error() {
    let _serial = serial();
    let _watch = watchdog(Duration::from_secs(120), "a_panic_is_the_next_syncs");
    let Some(s) = Scene::open("a_panic_is_the_next_syncs_callback_error", Duration::ZERO) else {
        return;
    };
    let q = s.dev.queue().unwrap();
    let buf = s.buffer();
    s.spin(&q, &buf);
    q.enqueue_host_fn(Box::new(|| panic!("on purpose")))
        .unwrap();
    s.spin(&q, &buf);
    match q.sync() {
        Err(Error::Callback { callback, source }) => {
            assert_eq!(callback, "Queue::enqueue_host_fn");
            assert!(source.to_string().contains("on purpose"), "{source}");
        }
        other => panic!("expected Callback, got {other:?}"),
    }
    q.sync().unwrap();
    assert_eq!(counters(&s.dev, &buf), vec![2; 64], "the work after it ran");
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    q.enqueue_host_fn(Box::new(move || flag.store(true, Ordering::SeqCst)))
        .unwrap();
    q.sync().unwrap();
    assert!(ran.load(Ordering::SeqCst));
    q.destroy().unwrap();
    s.dev.free(buf).unwrap();
    s.close();
}

/// Inside a host function: a sync of its own queue, an event recorded on it, a host access
/// or a free of a buffer that its own later (held) work uses are `InvalidArgument` at
/// once; work on another queue, a sync of it, and a host access to a buffer only earlier
/// work used are fine. The refused free releases the buffer after the held work.
#[test]
fn own_queue_waits_are_refused_other_queues_work() {
    let _serial = serial();
    let _watch = watchdog(Duration::from_secs(120), "own_queue_waits_are_refused");
    let Some(s) = Scene::open("own_queue_waits_are_refused", Duration::from_millis(5)) else {
        return;
    };
    let allocations = stats().live_allocations;
    let q = Arc::new(s.dev.queue().unwrap());
    let other = Arc::new(s.dev.queue().unwrap());
    let earlier = Arc::new(s.buffer());
    let later = Arc::new(s.buffer());
    let doomed = s.buffer();
    let mine = Arc::new(s.buffer());
    s.spin(&q, &earlier);
    let (tx, rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (q2, other2, dev2) = (q.clone(), other.clone(), s.dev.clone());
    let (earlier2, later2, mine2) = (earlier.clone(), later.clone(), mine.clone());
    let (k, groups) = (s.module.kernel("spin").unwrap(), s.groups);
    let doomed = Arc::new(Mutex::new(Some(doomed)));
    let doomed2 = doomed.clone();
    q.enqueue_host_fn(Box::new(move || {
        // The test has enqueued the held work by now.
        go_rx.recv().unwrap();
        let sync_own = q2.sync();
        let event_own = q2.record().and_then(|e| e.sync());
        let mut out = vec![0u8; SPIN_WORDS * 4];
        let read_later = dev2.read(&later2, 0, &mut out);
        let doomed = doomed2.lock().unwrap().take().unwrap();
        let free_later = dev2.free(doomed);
        let read_earlier = counters(&dev2, &earlier2);
        spin(&other2, &k, &mine2, groups);
        let sync_other = other2.sync();
        let read_mine = counters(&dev2, &mine2);
        tx.send((
            sync_own,
            event_own,
            read_later,
            free_later,
            read_earlier,
            sync_other,
            read_mine,
        ))
        .unwrap();
    }))
    .unwrap();
    s.spin(&q, &later);
    // `doomed` is used by work held behind the function.
    q.enqueue_copy(&later, 0, doomed.lock().unwrap().as_ref().unwrap(), 0, 4)
        .unwrap();
    go_tx.send(()).unwrap();
    q.sync().unwrap();
    let (sync_own, event_own, read_later, free_later, read_earlier, sync_other, read_mine) =
        rx.recv_timeout(Duration::from_secs(60)).unwrap();
    assert!(is_invalid(&sync_own), "own sync: {sync_own:?}");
    assert!(is_invalid(&event_own), "own event: {event_own:?}");
    assert!(
        is_invalid(&read_later),
        "read of held work's buffer: {read_later:?}"
    );
    assert!(
        is_invalid(&free_later),
        "free of held work's buffer: {free_later:?}"
    );
    assert_eq!(read_earlier, vec![1; 64]);
    sync_other.unwrap();
    assert_eq!(read_mine, vec![1; 64]);
    assert_eq!(counters(&s.dev, &later), vec![1; 64]);
    for queue in [q, other] {
        Arc::try_unwrap(queue).unwrap().destroy().unwrap();
    }
    for b in [earlier, later, mine] {
        s.dev.free(Arc::try_unwrap(b).unwrap()).unwrap();
    }
    assert_eq!(
        stats().live_allocations,
        allocations,
        "the refused free released it"
    );
    s.close();
}

/// An event recorded behind a host function has no value until the function has run:
/// another queue's `wait_event` on it returns at once and holds that queue's later work;
/// the event's `sync` (on another thread) waits for it; `elapsed_since` works.
#[test]
fn events_behind_a_host_fn_order_other_queues() {
    let _serial = serial();
    let _watch = watchdog(Duration::from_secs(120), "events_behind_a_host_fn");
    let Some(s) = Scene::open("events_behind_a_host_fn", Duration::from_millis(5)) else {
        return;
    };
    let (a, b) = (s.dev.queue().unwrap(), s.dev.queue().unwrap());
    let (buf_a, buf_b) = (s.buffer(), s.buffer());
    s.spin(&a, &buf_a);
    let start = a.record().unwrap();
    let (go_tx, go_rx) = mpsc::channel::<Arc<offload_vulkan::VulkanEvent>>();
    let (seen_tx, seen_rx) = mpsc::channel();
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    a.enqueue_host_fn(Box::new(move || {
        let later = go_rx.recv().unwrap();
        // The other queue's work after the wait is held until this returns.
        std::thread::sleep(Duration::from_millis(50));
        seen_tx.send(later.is_complete().unwrap()).unwrap();
        flag.store(true, Ordering::SeqCst);
    }))
    .unwrap();
    s.spin(&a, &buf_a);
    let behind = Arc::new(a.record().unwrap());
    assert!(
        !behind.is_complete().unwrap(),
        "held behind the host function"
    );
    b.wait_event(&behind).unwrap();
    s.spin(&b, &buf_b);
    let later = Arc::new(b.record().unwrap());
    assert!(
        !ran.load(Ordering::SeqCst),
        "wait_event waited for the host function"
    );
    let waiter = {
        let behind = behind.clone();
        std::thread::spawn(move || behind.sync())
    };
    go_tx.send(later.clone()).unwrap();
    later.sync().unwrap();
    waiter.join().unwrap().unwrap();
    assert!(ran.load(Ordering::SeqCst));
    assert!(
        !seen_rx.recv().unwrap(),
        "b's later work ran during a's host function"
    );
    assert!(behind.is_complete().unwrap());
    let elapsed = behind.elapsed_since(&start).unwrap();
    assert!(elapsed > Duration::ZERO || !behind.has_device_timestamp());
    println!("a's spin and host function: {elapsed:?}");
    later.elapsed_since(&behind).unwrap();
    assert_eq!(counters(&s.dev, &buf_a), vec![2; 64]);
    assert_eq!(counters(&s.dev, &buf_b), vec![1; 64]);
    start.destroy().unwrap();
    for e in [behind, later] {
        Arc::try_unwrap(e).unwrap().destroy().unwrap();
    }
    a.destroy().unwrap();
    b.destroy().unwrap();
    s.dev.free(buf_a).unwrap();
    s.dev.free(buf_b).unwrap();
    s.close();
}

/// A host access to (and a free of) a buffer that work held behind a host function uses
/// waits until that work has run.
#[test]
fn host_access_waits_for_held_work() {
    let _serial = serial();
    let _watch = watchdog(Duration::from_secs(120), "host_access_waits_for_held_work");
    let Some(s) = Scene::open("host_access_waits_for_held_work", Duration::from_millis(5)) else {
        return;
    };
    let allocations = stats().live_allocations;
    let q = s.dev.queue().unwrap();
    let (buf, gone) = (s.buffer(), s.buffer());
    let ran = Arc::new(AtomicUsize::new(0));
    let flag = ran.clone();
    q.enqueue_host_fn(Box::new(move || {
        std::thread::sleep(Duration::from_millis(100));
        flag.fetch_add(1, Ordering::SeqCst);
    }))
    .unwrap();
    s.spin(&q, &buf);
    s.spin(&q, &gone);
    // No sync: the read submits nothing itself; it waits for the gate, then the work.
    assert_eq!(counters(&s.dev, &buf), vec![1; 64]);
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    let flag = ran.clone();
    q.enqueue_host_fn(Box::new(move || {
        std::thread::sleep(Duration::from_millis(100));
        flag.fetch_add(1, Ordering::SeqCst);
    }))
    .unwrap();
    s.spin(&q, &gone);
    s.dev.free(gone).unwrap();
    assert_eq!(
        ran.load(Ordering::SeqCst),
        2,
        "the free waited for the held work"
    );
    // Two batches behind the gate use the buffer: the first, submitted when the gate
    // opens, must not make a host access forget the second (still open).
    let (go_tx, go_rx) = mpsc::channel();
    q.enqueue_host_fn(Box::new(move || go_rx.recv().unwrap()))
        .unwrap();
    s.spin(&q, &buf);
    let closes = q.record().unwrap();
    s.spin(&q, &buf);
    go_tx.send(()).unwrap();
    while !closes.is_complete().unwrap() {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        counters(&s.dev, &buf),
        vec![3; 64],
        "a read saw only the first batch"
    );
    closes.destroy().unwrap();
    q.destroy().unwrap();
    s.dev.free(buf).unwrap();
    assert_eq!(stats().live_allocations, allocations);
    s.close();
}

/// Dropping (or destroying) a queue right after `enqueue_host_fn` drains it: the function
/// runs, the held work and events are submitted, and nothing is left alive.
#[test]
fn dropping_the_queue_drains_it() {
    let _serial = serial();
    let _watch = watchdog(Duration::from_secs(120), "dropping_the_queue_drains_it");
    let Some(s) = Scene::open("dropping_the_queue_drains_it", Duration::from_millis(5)) else {
        return;
    };
    let before = stats();
    for destroy in [false, true] {
        let q = s.dev.queue().unwrap();
        let buf = s.buffer();
        s.spin(&q, &buf);
        let ran = Arc::new(AtomicUsize::new(0));
        let flag = ran.clone();
        q.enqueue_host_fn(Box::new(move || {
            flag.fetch_add(1, Ordering::SeqCst);
        }))
        .unwrap();
        s.spin(&q, &buf);
        let event = q.record().unwrap();
        let flag = ran.clone();
        q.enqueue_host_fn(Box::new(move || {
            flag.fetch_add(1, Ordering::SeqCst);
        }))
        .unwrap();
        if destroy {
            q.destroy().unwrap();
        } else {
            drop(q);
        }
        assert_eq!(ran.load(Ordering::SeqCst), 2, "both host functions ran");
        assert!(event.is_complete().unwrap());
        assert_eq!(counters(&s.dev, &buf), vec![2; 64]);
        event.destroy().unwrap();
        s.dev.free(buf).unwrap();
    }
    let after = stats();
    assert_eq!(after.live_queues, before.live_queues);
    assert_eq!(after.live_events, before.live_events);
    assert_eq!(after.live_allocations, before.live_allocations);
    s.close();
}
