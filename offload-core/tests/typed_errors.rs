//! Typed buffers' errors name the typed call and the elements, also when the byte call
//! underneath fails (a runtime shut down). Its own test binary: it needs the process's
//! runtime to itself (its shutdown must be the last reference).

use offload_core::Error;
use offload_core::reference::Offload;

#[test]
fn typed_calls_name_themselves_and_elements() {
    let rt = Offload::init().unwrap();
    let dev = rt.devices().unwrap().remove(0);
    let buf = dev.alloc_zeros::<f32>(8).unwrap().label("x");
    let mut four = [0f32; 4];
    let e = buf.read(6, &mut four).unwrap_err();
    let text = e.to_string();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                call: "TypedBuffer::read",
                ..
            }
        ),
        "{text}"
    );
    assert!(text.contains("elements 6..10"), "{text}");
    assert!(text.contains("8 × f32"), "{text}");
    assert!(!text.contains("bytes 24"), "{text}"); // not the byte range underneath
    let e = buf.write(7, &four).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                call: "TypedBuffer::write",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("elements 7..11"), "{e}");
    // Errors of the byte call underneath carry the typed call's name too.
    assert!(rt.shutdown().unwrap().was_last());
    for e in [
        buf.read(0, &mut four).unwrap_err(),
        buf.write(0, &four).unwrap_err(),
        buf.to_vec().unwrap_err(),
        buf.slice(1..3).write(&[1.0, 2.0]).unwrap_err(),
    ] {
        assert!(matches!(e, Error::ShutDown { .. }), "{e}");
        let text = e.to_string();
        assert!(
            !text.contains("Buffer::read") || text.contains("TypedBuffer::"),
            "{text}"
        );
        assert!(
            text.contains("TypedBuffer::") || text.contains("BufferView::"),
            "{text}"
        );
    }
}
