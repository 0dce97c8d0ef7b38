//! Fixed tests of bad input (P4): wrong launch arguments, unknown kernels, invalid
//! images, out-of-range copies and sizes, a kernel of an unloaded module: each a typed
//! error that changes nothing.

#![allow(unsafe_code)]

use super::*;

/// P4: wrong launch arguments are `InvalidArgument` and change nothing.
pub(super) fn wrong_launch_arguments<P: Platforms>(fixtures: &Fixtures) -> Check {
    let rt = init::<P>()?;
    let devices = ok("Offload::devices", rt.devices())?;
    let dev = first_device(&rt)?;
    let module = ok("Program::load", Program::new(&fixtures.image).load(&dev))?;
    let add_one = ok("Module::kernel", module.kernel("add_one"))?;
    let fill = ok("Module::kernel", module.kernel("fill"))?;
    let noop = ok("Module::kernel", module.kernel("noop"))?;
    let queue = ok("Device::queue", dev.queue())?;
    let buf = ok("Device::alloc", dev.alloc(64, MemKind::Device))?;
    ok("Buffer::fill", buf.fill(0, 64, 0x5A))?;
    let (n, v) = (16u32, 3u32);
    let b = || Arg::buffer(&buf);
    let cases: Vec<(&str, &Kernel, Vec<Arg<'_>>)> = vec![
        ("add_one with 1 argument", &add_one, vec![b()]),
        ("add_one with no argument", &add_one, vec![]),
        (
            "add_one with 3 arguments",
            &add_one,
            vec![b(), Arg::scalar(&n), Arg::scalar(&n)],
        ),
        (
            "add_one with a u64 count",
            &add_one,
            vec![b(), Arg::scalar(&u64::from(n))],
        ),
        (
            "add_one with a u16 count",
            &add_one,
            vec![b(), Arg::scalar(&(n as u16))],
        ),
        (
            "add_one with the arguments swapped",
            &add_one,
            vec![Arg::scalar(&n), b()],
        ),
        (
            "add_one with a scalar for the buffer",
            &add_one,
            vec![Arg::scalar(&0u64), Arg::scalar(&n)],
        ),
        (
            "add_one with a buffer for the count",
            &add_one,
            vec![b(), b()],
        ),
        ("fill with 2 arguments", &fill, vec![b(), Arg::scalar(&v)]),
        (
            "fill with a u8 value",
            &fill,
            vec![b(), Arg::scalar(&1u8), Arg::scalar(&n)],
        ),
        (
            "fill with an f64 count",
            &fill,
            vec![b(), Arg::scalar(&v), Arg::scalar(&1.0f64)],
        ),
        ("noop with 1 argument", &noop, vec![Arg::scalar(&n)]),
        ("noop with a buffer", &noop, vec![b()]),
    ];
    for (what, kernel, args) in &cases {
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        invalid_arg(format!("Queue::launch of {what}"), unsafe {
            queue.launch(kernel, dims(1, 16), args)
        })?;
    }
    if let Some(other) = devices.get(1) {
        // A buffer or a kernel of another device.
        let foreign = ok(
            "Device::alloc on the second device",
            other.alloc(64, MemKind::Device),
        )?;
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        invalid_arg("Queue::launch with a buffer of another device", unsafe {
            queue.launch(
                &add_one,
                dims(1, 16),
                &[Arg::buffer(&foreign), Arg::scalar(&n)],
            )
        })?;
        let other_module = ok(
            "Program::load on the second device",
            Program::new(&fixtures.image).load(other),
        )?;
        let other_kernel = ok("Module::kernel", other_module.kernel("add_one"))?;
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        invalid_arg("Queue::launch of a kernel of another device", unsafe {
            queue.launch(&other_kernel, dims(1, 16), &[b(), Arg::scalar(&n)])
        })?;
    }
    ok("Queue::sync", queue.sync())?;
    same_bytes(
        "buffer after rejected launches",
        &read_all("Buffer::read", &buf)?,
        &[0x5A; 64],
    )?;
    // The queue still works.
    let mut model = vec![0x5A; 64];
    launch_checked(
        "a correct launch after rejected ones",
        &queue,
        &add_one,
        KernelKind::AddOne,
        &buf,
        &mut model,
        0,
        n,
        (1, 16),
    )?;
    ok("Queue::sync", queue.sync())?;
    same_bytes(
        "buffer after a correct launch",
        &read_all("Buffer::read", &buf)?,
        &model,
    )?;
    drop(cases);
    drop((add_one, fill, noop, module, queue, buf));
    last(rt)
}

/// P4: a kernel the module lacks is `SymbolNotFound` (names are matched exactly).
pub(super) fn unknown_kernel<P: Platforms>(fixtures: &Fixtures) -> Check {
    let rt = init::<P>()?;
    let dev = first_device(&rt)?;
    let module = ok("Program::load", Program::new(&fixtures.image).load(&dev))?;
    for name in ["no_such_kernel", "add_on", "add_one_", "ADD_ONE"] {
        expect_err(
            format!("Module::kernel({name:?})"),
            module.kernel(name),
            "Error::SymbolNotFound",
            |e| matches!(e, Error::SymbolNotFound { .. }),
        )?;
    }
    ok(
        "Module::kernel after failed lookups",
        module.kernel("add_one"),
    )?;
    drop(module);
    last(rt)
}

pub(super) fn invalid_binary<T>(what: impl fmt::Display, r: Result<T>) -> Check {
    expect_err(what, r, "Error::InvalidBinary", |e| {
        matches!(e, Error::InvalidBinary { .. })
    })
}

/// P4: empty, random and corrupted images are `InvalidBinary`; nothing breaks.
pub(super) fn invalid_images<P: Platforms>(fixtures: &Fixtures) -> Check {
    let rt = init::<P>()?;
    let dev = first_device(&rt)?;
    invalid_binary(
        "Program::load of an empty image",
        Program::new([]).load(&dev),
    )?;
    let mut flipped = fixtures.image.clone();
    for byte in flipped.iter_mut().take(4) {
        *byte ^= 0xFF;
    }
    invalid_binary(
        "Program::load of the fixture with its first 4 bytes flipped",
        Program::new(&flipped).load(&dev),
    )?;
    let result = runner(64).run(&vec(any::<u8>(), 1..=512), |bytes| {
        invalid_binary(
            "Program::load of random bytes",
            Program::new(&bytes).load(&dev),
        )
        .map_err(TestCaseError::fail)
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, bytes)) => {
            return Err(format!("{reason} (minimal image: {bytes:?})"));
        }
        Err(TestError::Abort(reason)) => return Err(format!("aborted: {reason}")),
    }
    let module = ok(
        "Program::load of the fixture after invalid images",
        Program::new(&fixtures.image).load(&dev),
    )?;
    ok("Module::kernel", module.kernel("noop"))?;
    drop(module);
    last(rt)
}

/// P4: out-of-range copies and zero-size allocations are `InvalidArgument` and change
/// nothing; an impossible allocation is `OutOfMemory` (or `InvalidArgument`).
pub(super) fn out_of_range<P: Platforms>(_: &Fixtures) -> Check {
    let rt = init::<P>()?;
    let dev = first_device(&rt)?;
    invalid_arg("Device::alloc(0)", dev.alloc(0, MemKind::Device))?;
    let huge = usize::MAX / 2;
    expect_err(
        format!("Device::alloc({huge})"),
        dev.alloc(huge, MemKind::Device),
        "Error::OutOfMemory or Error::InvalidArgument",
        |e| matches!(e, Error::OutOfMemory { .. } | Error::InvalidArgument { .. }),
    )?;
    let buf = ok("Device::alloc", dev.alloc(16, MemKind::Device))?;
    let pattern: Vec<u8> = (1..=16).collect();
    ok("Buffer::write", buf.write(0, &pattern))?;
    let mut out = [0u8; 8];
    for offset in [9, 16, 17, usize::MAX - 3, usize::MAX] {
        invalid_arg(
            format!("Buffer::read of 8 bytes at {offset}"),
            buf.read(offset, &mut out),
        )?;
        invalid_arg(
            format!("Buffer::write of 8 bytes at {offset}"),
            buf.write(offset, &[0; 8]),
        )?;
        invalid_arg(
            format!("Buffer::fill of 8 bytes at {offset}"),
            buf.fill(offset, 8, 0),
        )?;
    }
    invalid_arg("Buffer::read of 17 bytes", buf.read(0, &mut [0; 17]))?;
    invalid_arg("Buffer::write of 17 bytes", buf.write(0, &[0; 17]))?;
    ok("Buffer::read of 0 bytes at the end", buf.read(16, &mut []))?;
    ok("Buffer::write of 0 bytes at the end", buf.write(16, &[]))?;
    same_bytes(
        "buffer after rejected copies",
        &read_all("Buffer::read", &buf)?,
        &pattern,
    )?;
    drop(buf);
    last(rt)
}

/// A kernel whose module was unloaded is `InvalidArgument` on launch; loading again works.
pub(super) fn kernel_of_unloaded_module<P: Platforms>(fixtures: &Fixtures) -> Check {
    let rt = init::<P>()?;
    let dev = first_device(&rt)?;
    let queue = ok("Device::queue", dev.queue())?;
    let buf = ok("Device::alloc", dev.alloc(16, MemKind::Device))?;
    ok("Buffer::fill", buf.fill(0, 16, 0))?;
    let program = Program::new(&fixtures.image);
    let module = ok("Program::load", program.load(&dev))?;
    let old_id = module.id();
    let add_one = ok("Module::kernel", module.kernel("add_one"))?;
    let noop = ok("Module::kernel", module.kernel("noop"))?;
    let other_handle = module.clone();
    ok("Module::unload", module.unload())?;
    let n = 4u32;
    invalid_arg(
        "Queue::launch of add_one whose module was unloaded",
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        unsafe { queue.launch(&add_one, dims(1, 4), &[Arg::buffer(&buf), Arg::scalar(&n)]) },
    )?;
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    invalid_arg("Queue::launch of noop whose module was unloaded", unsafe {
        queue.launch(&noop, dims(1, 1), &[])
    })?;
    invalid_arg(
        "Module::kernel on another handle of an unloaded module",
        other_handle.kernel("noop"),
    )?;
    ok("Queue::sync", queue.sync())?;
    same_bytes(
        "buffer after launches of an unloaded module",
        &read_all("Buffer::read", &buf)?,
        &[0; 16],
    )?;

    let again = ok("Program::load after unload", program.load(&dev))?;
    ensure!(
        again.id() != old_id,
        "loading the program after Module::unload gave back the unloaded module {old_id}"
    );
    let k = ok("Module::kernel", again.kernel("add_one"))?;
    let mut model = vec![0u8; 16];
    launch_checked(
        "launch after reloading",
        &queue,
        &k,
        KernelKind::AddOne,
        &buf,
        &mut model,
        0,
        n,
        (1, 4),
    )?;
    ok("Queue::sync", queue.sync())?;
    same_bytes(
        "buffer after reloading",
        &read_all("Buffer::read", &buf)?,
        &model,
    )?;
    drop((add_one, noop, other_handle, again, k, queue, buf));
    last(rt)
}
