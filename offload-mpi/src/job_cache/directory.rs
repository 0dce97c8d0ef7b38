//! The server's directory of the job's compiles: for each key, its image once a rank
//! compiled it, or the rank compiling it (its lease) with the asks waiting for it. Pure
//! bookkeeping: no locks, no MPI, no clock of its own (the caller passes `now`); every
//! change returns the answers it owes, for the caller to deliver.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use offload_core::CompileKey;

/// Who asked: a rank of the job (its answer goes to `tag`), or a thread of the server's
/// own rank, by ticket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Asker {
    Remote { rank: i32, tag: i32 },
    Local(u64),
}

/// An answer owed to an asker about a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Owed {
    pub(crate) to: Asker,
    pub(crate) key: CompileKey,
    pub(crate) answer: Answer,
}

/// What an asker is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// The image.
    Image(Arc<[u8]>),
    /// Compile it and share the image (the asker holds the lease).
    Compile,
    /// Compile it without the job.
    Local,
}

enum Entry {
    Done(Arc<[u8]>),
    Compiling {
        by: i32,
        since: Instant,
        waiters: Vec<Asker>,
    },
}

/// The directory: key → image, or key → lease and waiters.
#[derive(Default)]
pub(crate) struct Directory {
    entries: HashMap<CompileKey, Entry>,
    bytes: u64,
}

impl Directory {
    /// `asker`, of rank `rank`, asks for `key`: the image when there is one; the lease when
    /// nobody holds it (`Compile`: the asker's rank now compiles it); `None` when another
    /// ask holds it: the asker waits for the answer that `put`, `failed` or `release` owes
    /// it.
    pub(crate) fn ask(
        &mut self,
        key: CompileKey,
        asker: Asker,
        rank: i32,
        now: Instant,
    ) -> Option<Answer> {
        match self.entries.get_mut(&key) {
            Some(Entry::Done(image)) => Some(Answer::Image(image.clone())),
            Some(Entry::Compiling { waiters, .. }) => {
                waiters.push(asker);
                None
            }
            None => {
                self.entries.insert(
                    key,
                    Entry::Compiling {
                        by: rank,
                        since: now,
                        waiters: Vec::new(),
                    },
                );
                Some(Answer::Compile)
            }
        }
    }

    /// The image of `key` arrived: kept (the first one, when a key is put twice), and owed
    /// to every waiter.
    pub(crate) fn put(&mut self, key: CompileKey, image: Arc<[u8]>) -> Vec<Owed> {
        match self.entries.get(&key) {
            Some(Entry::Done(_)) => Vec::new(),
            _ => {
                self.bytes += image.len() as u64;
                let old = self.entries.insert(key, Entry::Done(image.clone()));
                owe(key, waiters_of(old), Answer::Image(image))
            }
        }
    }

    /// The holder of `key`'s lease, of rank `rank`, failed to compile it: the key is free
    /// again and every waiter compiles it itself (each gets the compiler's error with its
    /// whole log). Nothing when `rank` does not hold the lease.
    pub(crate) fn failed(&mut self, key: CompileKey, rank: i32) -> Vec<Owed> {
        match self.entries.get(&key) {
            Some(Entry::Compiling { by, .. }) if *by == rank => {
                owe(key, waiters_of(self.entries.remove(&key)), Answer::Local)
            }
            _ => Vec::new(),
        }
    }

    /// `asker` stopped waiting for `key`.
    pub(crate) fn cancel(&mut self, key: CompileKey, asker: Asker) {
        if let Some(Entry::Compiling { waiters, .. }) = self.entries.get_mut(&key) {
            waiters.retain(|w| *w != asker);
        }
    }

    /// Frees every lease whose holder is `lost(rank, since)` (it died, or holds it too
    /// long): its waiters compile the key themselves.
    pub(crate) fn release(&mut self, mut lost: impl FnMut(i32, Instant) -> bool) -> Vec<Owed> {
        let gone: Vec<CompileKey> = self
            .entries
            .iter()
            .filter_map(|(key, e)| match e {
                Entry::Compiling { by, since, .. } if lost(*by, *since) => Some(*key),
                _ => None,
            })
            .collect();
        gone.into_iter()
            .flat_map(|key| owe(key, waiters_of(self.entries.remove(&key)), Answer::Local))
            .collect()
    }

    /// Closing: every waiter compiles its key itself; the leases stay (their holders may
    /// still put).
    pub(crate) fn close(&mut self) -> Vec<Owed> {
        let mut owed = Vec::new();
        for (key, e) in &mut self.entries {
            if let Entry::Compiling { waiters, .. } = e {
                owed.extend(owe(*key, std::mem::take(waiters), Answer::Local));
            }
        }
        owed
    }

    /// Asks waiting for a compile.
    pub(crate) fn waiting(&self) -> usize {
        self.entries
            .values()
            .map(|e| match e {
                Entry::Compiling { waiters, .. } => waiters.len(),
                Entry::Done(_) => 0,
            })
            .sum()
    }

    /// Images held, and their bytes.
    pub(crate) fn images(&self) -> (usize, u64) {
        let n = self
            .entries
            .values()
            .filter(|e| matches!(e, Entry::Done(_)))
            .count();
        (n, self.bytes)
    }
}

fn waiters_of(entry: Option<Entry>) -> Vec<Asker> {
    match entry {
        Some(Entry::Compiling { waiters, .. }) => waiters,
        _ => Vec::new(),
    }
}

fn owe(key: CompileKey, waiters: Vec<Asker>, answer: Answer) -> Vec<Owed> {
    waiters
        .into_iter()
        .map(|to| Owed {
            to,
            key,
            answer: answer.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> CompileKey {
        CompileKey::from_bytes([n; 32])
    }

    fn pairs(owed: Vec<Owed>) -> Vec<(Asker, Answer)> {
        owed.into_iter().map(|o| (o.to, o.answer)).collect()
    }

    fn remote(rank: i32) -> Asker {
        Asker::Remote {
            rank,
            tag: 16 + rank,
        }
    }

    #[test]
    fn the_first_asker_compiles_the_others_wait_and_get_the_image() {
        let now = Instant::now();
        let mut d = Directory::default();
        assert_eq!(d.ask(key(1), remote(1), 1, now), Some(Answer::Compile));
        assert_eq!(d.ask(key(1), remote(2), 2, now), None);
        assert_eq!(d.ask(key(1), Asker::Local(7), 0, now), None);
        // Another key is another lease.
        assert_eq!(d.ask(key(2), remote(2), 2, now), Some(Answer::Compile));
        assert_eq!(d.waiting(), 2);
        let image: Arc<[u8]> = Arc::from(&b"image"[..]);
        let owed = pairs(d.put(key(1), image.clone()));
        assert_eq!(
            owed,
            vec![
                (remote(2), Answer::Image(image.clone())),
                (Asker::Local(7), Answer::Image(image.clone())),
            ]
        );
        assert_eq!(d.waiting(), 0);
        assert_eq!(
            d.ask(key(1), remote(3), 3, now),
            Some(Answer::Image(image.clone()))
        );
        // A second put of a key keeps the first image.
        assert!(d.put(key(1), Arc::from(&b"other"[..])).is_empty());
        assert_eq!(d.ask(key(1), remote(3), 3, now), Some(Answer::Image(image)));
        assert_eq!(d.images(), (1, 5));
    }

    #[test]
    fn a_failed_or_lost_lease_sends_its_waiters_to_compile_alone_and_frees_the_key() {
        let now = Instant::now();
        let mut d = Directory::default();
        assert_eq!(d.ask(key(1), remote(1), 1, now), Some(Answer::Compile));
        assert_eq!(d.ask(key(1), remote(2), 2, now), None);
        // Only the holder's failure counts.
        assert!(d.failed(key(1), 2).is_empty());
        assert_eq!(pairs(d.failed(key(1), 1)), vec![(remote(2), Answer::Local)]);
        // Free again: the next asker holds the lease.
        assert_eq!(d.ask(key(1), remote(3), 3, now), Some(Answer::Compile));
        assert_eq!(d.ask(key(1), remote(2), 2, now), None);
        assert_eq!(d.ask(key(1), Asker::Local(1), 0, now), None);
        d.cancel(key(1), remote(2));
        assert_eq!(d.waiting(), 1);
        // Rank 3 died.
        assert!(d.release(|by, _| by == 1).is_empty());
        assert_eq!(
            pairs(d.release(|by, _| by == 3)),
            vec![(Asker::Local(1), Answer::Local)]
        );
        assert_eq!(d.ask(key(1), remote(2), 2, now), Some(Answer::Compile));
        // A put after the lease was released is kept all the same.
        assert!(d.put(key(1), Arc::from(&b"late"[..])).is_empty());
        assert_eq!(d.images().0, 1);
    }

    #[test]
    fn closing_sends_every_waiter_to_compile_alone_and_keeps_the_leases() {
        let now = Instant::now();
        let mut d = Directory::default();
        assert_eq!(d.ask(key(1), remote(1), 1, now), Some(Answer::Compile));
        assert_eq!(d.ask(key(1), remote(2), 2, now), None);
        assert_eq!(d.ask(key(2), remote(2), 2, now), Some(Answer::Compile));
        assert_eq!(d.ask(key(2), remote(3), 3, now), None);
        let mut owed = pairs(d.close());
        owed.sort_by_key(|(a, _)| format!("{a:?}"));
        assert_eq!(
            owed,
            vec![(remote(2), Answer::Local), (remote(3), Answer::Local)]
        );
        assert_eq!(d.waiting(), 0);
        assert!(d.put(key(1), Arc::from(&b"x"[..])).is_empty());
    }
}
