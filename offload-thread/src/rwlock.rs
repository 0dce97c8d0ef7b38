//! [`RawRwLock`]: a reader-writer lock without guard objects, for [`crate::biased`]'s slow
//! path, whose guards must stay two words (a lock reference and a tag) so that taking and
//! returning them never goes through memory on the owner's fast path. std's `RwLock` hands
//! out guards that cannot be rebuilt once stored elsewhere.
//!
//! One atomic word holds the state (a writer bit and a reader count): taking and releasing
//! the lock uncontended is one read-modify-write each, like std's. Waiters sleep on a
//! `Mutex`/`Condvar` pair and are counted, so a release wakes nobody when nobody waits.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};

const WRITER: u32 = 1 << 31;

/// A reader-writer lock whose holders release it by calling `unlock_*` themselves.
#[derive(Debug, Default)]
pub(crate) struct RawRwLock {
    /// `WRITER`, or the number of readers.
    state: AtomicU32,
    /// Threads asleep (or about to sleep) on `wake`.
    waiters: AtomicU32,
    sleep: Mutex<()>,
    wake: Condvar,
}

impl RawRwLock {
    /// Takes the lock shared.
    pub(crate) fn read(&self) {
        if !self.try_read() {
            self.wait(Self::try_read);
        }
    }

    /// Takes the lock exclusively.
    pub(crate) fn write(&self) {
        if !self.try_write() {
            self.wait(Self::try_write);
        }
    }

    /// Releases a shared hold taken by `read`.
    pub(crate) fn unlock_read(&self) {
        self.state.fetch_sub(1, Ordering::SeqCst);
        self.wake_waiters();
    }

    /// Releases the exclusive hold taken by `write`.
    pub(crate) fn unlock_write(&self) {
        self.state.swap(0, Ordering::SeqCst);
        self.wake_waiters();
    }

    fn try_read(&self) -> bool {
        let s = self.state.load(Ordering::SeqCst);
        // A full reader count (2^31 - 1 holders) waits like a writer would.
        s & WRITER == 0
            && s + 1 < WRITER
            && self
                .state
                .compare_exchange(s, s + 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
    }

    fn try_write(&self) -> bool {
        self.state
            .compare_exchange(0, WRITER, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// Spins briefly, then sleeps until `take` succeeds.
    #[cold]
    fn wait(&self, take: fn(&Self) -> bool) {
        for _ in 0..64 {
            std::hint::spin_loop();
            if take(self) {
                return;
            }
        }
        let mut asleep = self.sleep.lock().unwrap_or_else(PoisonError::into_inner);
        // Counted before the last try, all `SeqCst`: a release either sees the count (and
        // notifies under `sleep`, after this thread waits) or happened before the try,
        // which then succeeds.
        self.waiters.fetch_add(1, Ordering::SeqCst);
        while !take(self) {
            asleep = self
                .wake
                .wait(asleep)
                .unwrap_or_else(PoisonError::into_inner);
        }
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }

    fn wake_waiters(&self) {
        if self.waiters.load(Ordering::SeqCst) != 0 {
            drop(self.sleep.lock().unwrap_or_else(PoisonError::into_inner));
            self.wake.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU64;

    /// Writers exclude everyone and readers exclude writers, with sleepers woken: a count
    /// bumped non-atomically by writers loses nothing, readers never see a writer inside,
    /// and the run ends (a lost wake-up would hang it). Fails with a `try_write` that ignores
    /// readers (seeded).
    #[test]
    fn writers_exclude_and_sleepers_wake() {
        let lock = Arc::new(RawRwLock::default());
        let count = Arc::new(AtomicU64::new(0));
        let inside = Arc::new(AtomicU32::new(0));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (lock, count, inside) = (lock.clone(), count.clone(), inside.clone());
                std::thread::spawn(move || {
                    for i in 0..5000 {
                        if (t + i) % 3 == 0 {
                            lock.read();
                            for _ in 0..50 {
                                assert_eq!(inside.load(Ordering::SeqCst), 0);
                            }
                            lock.unlock_read();
                        } else {
                            lock.write();
                            assert_eq!(inside.swap(1, Ordering::SeqCst), 0);
                            let c = count.load(Ordering::Relaxed);
                            for _ in 0..50 {
                                std::hint::spin_loop();
                            }
                            count.store(c + 1, Ordering::Relaxed);
                            inside.store(0, Ordering::SeqCst);
                            lock.unlock_write();
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let writes = (0..4u64)
            .map(|t| (0..5000u64).filter(|i| (t + i) % 3 != 0).count() as u64)
            .sum::<u64>();
        assert_eq!(count.load(Ordering::SeqCst), writes);
    }
}
