//! Bad input gets a typed error that names the call and the object, and leaks nothing:
//! zero-size and absurd allocations, out-of-range copies, a buffer of one device passed to
//! another device's call. The host backend counts live allocations; they return to zero.
//! A property test checks buffer copies against a model (`Vec<u8>`).

mod common;

use offload::{BackendKind, Error, MemKind, Offload};
use proptest::prelude::*;

fn live() -> usize {
    offload::host::stats().live_allocations
}

#[test]
fn impossible_allocations_are_typed_errors() {
    let _serial = common::serial();
    let before = live();
    let rt = Offload::init().unwrap();
    let dev = rt.devices().unwrap().remove(0);
    match dev.alloc(0, MemKind::Device) {
        Err(e @ Error::InvalidArgument { .. }) => {
            assert!(e.to_string().contains("Device::alloc"), "{e}");
            assert!(e.to_string().contains("zero-size"), "{e}");
        }
        other => panic!("zero-size alloc gave {other:?}"),
    }
    for size in [1usize << 62, usize::MAX, isize::MAX as usize + 1] {
        match dev.alloc(size, MemKind::Device) {
            Err(
                e @ Error::OutOfMemory {
                    backend: BackendKind::Host,
                    requested,
                    ..
                },
            ) => {
                assert_eq!(requested, size as u64);
                assert!(e.to_string().contains("host"), "{e}");
            }
            other => panic!("alloc of {size} bytes gave {other:?}"),
        }
        // The exportable kind names its own call.
        match dev.alloc_exportable(size, MemKind::Device) {
            Err(e @ Error::OutOfMemory { call, .. }) => {
                assert_eq!(call, "Device::alloc_exportable", "{e}");
            }
            other => panic!("alloc_exportable of {size} bytes gave {other:?}"),
        }
    }
    match dev.alloc_exportable(0, MemKind::Device) {
        Err(e @ Error::InvalidArgument { call, .. }) => {
            assert_eq!(call, "Device::alloc_exportable", "{e}");
        }
        other => panic!("zero-size alloc_exportable gave {other:?}"),
    }
    assert_eq!(live(), before, "failed allocations leak nothing");
    rt.shutdown().unwrap();
}

#[test]
fn out_of_range_copies_are_invalid_arguments() {
    let _serial = common::serial();
    let before = live();
    let rt = Offload::init().unwrap();
    let dev = rt.devices().unwrap().remove(0);
    let buf = dev.alloc(100, MemKind::Device).unwrap();
    let other = dev.alloc(10, MemKind::Device).unwrap();
    let mut big = vec![0u8; 101];
    let cases: Vec<(&str, offload::Result<()>)> = vec![
        ("read past the end", buf.read(0, &mut big)),
        ("read at the end", buf.read(100, &mut [0u8; 1])),
        (
            "read with offset overflow",
            buf.read(usize::MAX, &mut [0u8; 2]),
        ),
        ("write past the end", buf.write(99, &[1, 2])),
        (
            "write with offset overflow",
            buf.write(usize::MAX - 1, &[1, 2, 3]),
        ),
        ("fill past the end", buf.fill(50, 51, 0)),
        ("fill with length overflow", buf.fill(1, usize::MAX, 0)),
        ("copy past the source", other.copy_from(0, &buf, 95, 10)),
        ("copy past the destination", buf.copy_from(0, &other, 0, 11)),
        ("copy within past the end", buf.copy_from(95, &buf, 0, 10)),
    ];
    for (what, result) in cases {
        match result {
            Err(e @ Error::InvalidArgument { .. }) => {
                let text = e.to_string();
                assert!(text.contains("Buffer::"), "{what}: {text}");
                assert!(
                    text.contains("host device buffer"),
                    "{what} names the object: {text}"
                );
            }
            other => panic!("{what}: {other:?}"),
        }
    }
    // Empty copies at the very end are fine.
    buf.read(100, &mut []).unwrap();
    buf.write(100, &[]).unwrap();
    drop((buf, other));
    assert_eq!(live(), before);
    rt.shutdown().unwrap();
}

#[test]
fn a_copy_between_devices_is_checked_and_staged() {
    let _serial = common::serial();
    let before = live();
    let rt = Offload::builder().host_devices(2).start().unwrap();
    let devices = rt.devices().unwrap();
    let a = devices[0].alloc(16, MemKind::Device).unwrap();
    let b = devices[1].alloc(16, MemKind::Device).unwrap();
    a.write(0, &[3; 16]).unwrap();
    // Out of range on either side is still InvalidArgument, naming the buffer.
    for result in [b.copy_from(0, &a, 1, 16), b.copy_from(1, &a, 0, 16)] {
        match result {
            Err(e @ Error::InvalidArgument { .. }) => {
                assert!(e.to_string().contains("host device buffer"), "{e}")
            }
            other => panic!("an out-of-range cross-device copy gave {other:?}"),
        }
    }
    b.copy_from(0, &a, 0, 16).unwrap(); // staged through host memory
    let mut out = [0u8; 16];
    b.read(0, &mut out).unwrap();
    assert_eq!(out, [3; 16]);
    assert_eq!(a.device(), devices[0]);
    assert_ne!(a.device(), devices[1]);
    drop((a, b));
    assert_eq!(live(), before);
    rt.shutdown().unwrap();
}

#[derive(Clone, Debug)]
enum Op {
    Write {
        offset: usize,
        data: Vec<u8>,
    },
    Fill {
        offset: usize,
        len: usize,
        value: u8,
    },
    CopyWithin {
        src: usize,
        dst: usize,
        len: usize,
    },
    CopyFromOther {
        src: usize,
        dst: usize,
        len: usize,
    },
    Read {
        offset: usize,
        len: usize,
    },
}

const SIZE: usize = 256;

fn op() -> impl Strategy<Value = Op> {
    // Ranges go a little past the end so out-of-range cases are exercised too.
    let at = 0..SIZE + 8;
    prop_oneof![
        (at.clone(), proptest::collection::vec(any::<u8>(), 0..64))
            .prop_map(|(offset, data)| Op::Write { offset, data }),
        (at.clone(), 0..80usize, any::<u8>()).prop_map(|(offset, len, value)| Op::Fill {
            offset,
            len,
            value
        }),
        (at.clone(), at.clone(), 0..80usize).prop_map(|(src, dst, len)| Op::CopyWithin {
            src,
            dst,
            len
        }),
        (at.clone(), at.clone(), 0..80usize).prop_map(|(src, dst, len)| Op::CopyFromOther {
            src,
            dst,
            len
        }),
        (at, 0..80usize).prop_map(|(offset, len)| Op::Read { offset, len }),
    ]
}

fn fits(offset: usize, len: usize) -> bool {
    offset + len <= SIZE
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn buffer_copies_match_a_model(ops in proptest::collection::vec(op(), 1..40)) {
        let _serial = common::serial();
        let before = live();
        let rt = Offload::init().unwrap();
        let dev = rt.devices().unwrap().remove(0);
        let buf = dev.alloc(SIZE, MemKind::Device).unwrap();
        let other = dev.alloc(SIZE, MemKind::Device).unwrap();
        let mut model = vec![0u8; SIZE];
        let other_model: Vec<u8> = (0..SIZE).map(|i| (i * 7) as u8).collect();
        other.write(0, &other_model).unwrap();
        for op in ops {
            let (ok, result) = match &op {
                Op::Write { offset, data } => {
                    let ok = fits(*offset, data.len());
                    if ok { model[*offset..*offset + data.len()].copy_from_slice(data); }
                    (ok, buf.write(*offset, data))
                }
                Op::Fill { offset, len, value } => {
                    let ok = fits(*offset, *len);
                    if ok { model[*offset..*offset + *len].fill(*value); }
                    (ok, buf.fill(*offset, *len, *value))
                }
                Op::CopyWithin { src, dst, len } => {
                    let ok = fits(*src, *len) && fits(*dst, *len);
                    if ok { model.copy_within(*src..*src + *len, *dst); }
                    (ok, buf.copy_from(*dst, &buf, *src, *len))
                }
                Op::CopyFromOther { src, dst, len } => {
                    let ok = fits(*src, *len) && fits(*dst, *len);
                    if ok { model[*dst..*dst + *len].copy_from_slice(&other_model[*src..*src + *len]); }
                    (ok, buf.copy_from(*dst, &other, *src, *len))
                }
                Op::Read { offset, len } => {
                    let mut out = vec![0u8; *len];
                    let result = buf.read(*offset, &mut out);
                    let ok = fits(*offset, *len);
                    if ok && result.is_ok() {
                        prop_assert_eq!(&out[..], &model[*offset..*offset + *len]);
                    }
                    (ok, result)
                }
            };
            match result {
                Ok(()) => prop_assert!(ok, "{:?} should have failed", op),
                Err(Error::InvalidArgument { .. }) => prop_assert!(!ok, "{:?} should have worked", op),
                Err(e) => prop_assert!(false, "{:?}: unexpected {}", op, e),
            }
        }
        let mut whole = vec![0u8; SIZE];
        buf.read(0, &mut whole).unwrap();
        prop_assert_eq!(whole, model);
        drop((buf, other));
        rt.shutdown().unwrap();
        prop_assert_eq!(live(), before);
    }
}
