//! L2/L3: re-initialisation 1,000 times in one process, each time with fresh state. A
//! handle from generation N is rejected in generation N+1 with `Error::ShutDown`, even
//! though a new runtime is live, and dropping it then is harmless. While a generation lives
//! its configuration is fixed: asking for another is refused, the next generation takes it.

mod common;

use offload::{BackendKind, Error, MemKind, Offload};

#[test]
fn a_thousand_generations_each_start_fresh() {
    let _serial = common::serial();
    let before = offload::host::stats();
    let mut previous = None;
    let mut last_generation = 0;
    for i in 0..1_000usize {
        // A different configuration each time proves the state is rebuilt, not reused.
        let wanted = 1 + i % 3;
        let rt = Offload::builder()
            .backends([BackendKind::Host])
            .host_devices(wanted)
            .start()
            .expect("start");
        assert!(rt.generation() > last_generation, "generation {i} is new");
        last_generation = rt.generation();
        assert_eq!(rt.config().unwrap().host_devices, wanted);
        if i % 100 == 0 {
            // The configuration is fixed while the generation lives: a request for another
            // is refused (it took no reference), and honoured by the next generation.
            let refused = Offload::builder().host_devices(wanted + 1).start();
            assert!(
                matches!(refused, Err(Error::InvalidArgument { .. })),
                "generation {i}: {refused:?}"
            );
        }
        let devices = rt.devices().unwrap();
        assert_eq!(devices.len(), wanted, "generation {i} has its own devices");

        if let Some((old_device, old_buffer)) = previous.take() {
            let old_device: offload::Device = old_device;
            let old_buffer: offload::Buffer = old_buffer;
            let mut out = [0u8; 8];
            assert!(matches!(
                old_buffer.read(0, &mut out),
                Err(Error::ShutDown { .. })
            ));
            assert!(matches!(
                old_buffer.write(0, &out),
                Err(Error::ShutDown { .. })
            ));
            assert!(matches!(
                old_device.alloc(8, MemKind::Device),
                Err(Error::ShutDown { .. })
            ));
            assert!(matches!(old_device.info(), Err(Error::ShutDown { .. })));
            assert_ne!(old_device, devices[0], "a stale device is not a live one");
            drop(old_buffer);
        }

        let dev = devices.last().unwrap().clone();
        let buf = dev.alloc(64, MemKind::Device).unwrap();
        buf.write(0, &[i as u8; 64]).unwrap();
        assert_eq!(
            offload::host::stats().live_allocations,
            before.live_allocations + 1
        );
        previous = Some((dev, buf));

        assert!(rt.shutdown().expect("shutdown").was_last());
        assert_eq!(
            offload::host::stats().live_allocations,
            before.live_allocations,
            "teardown freed the buffer the user still holds"
        );
    }
    drop(previous);
    let after = offload::host::stats();
    assert_eq!(after.opened - before.opened, 1_000);
    assert_eq!(after.deinitialised - before.deinitialised, 1_000);
    assert!(offload::take_unreported_errors().is_empty());
}
