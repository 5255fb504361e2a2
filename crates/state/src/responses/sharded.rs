//! A map in shards that grow one at a time.
//!
//! Growing a `HashMap` rehashes every key at once, and the store's index
//! holds one entry per stored page, keyed by URL-length strings, under the
//! mutex every request's lookup takes: one map growing past 460k entries
//! took 115 ms here, and every request waited for it. In 64 shards each
//! growth moves a 64th of the keys, and the next one comes with a later
//! write, so readers get the lock in between.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, RandomState};

const SHARDS: usize = 64;

#[derive(Debug)]
pub(crate) struct Sharded<K, V> {
    shards: Vec<HashMap<K, V>>,
    hasher: RandomState,
    len: usize,
}

impl<K, V> Default for Sharded<K, V> {
    fn default() -> Self {
        Sharded {
            shards: (0..SHARDS).map(|_| HashMap::new()).collect(),
            hasher: RandomState::new(),
            len: 0,
        }
    }
}

impl<K: Hash + Eq, V> Sharded<K, V> {
    fn shard<Q: Hash + ?Sized>(&self, key: &Q) -> usize {
        // The low bits pick the shard; each shard's own hasher is seeded
        // apart, so keys of one shard still spread over its table.
        (self.hasher.hash_one(key) % SHARDS as u64) as usize
    }

    pub(crate) fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.shards[self.shard(key)].get(key)
    }

    pub(crate) fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let i = self.shard(key);
        self.shards[i].get_mut(key)
    }

    /// Inserts or replaces; returns the value replaced.
    pub(crate) fn insert(&mut self, key: K, value: V) -> Option<V> {
        let i = self.shard(&key);
        let old = self.shards[i].insert(key, value);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    pub(crate) fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let i = self.shard(key);
        let old = self.shards[i].remove(key);
        if old.is_some() {
            self.len -= 1;
        }
        old
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &K> {
        self.shards.iter().flat_map(HashMap::keys)
    }
}

#[cfg(test)]
mod tests {
    use super::Sharded;

    #[test]
    fn behaves_as_one_map() {
        let mut m = Sharded::default();
        for i in 0..1000 {
            assert_eq!(m.insert(format!("k{i}"), i), None);
        }
        assert_eq!(m.insert("k7".into(), 70), Some(7));
        assert_eq!(m.len(), 1000);
        assert_eq!(m.get("k7"), Some(&70));
        assert_eq!(m.remove("k7"), Some(70));
        assert_eq!(m.remove("k7"), None);
        assert_eq!(m.get("k7"), None);
        *m.get_mut("k8").unwrap() += 1;
        assert_eq!(m.get("k8"), Some(&9));
        assert_eq!(m.len(), 999);
        assert_eq!(m.keys().count(), 999);
        let occupied = m.shards.iter().filter(|s| !s.is_empty()).count();
        assert!(occupied > 32, "keys spread over the shards: {occupied}");
    }
}
