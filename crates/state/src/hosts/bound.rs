//! Per-host maps held to a bound (`budget.max_hosts` for the budgets; the
//! proxy's own host-keyed caches too), least recently used first.
//!
//! Every entry carries a stamp from one counter, renewed each time its host
//! is used. When a map passes its bound, one pass drops the least recently
//! used entries that may go until an eighth of the bound is free again, so
//! the scan of the map is paid once per `max/8` new hosts, not on each.
//! No map is cleared whole, or halved: a crawl of ever new hosts would see
//! the memory they hold fall and climb again by that much, and the
//! allocator keep the peaks.
//!
//! What may go, and in which order, is the map's own say (a [`Tier`] per
//! entry): first a host with nothing to remember (a fresh budget is the
//! same), then one whose learned state can be had again or is only a
//! ceiling still relaxing; never one with a request in flight, a slot
//! reserved ahead or a live pause (those end by themselves, within
//! `max_pause_secs`, so they cannot pile up without end either). Each
//! host dropped is counted by its tier ([`Evicted`]).

use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use dashmap::DashMap;
use mannerly_policy::budget::{HostBudget, HostParams};

/// Which entries go first when a map is over its bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    /// Nothing to remember: a fresh entry would be the same.
    Idle,
    /// Something learned that is re-read (Redis) or learned again (a lowered
    /// ceiling or rate, in one process): dropped only once no idle entry is
    /// left to drop.
    Learned,
}

/// Hosts dropped to hold a map to its bound since start, by what they held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Evicted {
    /// Hosts with nothing to remember.
    pub idle: u64,
    /// Hosts that had learned something (a lowered ceiling or rate; with
    /// Redis, a copy that is read again on the host's next step).
    pub learned: u64,
}

impl std::ops::Add for Evicted {
    type Output = Evicted;

    fn add(self, o: Evicted) -> Evicted {
        Evicted {
            idle: self.idle + o.idle,
            learned: self.learned + o.learned,
        }
    }
}

/// The recency counter and eviction tallies of one map.
#[derive(Debug, Default)]
pub struct Bound {
    clock: AtomicU64,
    /// One pass at a time; a thread that finds one running leaves it be.
    busy: AtomicBool,
    /// Past the bound, the size at which the next pass runs: a pass that
    /// found too few entries it may drop waits for another eighth of the
    /// bound, so a map of busy hosts is not scanned on every new one.
    next_at: AtomicUsize,
    idle: AtomicU64,
    learned: AtomicU64,
}

// === impl Bound ===

impl Bound {
    /// A stamp later than every one handed out before.
    pub fn stamp(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Hosts dropped so far.
    pub(crate) fn evicted(&self) -> Evicted {
        Evicted {
            idle: self.idle.load(Ordering::Relaxed),
            learned: self.learned.load(Ordering::Relaxed),
        }
    }

    /// Drops the least recently used entries of `map` that may go, lowest
    /// tier first, once it holds more than `max`, down to `max - max/8`.
    /// `class` gives an entry's tier and stamp, `None` for one that stays.
    /// When too few may go, the next pass waits until `max/8` more entries
    /// came. Call it with no guard of `map` held. Returns how many went.
    pub fn hold<K: Eq + Hash + Clone, V, S: BuildHasher + Clone>(
        &self,
        map: &DashMap<K, V, S>,
        max: usize,
        class: impl Fn(&K, &V) -> Option<(Tier, u64)>,
    ) -> usize {
        self.hold_then(map, max, class, |_, _| {})
    }

    /// [`Bound::hold`], handing each entry dropped to `gone` (to undo what
    /// another map holds about it), with no guard of `map` held.
    pub fn hold_then<K: Eq + Hash + Clone, V, S: BuildHasher + Clone>(
        &self,
        map: &DashMap<K, V, S>,
        max: usize,
        class: impl Fn(&K, &V) -> Option<(Tier, u64)>,
        mut gone_to: impl FnMut(K, V),
    ) -> usize {
        let len = map.len();
        if len <= max.max(self.next_at.load(Ordering::Relaxed))
            || self.busy.swap(true, Ordering::Acquire)
        {
            return 0;
        }
        let need = map.len().saturating_sub(max - max / 8);
        let mut order: Vec<(Tier, u64, K)> = map
            .iter()
            .filter_map(|e| class(e.key(), e.value()).map(|(t, u)| (t, u, e.key().clone())))
            .collect();
        let need = need.min(order.len());
        if need > 0 && need < order.len() {
            order.select_nth_unstable_by_key(need - 1, |(t, u, _)| (*t, *u));
        }
        let mut gone = 0;
        for (tier, used, key) in order.into_iter().take(need) {
            // A host used since the scan (a newer stamp) stays.
            let went = map.remove_if(&key, |k, v| class(k, v).is_some_and(|(_, u)| u == used));
            if let Some((k, v)) = went {
                gone_to(k, v);
                gone += 1;
                let tally = match tier {
                    Tier::Idle => &self.idle,
                    Tier::Learned => &self.learned,
                };
                tally.fetch_add(1, Ordering::Relaxed);
            }
        }
        if gone > 0 {
            // Each removal leaves a tombstone, and a table over half full
            // doubles rather than clean them up in place: without this, every
            // table of a map past its bound ends at twice the buckets its
            // entries need, some time after the bound is first reached.
            map.shrink_to_fit();
        }
        let left = map.len();
        let next_at = if left > max {
            left + (max / 8).max(1)
        } else {
            0
        };
        self.next_at.store(next_at, Ordering::Relaxed);
        self.busy.store(false, Ordering::Release);
        gone
    }
}

/// The tier of a budget kept in one process: idle ones with nothing to
/// remember first, then idle ones that learned something; `None` while
/// it has a request in flight, a slot reserved ahead or a live pause.
pub(crate) fn budget_tier(b: &HostBudget, p: &HostParams, now: Instant) -> Option<Tier> {
    if b.forgettable(p, now) {
        Some(Tier::Idle)
    } else if b.is_idle(now) {
        Some(Tier::Learned)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(n: usize, bound: &Bound) -> DashMap<Box<str>, (Tier, u64)> {
        map_with(n, bound, std::collections::hash_map::RandomState::new())
    }

    fn map_with<S: BuildHasher + Clone>(
        n: usize,
        bound: &Bound,
        hasher: S,
    ) -> DashMap<Box<str>, (Tier, u64), S> {
        let m = DashMap::with_hasher(hasher);
        for i in 0..n {
            m.insert(format!("h{i}").into(), (Tier::Idle, bound.stamp()));
        }
        m
    }

    type Fixed = std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>;

    fn keep<K>(_: &K, v: &(Tier, u64)) -> Option<(Tier, u64)> {
        Some(*v)
    }

    #[test]
    fn at_the_bound_nothing_goes() {
        let b = Bound::default();
        let m = map(4, &b);
        assert_eq!(b.hold(&m, 4, keep), 0);
        assert_eq!(m.len(), 4);
    }

    #[test]
    fn one_past_the_bound_drops_the_least_recently_used() {
        let b = Bound::default();
        let m = map(4, &b);
        // h0 is used again: h1 is now the least recently used.
        m.insert("h0".into(), (Tier::Idle, b.stamp()));
        m.insert("h4".into(), (Tier::Idle, b.stamp()));
        assert_eq!(b.hold(&m, 4, keep), 1);
        assert!(!m.contains_key("h1"));
        assert_eq!(m.len(), 4);
        assert_eq!(
            b.evicted(),
            Evicted {
                idle: 1,
                learned: 0
            }
        );
    }

    #[test]
    fn a_pass_frees_an_eighth_of_the_bound() {
        let b = Bound::default();
        let m = map(17, &b);
        // 17 > 16: down to 14, the three oldest gone.
        assert_eq!(b.hold(&m, 16, keep), 3);
        assert_eq!(m.len(), 14);
        assert!(["h0", "h1", "h2"].iter().all(|h| !m.contains_key(*h)));
        assert!(m.contains_key("h3"));
    }

    #[test]
    fn learned_hosts_go_after_every_idle_one_and_kept_ones_never() {
        let b = Bound::default();
        let m = map(3, &b);
        m.insert("h0".into(), (Tier::Learned, 1));
        fn paused(k: &str, v: &(Tier, u64)) -> Option<(Tier, u64)> {
            (k != "h1").then_some(*v)
        }
        // h1 (oldest idle) is kept; the idle h2 and h3 go before the
        // learned h0, older as it is.
        m.insert("h3".into(), (Tier::Idle, b.stamp()));
        m.insert("h4".into(), (Tier::Idle, b.stamp()));
        assert_eq!(b.hold(&m, 3, |k, v| paused(k, v)), 2);
        let mut left: Vec<_> = m.iter().map(|e| e.key().to_string()).collect();
        left.sort();
        assert_eq!(left, ["h0", "h1", "h4"]);
        // Down to one: the idle h4, then h0; h1 stays.
        assert_eq!(b.hold(&m, 1, |k, v| paused(k, v)), 2);
        let left: Vec<_> = m.iter().map(|e| e.key().to_string()).collect();
        assert_eq!(left, ["h1"]);
        assert_eq!(
            b.evicted(),
            Evicted {
                idle: 3,
                learned: 1
            }
        );
    }

    #[test]
    fn churn_past_the_bound_does_not_double_the_tables() {
        let b = Bound::default();
        let max = 4096;
        // A hash of fixed keys: with one seeded at random the keys' spread
        // over the shards, and so the tables' room, differs run to run.
        let m = map_with(max, &b, Fixed::default());
        let filled = m.capacity();
        // Ten times the bound in new hosts, held to it as they come.
        for i in max..11 * max {
            m.insert(format!("h{i}").into(), (Tier::Idle, b.stamp()));
            b.hold(&m, max, keep);
        }
        assert!(m.len() <= max);
        assert!(
            m.capacity() <= filled,
            "{} buckets' room after the churn, {filled} when first filled",
            m.capacity()
        );
    }

    #[test]
    fn a_map_of_hosts_that_must_stay_is_scanned_again_an_eighth_later() {
        let b = Bound::default();
        let m = map(17, &b);
        let scans = std::cell::Cell::new(0);
        let busy = |_: &_, _: &(Tier, u64)| {
            scans.set(scans.get() + 1);
            None
        };
        assert_eq!(b.hold(&m, 16, busy), 0);
        assert_eq!((m.len(), scans.get()), (17, 17));
        // Not scanned again until past 17 + 16/8 = 19 entries.
        m.insert("h17".into(), (Tier::Idle, b.stamp()));
        m.insert("h18".into(), (Tier::Idle, b.stamp()));
        assert_eq!(b.hold(&m, 16, busy), 0);
        assert_eq!(scans.get(), 17);
        // At 20 a pass runs, and drops what may go by then.
        m.insert("h19".into(), (Tier::Idle, b.stamp()));
        assert_eq!(b.hold(&m, 16, keep), 6);
        assert_eq!(m.len(), 14);
    }
}
