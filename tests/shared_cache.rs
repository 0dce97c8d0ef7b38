//! The shared compile cache hook (`set_shared_cache`): asked after memory and disk miss,
//! its image is used without compiling here and written to the disk cache, a compile error
//! passes through it whole, and removing it restores compiling here. The cache in this test
//! is an in-process map standing in for a job's other processes (offload-mpi's `JobCache`
//! is the real one, tested under `mpiexec`). This file is its own process: the hook is
//! process-wide.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use offload::{
    BackendKind, CompileKey, Dims, Error, Offload, Program, Result, SharedCache, Source,
    compile_stats, set_shared_cache,
};

/// Keeps every image compiled through it, and answers later asks for the key with it.
#[derive(Default)]
struct Remembers {
    images: Mutex<HashMap<CompileKey, Vec<u8>>>,
    asked: Mutex<Vec<CompileKey>>,
}

impl SharedCache for Remembers {
    fn get_or_compile(
        &self,
        key: &CompileKey,
        compile: &mut dyn FnMut() -> Result<Vec<u8>>,
    ) -> Result<Vec<u8>> {
        self.asked.lock().unwrap().push(*key);
        if let Some(image) = self.images.lock().unwrap().get(key) {
            return Ok(image.clone());
        }
        let image = compile()?;
        self.images.lock().unwrap().insert(*key, image.clone());
        Ok(image)
    }
}

/// The `put` program writing `value`, its text this process's own.
fn source(value: u32) -> Source {
    common::put_kernel(&format!("shared cache test {}", std::process::id()), value)
}

fn runs(rt: &Offload, source: Source, value: u32) -> Result<()> {
    let dev = rt.device(BackendKind::Host)?;
    let put = Program::from_source(source).load(&dev)?.kernel("put")?;
    let buf = dev.alloc_zeros::<u32>(16)?;
    let queue = dev.queue()?;
    // SAFETY: `put` writes the first n u32s of its buffer, which holds 16.
    unsafe { queue.launch(&put, Dims::for_num_elems(16), &offload::args![&buf, 16u32]) }?;
    queue.sync()?;
    assert_eq!(buf.to_vec()?, vec![value; 16]);
    Ok(())
}

#[test]
fn the_shared_cache_answers_misses_and_errors_pass_through_it() {
    let shared = Arc::new(Remembers::default());
    assert!(set_shared_cache(Some(shared.clone())).is_none());
    let dir = std::env::temp_dir().join(format!("offload-shared-cache-{}", std::process::id()));
    let start = |cache: Option<&std::path::Path>| {
        Offload::builder()
            .backends([BackendKind::Host])
            .compile_cache(cache.map(|p| p.to_path_buf()))
            .start()
            .unwrap()
    };

    // A miss everywhere: compiled here once, through the shared cache.
    let before = compile_stats();
    runs(&start(None), source(5), 5).unwrap();
    let after = compile_stats();
    assert_eq!(after.compiles - before.compiles, 1);
    assert_eq!(after.shared_hits, before.shared_hits);

    // Another program of the same source, no disk cache: the shared cache's image, no
    // compile; with a disk cache: also written there, so the next one is a disk hit and
    // the shared cache is not asked.
    runs(&start(Some(&dir)), source(5), 5).unwrap();
    let shared_hit = compile_stats();
    assert_eq!(shared_hit.compiles, after.compiles);
    assert_eq!(shared_hit.shared_hits - after.shared_hits, 1);
    assert_eq!(shared_hit.disk_writes - after.disk_writes, 1);
    let asked = shared.asked.lock().unwrap().len();
    runs(&start(Some(&dir)), source(5), 5).unwrap();
    assert_eq!(compile_stats().disk_hits - shared_hit.disk_hits, 1);
    assert_eq!(shared.asked.lock().unwrap().len(), asked);

    // A different source is a different key: compiled, never another's image.
    runs(&start(None), source(9), 9).unwrap();
    assert_eq!(shared.images.lock().unwrap().len(), 2);

    // A compile error comes back from `load` with the compiler's log.
    let rt = start(None);
    let dev = rt.device(BackendKind::Host).unwrap();
    let broken = Program::from_source(Source::c("this is not C")).load(&dev);
    assert!(
        matches!(&broken, Err(Error::Compile { log, .. }) if log.contains("error")),
        "{broken:?}"
    );

    // Removed: compiles here again.
    assert!(set_shared_cache(None).is_some());
    let before = compile_stats();
    runs(&start(None), source(5), 5).unwrap();
    assert_eq!(compile_stats().compiles - before.compiles, 1);
    let _ = std::fs::remove_dir_all(&dir);
}
