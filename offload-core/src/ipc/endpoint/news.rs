//! Cache news: what peers' answers and deaths mean to the generation's sender-side cache
//! and its quarantine (I2, I3), addressed by `PeerRef`. A round learns them under the
//! endpoint's state lock and applies them after releasing it; code that may run while a
//! send holds the cache stashes them instead, for whoever next finds the cache free (the
//! lock order is in `mod.rs`).

use super::*;

impl Engine {
    pub(super) fn at(&self, peer: PeerId) -> PeerRef {
        PeerRef {
            endpoint: self.id,
            peer,
        }
    }

    /// Keeps cache news for later (the caller may hold the cache).
    pub(super) fn stash(&self, news: Vec<CacheNews>) {
        if !news.is_empty() {
            lock(&self.stashed).extend(news);
        }
    }

    /// Applies stashed news (the cache must not be held), closing dead peers' mappings.
    pub(super) fn apply_stashed(&self) {
        let news = std::mem::take(&mut *lock(&self.stashed));
        self.finish_dead(news);
    }

    /// Applies what peers answered to the cache, then to the quarantine (which may free
    /// memory: not under the cache's lock).
    pub(super) fn apply(&self, news: Vec<CacheNews>) {
        if news.is_empty() {
            return;
        }
        {
            let mut cache = lock(&self.shared.cache);
            for n in &news {
                match *n {
                    CacheNews::Mapped(peer, entry, generation, mapping) => {
                        cache.mapped(self.at(peer), entry, generation, mapping)
                    }
                    CacheNews::Answered(peer, entry, generation, done) => {
                        cache.answered(self.at(peer), entry, generation, done)
                    }
                    CacheNews::Gone(peer) => cache.forget_peer(self.at(peer)),
                    CacheNews::Acked(..) => {}
                }
            }
        }
        let quarantine = &self.shared.quarantine;
        for n in news {
            match n {
                CacheNews::Acked(peer, entry, generation) => {
                    quarantine.acked(&self.generation, self.at(peer), entry, generation)
                }
                CacheNews::Gone(peer) => quarantine.gone(&self.generation, self.at(peer)),
                CacheNews::Mapped(..) | CacheNews::Answered(..) => {}
            }
        }
    }
}
