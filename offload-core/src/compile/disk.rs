//! The compile cache on disk: one file per key under the cache directory, shared by every
//! process of the user.
//!
//! - **Format**: `OFFLOADC` magic, format version (u32 LE), payload length (u64 LE), the
//!   payload's SHA-256, the payload. A file that is short, long, of another version or
//!   whose checksum does not match is corrupt: it is deleted and the source compiled
//!   again, never loaded.
//! - **Atomic writes**: an entry is written to a private temporary file in the same
//!   directory and renamed over its name, so a concurrent reader sees the old entry, the
//!   new one or none, never a torn one; processes racing on one key each rename a whole
//!   entry and exactly one file remains.
//! - **Bounded**: after a write, entries beyond the size bound are removed least recently
//!   used first (a hit refreshes the entry's modification time); temporary files older than
//!   an hour (a process that died mid-write) go too.
//! - **Private**: the directory is created 0700; a directory another user owns, or that
//!   others may write, is not used (a cached host program is native code this process will
//!   run), and the cache behaves as disabled, with a warning in the log.
//!
//! Every failure here is silent to the caller (a cache miss): the cache can only save a
//! compile, never fail a load.

use crate::sync::{Arc, AtomicU64, Ordering, statics};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use super::{CORRUPT, DISK_HITS, DISK_WRITES, EVICTED, Key, hex};

const MAGIC: &[u8; 8] = b"OFFLOADC";
const VERSION: u32 = 1;
const HEADER: usize = 8 + 4 + 8 + 32;
const SUFFIX: &str = ".offc";
const TEMP_PREFIX: &str = ".tmp-";
/// Temporary files older than this belong to a process that died mid-write.
const STALE_TEMP: Duration = Duration::from_secs(3600);

statics! {
    static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);
}

/// The cache in one directory.
pub(crate) struct Cache<'a> {
    dir: &'a Path,
    max_bytes: u64,
}

impl<'a> Cache<'a> {
    pub(crate) fn new(dir: &'a Path, max_bytes: u64) -> Cache<'a> {
        Cache { dir, max_bytes }
    }

    fn path(&self, key: &Key) -> PathBuf {
        self.dir.join(format!("{}{SUFFIX}", hex(key)))
    }

    /// Creates the directory if needed and checks it is ours alone (one `stat` when it
    /// exists).
    fn usable(&self) -> bool {
        let mut found = fs::metadata(self.dir);
        if found
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        {
            if let Err(e) = fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(self.dir)
            {
                tracing::warn!(target: "offload::compile", dir = %self.dir.display(), error = %e, "compile cache directory cannot be created: cache off");
                return false;
            }
            found = fs::metadata(self.dir);
        }
        match found {
            Ok(m)
                if m.is_dir()
                    && m.uid() == rustix::process::geteuid().as_raw()
                    && m.mode() & 0o022 == 0 =>
            {
                true
            }
            Ok(m) => {
                tracing::warn!(
                    target: "offload::compile",
                    dir = %self.dir.display(),
                    owner = m.uid(),
                    mode = format_args!("{:o}", m.mode() & 0o7777),
                    "compile cache directory is not private to this user: cache off"
                );
                false
            }
            Err(_) => false,
        }
    }

    /// The entry of `key`, if it is there and whole; a corrupt one is deleted.
    pub(crate) fn get(&self, key: &Key) -> Option<Arc<[u8]>> {
        if !self.usable() {
            return None;
        }
        let path = self.path(key);
        let mut bytes = Vec::new();
        let mut file = File::open(&path).ok()?;
        file.read_to_end(&mut bytes).ok()?;
        match decode(&bytes) {
            Some(payload) => {
                DISK_HITS.fetch_add(1, Ordering::Relaxed);
                // Least recently used goes first: a hit is a use. The owner sets the
                // time through the descriptor it read with (`futimens`).
                let _ = file.set_modified(SystemTime::now());
                Some(Arc::from(payload))
            }
            None => {
                CORRUPT.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(target: "offload::compile", entry = %path.display(), bytes = bytes.len(), "corrupt compile cache entry: deleted, compiling again");
                // Best effort: a corrupt entry left behind is found corrupt again and recompiled.
                let _ = fs::remove_file(&path);
                None
            }
        }
    }

    /// Stores `payload` under `key` (atomically), then trims the cache to its bound.
    pub(crate) fn put(&self, key: &Key, payload: &[u8]) {
        if !self.usable() {
            return;
        }
        let temp = self.dir.join(format!(
            "{TEMP_PREFIX}{}-{}-{}",
            hex(key),
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let written = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
            .and_then(|mut f| {
                f.write_all(&encode(payload))?;
                f.sync_data()
            })
            .and_then(|()| fs::rename(&temp, self.path(key)));
        match written {
            Ok(()) => {
                DISK_WRITES.fetch_add(1, Ordering::Relaxed);
                self.trim(key);
            }
            Err(e) => {
                // Best effort: the write's own error is what is reported; a stale temp is swept later.
                let _ = fs::remove_file(&temp);
                tracing::debug!(target: "offload::compile", error = %e, "compile cache entry not written");
            }
        }
    }

    /// Removes the least recently used entries beyond the bound (never `keep`), and stale
    /// temporary files.
    fn trim(&self, keep: &Key) {
        let Ok(dir) = fs::read_dir(self.dir) else {
            return;
        };
        let keep = self.path(keep);
        let now = SystemTime::now();
        let mut entries: Vec<(SystemTime, u64, PathBuf)> = Vec::new();
        let mut total = 0u64;
        for item in dir.flatten() {
            let name = item.file_name();
            let name = name.to_string_lossy();
            let Ok(meta) = item.metadata() else { continue };
            let modified = meta.modified().unwrap_or(now);
            if name.starts_with(TEMP_PREFIX) {
                if now
                    .duration_since(modified)
                    .is_ok_and(|age| age > STALE_TEMP)
                {
                    // Best effort: another process may have swept it first.
                    let _ = fs::remove_file(item.path());
                }
            } else if name.ends_with(SUFFIX) {
                total += meta.len();
                entries.push((modified, meta.len(), item.path()));
            }
        }
        if total <= self.max_bytes {
            return;
        }
        entries.sort();
        for (_, len, path) in entries {
            if total <= self.max_bytes {
                break;
            }
            if path == keep {
                continue;
            }
            if fs::remove_file(&path).is_ok() {
                total -= len;
                EVICTED.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

fn encode(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&Sha256::digest(payload));
    out.extend_from_slice(payload);
    out
}

/// The payload of a whole, unaltered entry.
fn decode(bytes: &[u8]) -> Option<&[u8]> {
    let header = bytes.get(..HEADER)?;
    let payload = &bytes[HEADER..];
    let version = u32::from_le_bytes(header[8..12].try_into().ok()?);
    let len = u64::from_le_bytes(header[12..20].try_into().ok()?);
    let ok = &header[..8] == MAGIC
        && version == VERSION
        && len == payload.len() as u64
        && Sha256::digest(payload).as_slice() == &header[20..52];
    ok.then_some(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_round_trips_and_any_damage_is_refused() {
        let entry = encode(b"compiled bytes");
        assert_eq!(decode(&entry), Some(&b"compiled bytes"[..]));
        for cut in 0..entry.len() {
            assert_eq!(decode(&entry[..cut]), None, "truncated at {cut}");
        }
        for at in 0..entry.len() {
            let mut flipped = entry.clone();
            flipped[at] ^= 0x10;
            assert_eq!(decode(&flipped), None, "bit flipped at {at}");
        }
        let mut longer = entry.clone();
        longer.push(0);
        assert_eq!(decode(&longer), None);
    }
}
