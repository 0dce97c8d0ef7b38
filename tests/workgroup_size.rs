//! S1: what a WGSL kernel declares is what runs. The safe `Queue::run` launches a kernel that
//! declares `@workgroup_size` with that size only; another block is `InvalidArgument`
//! naming both (before, `.block([4, 4, 1])` ran an `@workgroup_size(8, 8)` tile sum with 16
//! threads and returned `Ok` with 16 per group instead of 64). Another size runs only when
//! the caller says so (`Queue::run_resized`).
//!
//! A machine without a Vulkan device skips with the reason, except with `CI=true`.
#![cfg(feature = "wgsl")]

mod common;

use offload::{BackendKind, Dims, Error, Offload, Program, Source};

/// Each workgroup fills a 64-entry tile, one entry per thread, and its first thread sums it.
const TILE_SUM: &str = "
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
var<workgroup> tile: array<u32, 64>;

@compute @workgroup_size(8, 8)
fn sum(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    tile[li] = 1u;
    workgroupBarrier();
    if li == 0u {
        var s = 0u;
        for (var i = 0u; i < 64u; i++) {
            s += tile[i];
        }
        out[wg.x] = s;
    }
}
";

#[test]
fn run_launches_the_declared_workgroup_size_only() -> offload::Result<()> {
    let _serial = common::serial();
    let rt = Offload::init()?;
    let dev = match rt.device(BackendKind::Vulkan) {
        Ok(dev) => dev,
        Err(e) if !common::in_ci() => {
            eprintln!("SKIPPED workgroup sizes: no Vulkan device: {e}");
            return Ok(());
        }
        Err(e) => panic!("CI=true and no Vulkan device: {e}"),
    };
    let sum = Program::from_source(Source::wgsl(TILE_SUM))
        .load(&dev)?
        .kernel("sum")?;
    assert_eq!(sum.workgroup_size(), Some([8, 8, 1]));
    let out = dev.alloc_zeros::<u32>(4)?;
    let queue = dev.queue()?;

    queue.run(
        &sum,
        Dims::grid([4, 1, 1]).block([8, 8, 1]),
        &offload::args![&out],
    )?;
    queue.sync()?;
    assert_eq!(out.to_vec()?, [64; 4]);

    for block in [[4, 4, 1], [16, 4, 1], [64, 1, 1]] {
        let e = queue
            .run(
                &sum,
                Dims::grid([4, 1, 1]).block(block),
                &offload::args![&out],
            )
            .unwrap_err();
        match &e {
            Error::InvalidArgument { call, reason } => {
                assert_eq!(*call, "Queue::run");
                assert!(reason.contains("[8, 8, 1]"), "{reason}");
                assert!(reason.contains(&format!("{block:?}")), "{reason}");
            }
            other => panic!("blocks of {block:?} gave {other:?}"),
        }
    }
    // Nothing ran: the tile sums are the first launch's.
    queue.sync()?;
    assert_eq!(out.to_vec()?, [64; 4]);

    // The fix a refusal suggests is written in the language of the queue's caller: Rust's
    // by default, C's on a queue the C API made (Python's: python/tests/test_args.py).
    let four_by_four = Dims::grid([4, 1, 1]).block([4, 4, 1]);
    let rust = queue.run(&sum, four_by_four, &offload::args![&out]);
    let rust = rust.unwrap_err().to_string();
    assert!(
        rust.contains("(write `Dims::grid([..]).block([8, 8, 1])`)")
            && rust.contains("`queue.run_resized(..)`"),
        "{rust}"
    );
    let c_queue = dev.queue()?.for_caller(offload::Caller::C);
    let c = c_queue.run(&sum, four_by_four, &offload::args![&out]);
    let c = c.unwrap_err().to_string();
    assert!(
        c.contains("(set `offload_dims_t`'s `block` to `{8, 8, 1}`)"),
        "{c}"
    );
    assert!(!c.contains("Dims::") && !c.contains("run_resized"), "{c}");
    drop(c_queue);

    // Another size, said on purpose: it runs (still memory-safe), and computes what a tile
    // of 16 threads computes.
    out.write(0, &[0u32; 4])?;
    queue.run_resized(
        &sum,
        Dims::grid([4, 1, 1]).block([4, 4, 1]),
        &offload::args![&out],
    )?;
    queue.sync()?;
    assert_eq!(out.to_vec()?, [16; 4]);

    drop((sum, out, queue));
    rt.shutdown()?;
    Ok(())
}
