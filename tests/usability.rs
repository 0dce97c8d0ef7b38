//! The API a Rust GPU programmer expects — typed buffers and views as kernel
//! arguments, scalar types checked in the user's words, errors that name the call and the
//! object by its label, missing kernels listed, and logs of init, load and launch.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use offload::{BackendKind, Dims, Error, MemKind, Offload, Program};

fn host_device(rt: &Offload) -> offload::Device {
    rt.devices()
        .unwrap()
        .into_iter()
        .find(|d| d.backend() == BackendKind::Host)
        .expect("the host backend is built in")
}

/// Point 2: typed allocation and copies, and a view of elements as a kernel argument.
#[test]
fn typed_buffers_and_views_run_kernels_on_a_range() {
    let _serial = common::serial();
    let rt = Offload::init().unwrap();
    let dev = host_device(&rt);
    let data: Vec<u32> = (0..64).collect();
    let buf = dev.upload(&data).unwrap().label("counts");
    assert_eq!(buf.len(), 64);
    assert_eq!(buf.to_vec().unwrap(), data);
    let add_one = Program::new(offload::host::fixtures::KERNELS)
        .load(&dev)
        .unwrap()
        .kernel("add_one")
        .unwrap();
    let queue = dev.queue().unwrap();
    let view = buf.slice(16..32);
    // SAFETY: add_one adds 1 to the first n u32s of its buffer; the view holds 16.
    unsafe {
        queue.launch(
            &add_one,
            Dims::for_num_elems(16),
            &offload::args![&view, 16u32],
        )
    }
    .unwrap();
    queue.sync().unwrap();
    let after = buf.to_vec().unwrap();
    for (i, (&got, &was)) in after.iter().zip(&data).enumerate() {
        let want = if (16..32).contains(&i) { was + 1 } else { was };
        assert_eq!(got, want, "element {i}");
    }
    // A view outside the buffer is refused before the kernel runs, naming the buffer.
    let outside = buf.slice(60..70);
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    let err = unsafe {
        queue.launch(
            &add_one,
            Dims::for_num_elems(10),
            &offload::args![&outside, 10u32],
        )
    }
    .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    assert!(err.to_string().contains(r#"buffer "counts""#), "{err}");
    drop((buf, queue, add_one));
    rt.shutdown().unwrap();
}

/// Point 3: a scalar of the wrong type is refused in the user's words.
#[test]
fn a_scalar_of_the_wrong_type_is_named() {
    let _serial = common::serial();
    let rt = Offload::init().unwrap();
    let dev = host_device(&rt);
    let add_one = Program::new(offload::host::fixtures::KERNELS)
        .load(&dev)
        .unwrap()
        .kernel("add_one")
        .unwrap();
    let buf = dev.alloc_zeros::<u32>(4).unwrap();
    let queue = dev.queue().unwrap();
    // SAFETY: refused before it runs (wrong type); were it to run, 4 u32s fit.
    let err = unsafe {
        queue.launch(
            &add_one,
            Dims::for_num_elems(4),
            &offload::args![&buf, 4.0f32],
        )
    }
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("argument 2 of `add_one` is a u32; got an f32 (4.0f32)"),
        "{text}"
    );
    // A range outside its buffer names the argument.
    let bytes = dev.alloc(16, offload::MemKind::Device).unwrap();
    // SAFETY: refused before it runs (the range is outside the buffer).
    let err = unsafe {
        queue.launch(
            &add_one,
            Dims::for_num_elems(4),
            &[
                offload::Arg::range(&bytes, 8, 16),
                offload::Arg::value(4u32),
            ],
        )
    }
    .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{text}");
    assert!(text.contains("argument 1 of `add_one`: "), "{text}");
    drop(bytes);
    // The right type runs.
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    unsafe {
        queue.launch(
            &add_one,
            Dims::for_num_elems(4),
            &offload::args![&buf, 4u32],
        )
    }
    .unwrap();
    queue.sync().unwrap();
    assert_eq!(buf.to_vec().unwrap(), [1, 1, 1, 1]);
    drop((buf, queue, add_one));
    rt.shutdown().unwrap();
}

/// Point 4: errors name the call and the object by its label, in `Display` and in the
/// `Debug` that `main` prints, and never an internal key.
#[test]
fn errors_name_the_call_and_the_labelled_object() {
    let _serial = common::serial();
    let rt = Offload::init().unwrap();
    let dev = host_device(&rt);
    let weights = dev.alloc(4096, MemKind::Device).unwrap().label("weights");
    let plain = dev.alloc(64, MemKind::Device).unwrap();
    let queue = dev.queue().unwrap().label("uploads");
    let range = plain.write(60, &[0; 8]).unwrap_err().to_string();
    assert!(
        range.contains("Buffer::write") && range.contains("64-byte host device buffer"),
        "{range}"
    );
    rt.shutdown().unwrap();
    let err = weights.write(0, &[1]).unwrap_err();
    assert!(matches!(err, Error::ShutDown { .. }));
    for text in [err.to_string(), format!("{err:?}")] {
        assert!(text.contains("Buffer::write"), "{text}");
        assert!(
            text.contains(r#"buffer "weights" (4096 bytes, host)"#),
            "{text}"
        );
        assert!(text.contains("Offload::init"), "says what to do: {text}");
        assert!(
            !text.contains("Key") && !text.contains("generation"),
            "{text}"
        );
    }
    let err = queue.sync().unwrap_err();
    assert!(
        err.to_string().contains(r#"queue "uploads" (host)"#),
        "{err}"
    );
    let module_err = Program::new(offload::host::fixtures::KERNELS)
        .label("fixtures")
        .load(&dev)
        .unwrap_err();
    assert!(
        module_err.to_string().contains("Program::load"),
        "{module_err}"
    );
    assert!(
        module_err.to_string().contains("host device 0"),
        "{module_err}"
    );
}

/// Point 5: a missing kernel lists the kernels the module has.
#[test]
fn a_missing_kernel_lists_what_the_module_has() {
    let _serial = common::serial();
    let rt = Offload::init().unwrap();
    let dev = host_device(&rt);
    let module = Program::new(offload::host::fixtures::KERNELS)
        .label("fixtures")
        .load(&dev)
        .unwrap();
    let err = module.kernel("saxpy").unwrap_err();
    let text = err.to_string();
    assert!(text.contains("`saxpy` not found"), "{text}");
    assert!(
        text.contains("`add_one`") && text.contains("`noop`"),
        "{text}"
    );
    drop(module);
    rt.shutdown().unwrap();
}

/// A writer tracing-subscriber formats into, shared with the test.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Point 9: init, load and launch are logged through `tracing`.
#[test]
fn init_load_and_launch_are_logged() {
    use tracing_subscriber::util::SubscriberInitExt as _;
    let _serial = common::serial();
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing_subscriber::filter::LevelFilter::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let guard = subscriber.set_default();
    let rt = Offload::init().unwrap();
    let dev = host_device(&rt);
    let noop = Program::new(offload::host::fixtures::KERNELS)
        .label("fixtures")
        .load(&dev)
        .unwrap()
        .kernel("noop")
        .unwrap();
    let queue = dev.queue().unwrap();
    // SAFETY: noop takes no arguments and touches nothing.
    unsafe { queue.launch(&noop, Dims::grid([1, 1, 1]), &[]) }.unwrap();
    queue.sync().unwrap();
    drop((noop, queue));
    rt.shutdown().unwrap();
    drop(guard);
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    for target in ["offload::init", "offload::load", "offload::launch"] {
        assert!(text.contains(target), "no {target} event in:\n{text}");
    }
    assert!(
        text.contains("fixtures"),
        "the load names the program's label:\n{text}"
    );
    assert!(
        text.contains("noop"),
        "the launch names the kernel:\n{text}"
    );
}
