//! The index's per-entry maps, on dashmap's shards.
//!
//! Growing a `HashMap` rehashes every key at once, and the store's index
//! holds one entry per stored page, keyed by URL-length strings, under the
//! mutex every request's lookup takes: one map growing past 917k entries
//! took 211 ms here, and every request waited for it. Each of dashmap's
//! shards grows on its own, moving a 64th of the keys, and the next one
//! grows with a later write, so readers get the lock in between. The
//! index's mutex already orders every access; the shards' own locks are
//! never contended.

use std::borrow::Borrow;
use std::hash::Hash;

use dashmap::DashMap;

use crate::FastHash;

const SHARDS: usize = 64;

#[derive(Debug)]
pub(crate) struct Sharded<K: Hash + Eq, V>(DashMap<K, V, FastHash>);

impl<K: Hash + Eq, V> Default for Sharded<K, V> {
    fn default() -> Self {
        Sharded(DashMap::with_hasher_and_shard_amount(
            FastHash::default(),
            SHARDS,
        ))
    }
}

impl<K: Hash + Eq + Clone, V: Copy> Sharded<K, V> {
    pub(crate) fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.get(key).map(|v| *v)
    }

    /// Inserts or replaces; returns the value replaced.
    pub(crate) fn insert(&self, key: K, value: V) -> Option<V> {
        self.0.insert(key, value)
    }

    /// Replaces the value of a key that is there with `f` of it, in one
    /// lookup and without a key of its own to insert; the value replaced,
    /// or `None` if it is not there.
    pub(crate) fn update<Q>(&self, key: &Q, f: impl FnOnce(V) -> V) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.get_mut(key).map(|mut v| {
            let old = *v;
            *v = f(old);
            old
        })
    }

    pub(crate) fn remove<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.remove(key).map(|(_, v)| v)
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// The keys for which `keep` holds.
    pub(crate) fn keys_where(&self, keep: impl Fn(&K) -> bool) -> Vec<K> {
        self.0
            .iter()
            .filter(|e| keep(e.key()))
            .map(|e| e.key().clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Sharded;

    #[test]
    fn behaves_as_one_map() {
        let m = Sharded::default();
        for i in 0..1000 {
            assert_eq!(m.insert(format!("k{i}"), i), None);
        }
        assert_eq!(m.insert("k7".into(), 70), Some(7));
        assert_eq!(m.update("k8", |v| v * 10), Some(8));
        assert_eq!(m.update("k1000", |_| 1), None);
        assert_eq!(m.get("k8"), Some(80));
        assert_eq!(m.get("k1000"), None);
        assert_eq!(m.len(), 1000);
        assert_eq!(m.get("k7"), Some(70));
        assert_eq!(m.remove("k7"), Some(70));
        assert_eq!(m.remove("k7"), None);
        assert_eq!(m.get("k7"), None);
        assert_eq!(m.len(), 999);
        assert_eq!(m.keys_where(|k| k.starts_with("k1")).len(), 111);
    }
}
