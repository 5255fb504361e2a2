//! Which budget a host's requests take their turn in (`budget.group_by`,
//! `budget.groups`): the group each host was placed in, and the spacing a
//! host's own robots.txt Crawl-delay keeps inside a group it shares.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};
use std::time::Duration;

use mannerly_policy::budget::{host_key, BudgetParams};
use mannerly_policy::site::{Group, GroupKind};
use mannerly_state::hosts::{Bound, Tier};
use mannerly_state::FastMap;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// Hosts remembered with their group, least recently placed dropped first
/// past this (a host not remembered is placed again by its name, and by its
/// address at its next request's guard step).
const PLACED_MAX: usize = 100_000;

/// The grouping rules and where each host went.
pub(super) struct Groups {
    params: RwLock<Arc<BudgetParams>>,
    /// Host key → its group, as its last request was placed, and when
    /// (a `bound` stamp).
    placed: FastMap<String, (Group, AtomicU64)>,
    bound: Bound,
    /// `PLACED_MAX` but in tests.
    placed_max: usize,
    /// Group key → the hosts `placed` holds in it: one group's members
    /// without a walk over every host (`/hosts/{host}`, asked per dispatch).
    held: FastMap<String, Vec<String>>,
    /// Hosts with a Crawl-delay of their own inside a shared group.
    spaced: FastMap<String, Arc<Spacing>>,
    /// Orders `spaced` by when each delay was last set.
    spaced_bound: Bound,
}

/// A group as `/hosts` shows it.
pub(crate) struct Members {
    /// What the group's key names.
    pub(crate) kind: GroupKind,
    /// The hosts placed in it, sorted.
    pub(crate) hosts: Vec<String>,
    /// The longest Crawl-delay a member keeps inside the group.
    pub(crate) crawl_delay: Option<Duration>,
}

/// One host's Crawl-delay inside a shared group: one request of the host
/// asks for the group's turn at a time, the delay after the previous send.
pub(super) struct Spacing {
    /// The host's last send; held while a request of the host waits.
    pub(super) last: Mutex<Option<Instant>>,
    delay_ms: AtomicU64,
    /// When the delay was last set (a `spaced_bound` stamp).
    set: AtomicU64,
}

impl Spacing {
    pub(super) fn delay(&self) -> Duration {
        Duration::from_millis(self.delay_ms.load(Ordering::Relaxed))
    }
}

impl Groups {
    pub(super) fn new(params: BudgetParams) -> Groups {
        Groups {
            params: RwLock::new(Arc::new(params)),
            placed: FastMap::default(),
            bound: Bound::default(),
            placed_max: PLACED_MAX,
            held: FastMap::default(),
            spaced: FastMap::default(),
            spaced_bound: Bound::default(),
        }
    }

    /// The rules, read under the lock rather than from a copy of the
    /// `Arc`: a count taken and given back is two more locked
    /// instructions, on every request.
    fn params(&self) -> RwLockReadGuard<'_, Arc<BudgetParams>> {
        self.params.read().unwrap_or_else(|p| p.into_inner())
    }

    /// New rules: every host is placed again at its next request.
    pub(super) fn set_params(&self, params: BudgetParams) {
        match self.params.write() {
            Ok(mut p) => *p = Arc::new(params),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(params),
        }
        self.forget_placed();
    }

    fn forget_placed(&self) {
        self.placed.clear();
        self.held.clear();
    }

    /// Whether `group` is one host's alone (see `BudgetParams::alone`).
    pub(super) fn alone(&self, group: &Group) -> bool {
        self.params().alone(group)
    }

    /// Whether a host's group can depend on its address.
    pub(super) fn by_address(&self) -> bool {
        self.params().groups_by_address()
    }

    /// Places `host`, which resolved to `addr`, in its group.
    pub(super) fn place(&self, host: &str, addr: Option<IpAddr>) -> Group {
        let key = host_key(host);
        let group = {
            let params = self.params();
            if !params.groups_by_address() {
                // Then a host's group follows from its name and the rules
                // alone, and new rules empty `placed`: a host placed
                // already stays where it is, without reading its name
                // against the public suffix list again (every request is
                // placed).
                if let Some(p) = self.placed.get(key.as_ref()) {
                    p.1.store(self.bound.stamp(), Ordering::Relaxed);
                    return p.0.clone();
                }
            }
            params.group_of(host, addr)
        };
        if let Some(p) = self.placed.get(key.as_ref()).filter(|p| p.0 == group) {
            p.1.store(self.bound.stamp(), Ordering::Relaxed);
            return group;
        }
        let key = key.into_owned();
        let placed = (group.clone(), AtomicU64::new(self.bound.stamp()));
        if let Some((old, _)) = self.placed.insert(key.clone(), placed) {
            self.unhold(&old.key, &key);
        }
        let mut hosts = self.held.entry(group.key.clone()).or_default();
        if let Err(at) = hosts.binary_search(&key) {
            hosts.insert(at, key);
        }
        drop(hosts);
        self.bound.hold_then(
            &self.placed,
            self.placed_max,
            |_, (_, used)| Some((Tier::Idle, used.load(Ordering::Relaxed))),
            |host, (old, _)| self.unhold(&old.key, &host),
        );
        group
    }

    /// Takes `host` out of the members of group `key`, and the group out of
    /// `held` once it has none.
    fn unhold(&self, key: &str, host: &str) {
        if let Some(mut hosts) = self.held.get_mut(key) {
            hosts.retain(|h| h != host);
        }
        self.held.remove_if(key, |_, hosts| hosts.is_empty());
    }

    /// One group's members, as [`Groups::members`] shows each.
    pub(super) fn members_of(&self, key: &str) -> Option<Members> {
        let hosts = self.held.get(key)?.clone();
        let kind = self.placed.get(hosts.first()?)?.0.kind;
        let crawl_delay = hosts
            .iter()
            .filter_map(|h| self.spaced.get(h).map(|s| s.delay()))
            .max();
        Some(Members {
            kind,
            hosts,
            crawl_delay,
        })
    }

    /// The group of `host`: where it was placed, else by its name (not
    /// remembered: only a request's guard step places a host).
    pub(super) fn of(&self, host: &str) -> Group {
        self.with_of(host, Group::clone)
    }

    /// What `f` makes of the group of `host` ([`Groups::of`]), without
    /// copying a placed one.
    pub(super) fn with_of<R>(&self, host: &str, f: impl FnOnce(&Group) -> R) -> R {
        match self.placed.get(host_key(host).as_ref()) {
            Some(p) => f(&p.0),
            None => f(&self.params().group_of(host, None)),
        }
    }

    /// Every group hosts were placed in: its kind, its hosts (sorted) and
    /// the longest Crawl-delay one of them keeps inside it.
    pub(super) fn members(&self) -> HashMap<String, Members> {
        let mut out: HashMap<String, Members> = HashMap::new();
        for e in self.placed.iter() {
            let g = &e.value().0;
            let entry = out.entry(g.key.clone()).or_insert(Members {
                kind: g.kind,
                hosts: Vec::new(),
                crawl_delay: None,
            });
            entry.hosts.push(e.key().clone());
            if let Some(s) = self.spaced.get(e.key()) {
                entry.crawl_delay = entry.crawl_delay.max(Some(s.delay()));
            }
        }
        for m in out.values_mut() {
            m.hosts.sort();
        }
        out
    }

    /// Sets `host`'s own Crawl-delay inside its shared group; `None` (or
    /// zero) lifts it.
    pub(super) fn set_spacing(&self, host: &str, delay: Option<f64>) {
        let ms = delay
            .filter(|d| d.is_finite() && *d > 0.0)
            .map(|d| (d.min(86_400.0) * 1000.0).round() as u64);
        let key = host_key(host);
        match ms {
            None => {
                if self.spaced.contains_key(key.as_ref()) {
                    self.spaced.remove(key.as_ref());
                }
            }
            Some(ms) => {
                let s = self.spaced.entry(key.into_owned()).or_insert_with(|| {
                    Arc::new(Spacing {
                        last: Mutex::new(None),
                        delay_ms: AtomicU64::new(ms),
                        set: AtomicU64::new(0),
                    })
                });
                s.delay_ms.store(ms, Ordering::Relaxed);
                s.set.store(self.spaced_bound.stamp(), Ordering::Relaxed);
                drop(s);
                self.spaced_bound
                    .hold(&self.spaced, self.placed_max, |_, s| {
                        Some((Tier::Idle, s.set.load(Ordering::Relaxed)))
                    });
            }
        }
    }

    /// `host`'s own spacing, when it has a Crawl-delay inside a group.
    pub(super) fn spacing(&self, host: &str) -> Option<Arc<Spacing>> {
        if self.spaced.is_empty() {
            return None;
        }
        self.spaced.get(host_key(host).as_ref()).map(|s| s.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mannerly_policy::site::GroupBy;

    #[test]
    fn past_the_bound_the_least_recently_placed_go_and_leave_their_groups() {
        let mut g = Groups::new(BudgetParams::default());
        g.placed_max = 16;
        for i in 0..16 {
            g.place(&format!("www{i}.example.com"), None);
            g.place(&format!("h{i}.site{i}.test"), None);
        }
        // 32 hosts placed past a bound of 16: down to 14, then the last ones.
        assert!(g.placed.len() <= 16, "{} hosts placed", g.placed.len());
        let members: usize = g.held.iter().map(|h| h.len()).sum();
        assert_eq!(
            members,
            g.placed.len(),
            "held lists exactly the placed hosts"
        );
        assert!(
            g.held.iter().all(|h| !h.is_empty()),
            "no empty group is held"
        );
        // The most recent stay; the first went.
        assert!(g.placed.contains_key("h15.site15.test"));
        assert!(!g.placed.contains_key("www0.example.com"));
        assert_eq!(g.of("www0.example.com").key, "example.com");
    }

    #[test]
    fn a_host_placed_again_is_the_most_recent() {
        let mut g = Groups::new(BudgetParams {
            group_by: GroupBy::Host,
            ..BudgetParams::default()
        });
        g.placed_max = 8;
        for i in 0..8 {
            g.place(&format!("h{i}.test"), None);
        }
        g.place("h0.test", None);
        g.place("new.test", None);
        // 8 + 1 > 8: one goes, the least recently placed (h1, not h0).
        assert!(g.placed.contains_key("h0.test"));
        assert!(!g.placed.contains_key("h1.test"));
        assert!(g.held.get("h1.test").is_none());
    }
}
