//! Which entries to evict first: an in-memory recency index over entry keys.

use std::collections::{BTreeMap, HashSet};

use super::sharded::Sharded;
use crate::FastHash;

/// Recency and size of every entry. Reads only touch this index; the ticks
/// reach the disk later, many in one commit, so a read never costs a disk
/// write of its own.
#[derive(Debug, Default)]
pub(crate) struct Lru {
    clock: u64,
    entries: Sharded<String, Slot>,
    order: BTreeMap<u64, String>,
    total: u64,
    /// Keys read since their tick was last persisted: exactly those whose
    /// slot is marked `dirty`, so a read of a key already here is told by
    /// its slot, without a lookup in this set.
    dirty: HashSet<String, FastHash>,
    /// Reads are not collected for persisting (an index of what is in
    /// memory only).
    untracked: bool,
}

/// One entry's recency and size, and whether its tick waits in `dirty`.
#[derive(Debug, Clone, Copy)]
struct Slot {
    tick: u64,
    size: u64,
    dirty: bool,
}

impl Lru {
    /// Rebuilds the index from persisted `(key, tick, size)` rows.
    pub(crate) fn from_rows(rows: impl IntoIterator<Item = (String, u64, u64)>) -> Self {
        let mut lru = Lru::default();
        for (key, tick, size) in rows {
            lru.clock = lru.clock.max(tick);
            lru.insert_at(key, tick, size);
        }
        lru
    }

    /// An index whose reads are never persisted.
    pub(crate) fn untracked() -> Self {
        Lru {
            untracked: true,
            ..Lru::default()
        }
    }

    pub(crate) fn keys(&self) -> Vec<String> {
        self.entries.keys_where(|_| true)
    }

    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// When `key` was last written or read.
    pub(crate) fn tick_of(&self, key: &str) -> Option<u64> {
        self.entries.get(key).map(|s| s.tick)
    }

    pub(crate) fn size_of(&self, key: &str) -> Option<u64> {
        self.entries.get(key).map(|s| s.size)
    }

    fn next_tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Records a read of `key`. Every revalidation reads (the resident
    /// copy and the store's index), so the key moves without being copied,
    /// is looked up once, and is copied into `dirty` only when its slot is
    /// not marked yet.
    pub(crate) fn touch(&mut self, key: &str) {
        let tick = self.next_tick();
        let track = !self.untracked;
        let Some(old) = self.entries.update(key, |s| Slot {
            tick,
            dirty: s.dirty || track,
            ..s
        }) else {
            return;
        };
        let owned = self
            .order
            .remove(&old.tick)
            .unwrap_or_else(|| key.to_owned());
        self.order.insert(tick, owned);
        if track && !old.dirty {
            self.dirty.insert(key.to_owned());
        }
    }

    /// Records a write of `key`; returns the tick to persist with it.
    pub(crate) fn insert(&mut self, key: &str, size: u64) -> u64 {
        let tick = self.next_tick();
        self.insert_at(key.to_owned(), tick, size);
        self.dirty.remove(key);
        tick
    }

    fn insert_at(&mut self, key: String, tick: u64, size: u64) {
        self.remove(&key);
        self.order.insert(tick, key.clone());
        self.total += size;
        self.entries.insert(
            key,
            Slot {
                tick,
                size,
                dirty: false,
            },
        );
    }

    pub(crate) fn remove(&mut self, key: &str) -> Option<u64> {
        let Slot { tick, size, .. } = self.entries.remove(key)?;
        self.order.remove(&tick);
        self.total -= size;
        self.dirty.remove(key);
        Some(size)
    }

    /// Least recently used keys, other than `keep`, whose removal brings the
    /// total to at most `cap` once `incoming` bytes replace `keep`'s entry.
    pub(crate) fn victims(&self, keep: &str, incoming: u64, cap: u64) -> Vec<String> {
        let mut total = self.total - self.size_of(keep).unwrap_or(0) + incoming;
        let mut out = Vec::new();
        for key in self.order.values() {
            if total <= cap {
                break;
            }
            if key == keep {
                continue;
            }
            total -= self.size_of(key).unwrap_or(0);
            out.push(key.clone());
        }
        out
    }

    pub(crate) fn dirty_len(&self) -> usize {
        self.dirty.len()
    }

    /// Reads not yet persisted, to persist: `(key, tick, size)`.
    pub(crate) fn take_dirty(&mut self) -> Vec<(String, u64, u64)> {
        let dirty = std::mem::take(&mut self.dirty);
        dirty
            .into_iter()
            .filter_map(|key| {
                let s = self.entries.update(&key, |s| Slot { dirty: false, ..s })?;
                Some((key, s.tick, s.size))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_recently_read_goes_first() {
        let mut lru = Lru::default();
        lru.insert("a", 10);
        lru.insert("b", 10);
        lru.insert("c", 10);
        lru.touch("a");
        assert_eq!(lru.victims("d", 10, 30), vec!["b".to_string()]);
        assert_eq!(
            lru.victims("d", 20, 30),
            vec!["b".to_string(), "c".to_string()]
        );
        // Replacing an entry frees its own size first.
        assert!(lru.victims("a", 10, 30).is_empty());
        assert_eq!(lru.total(), 30);
        lru.remove("b");
        assert_eq!((lru.total(), lru.len()), (20, 2));
    }

    #[test]
    fn a_read_is_taken_for_persisting_once_and_again_after_it_was_taken() {
        let mut lru = Lru::default();
        lru.insert("a", 10);
        lru.insert("b", 10);
        assert_eq!(lru.dirty_len(), 0);
        lru.touch("a");
        lru.touch("a");
        lru.touch("missing");
        let tick = lru.tick_of("a").unwrap();
        assert_eq!(lru.take_dirty(), vec![("a".to_string(), tick, 10)]);
        assert_eq!(lru.dirty_len(), 0);
        lru.touch("a");
        assert_eq!(lru.dirty_len(), 1);
        // A write persists its own tick: the read waiting is dropped.
        lru.insert("a", 20);
        assert!(lru.take_dirty().is_empty());
        lru.touch("b");
        lru.remove("b");
        assert!(lru.take_dirty().is_empty());

        let mut quiet = Lru::untracked();
        quiet.insert("a", 10);
        quiet.touch("a");
        assert_eq!(quiet.dirty_len(), 0);
        assert!(quiet.tick_of("a").unwrap() > 1);
    }
}
