//! This proxy's stand-ins for shared budgets, and when to try Redis again.
//!
//! A stand-in is a local copy of one host, made on first use from the last
//! shared copy seen at 1/`instances_hint` of its rate. It decides while
//! Redis is out of reach (degraded: every host, until a probe gets an
//! answer) or for one operation that lost every compare-and-set round
//! (contended: that host, that once).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use mannerly_policy::budget::{HostBudget, HostParams, HostView};

use super::super::bound::{budget_tier, Bound, Evicted};
use super::settings::RedisSettings;

/// The stand-ins and the degraded mode.
pub(super) struct Fallback {
    /// At most `budget.max_hosts` stand-ins, least recently used dropped
    /// first; never one with a request in flight or a live pause.
    local: DashMap<Box<str>, Local>,
    bound: Bound,
    mode: Mutex<Mode>,
    instances_hint: u32,
    probe_every: Duration,
}

struct Local {
    budget: HostBudget,
    /// The degraded cap as a minimum spacing, kept over any Crawl-delay.
    spacing_ms: u64,
    /// When it last decided (a `Bound` stamp).
    used: u64,
}

#[derive(Default)]
struct Mode {
    degraded: bool,
    /// While degraded: when the next request may try Redis.
    probe_at: Option<Instant>,
}

impl Fallback {
    pub(super) fn new(settings: &RedisSettings) -> Fallback {
        Fallback {
            local: DashMap::new(),
            bound: Bound::default(),
            mode: Mutex::new(Mode::default()),
            instances_hint: settings.instances_hint,
            probe_every: settings.probe_every,
        }
    }

    /// Whether the store is deciding alone right now.
    pub(super) fn is_degraded(&self) -> bool {
        self.mode.lock().map(|m| m.degraded).unwrap_or(true)
    }

    /// Runs `f` on the stand-in of `key`, made on first use from `shared`
    /// (the last shared copy seen, `None`: a new host) at the degraded rate;
    /// a new stand-in may push the least recently used out past `max_hosts`.
    pub(super) fn run<R>(
        &self,
        key: &str,
        p: &HostParams,
        now: Instant,
        max_hosts: usize,
        shared: impl FnOnce() -> Option<HostBudget>,
        f: impl FnOnce(&mut HostBudget, &HostParams) -> R,
    ) -> R {
        let used = self.bound.stamp();
        let r = self.decide(key, p, now, used, shared, f);
        // Stand-ins are decided by the table of their own host; the others'
        // are read as `p` for the bound's ordering, which only needs
        // "idle, learned or busy".
        self.bound.hold(&self.local, max_hosts, |_, l| {
            budget_tier(&l.budget, p, now).map(|t| (t, l.used))
        });
        r
    }

    /// Stand-ins dropped to stay within `budget.max_hosts` since start.
    pub(super) fn evicted(&self) -> Evicted {
        self.bound.evicted()
    }

    fn decide<R>(
        &self,
        key: &str,
        p: &HostParams,
        now: Instant,
        used: u64,
        shared: impl FnOnce() -> Option<HostBudget>,
        f: impl FnOnce(&mut HostBudget, &HostParams) -> R,
    ) -> R {
        let mut entry = self.local.entry(Box::from(key)).or_insert_with(|| {
            let shared = shared().unwrap_or_else(|| HostBudget::new(p, now));
            let (budget, spacing_ms) = shared.degraded(p, now, self.instances_hint);
            Local {
                budget,
                spacing_ms,
                used,
            }
        });
        entry.used = used;
        let spacing = entry.spacing_ms;
        let before = entry.budget.view(p, now).crawl_delay;
        let r = f(&mut entry.budget, p);
        // A Crawl-delay applied meanwhile must not lift the degraded cap.
        let after = entry.budget.view(p, now).crawl_delay;
        if after != before && after.is_none_or(|d| (d.as_millis() as u64) < spacing) {
            entry
                .budget
                .set_crawl_delay(p, now, Some(spacing as f64 / 1000.0));
        }
        r
    }

    /// The stand-in of `key`, if there is one.
    pub(super) fn view(&self, key: &str, p: &HostParams, now: Instant) -> Option<HostView> {
        self.local.get(key).map(|l| l.budget.view(p, now))
    }

    /// After a decision stored in Redis: gives back the stand-in's slot the
    /// operation was releasing (`releasing_local`), and drops a stand-in
    /// that holds no slot, so that the next fallback starts from the newest
    /// shared copy instead of one that may miss a pause learned since.
    pub(super) fn settle(&self, key: &str, p: &HostParams, now: Instant, releasing_local: bool) {
        if releasing_local {
            if let Some(mut l) = self.local.get_mut(key) {
                l.budget.finish(p, now);
            }
        }
        self.local.remove_if(key, |_, l| l.budget.in_flight() == 0);
    }

    /// Drops the stand-ins with nothing to remember; returns how many.
    pub(super) fn sweep(&self, now: Instant, params: impl Fn(&str) -> HostParams) -> usize {
        let before = self.local.len();
        self.local
            .retain(|h, l| !l.budget.forgettable(&params(h), now));
        before.saturating_sub(self.local.len())
    }

    /// Whether this operation may go to Redis.
    pub(super) fn may_try_shared(&self, now: Instant) -> bool {
        let Ok(mut m) = self.mode.lock() else {
            return false;
        };
        if !m.degraded {
            return true;
        }
        // One request at a time probes; the others stay local meanwhile.
        match m.probe_at {
            Some(at) if now < at => false,
            _ => {
                m.probe_at = Some(now + self.probe_every);
                true
            }
        }
    }

    /// Redis did not answer (`why`): every host decides alone until a probe
    /// `probe_every` from now.
    pub(super) fn degrade(&self, now: Instant, why: &str) {
        if let Ok(mut m) = self.mode.lock() {
            if !m.degraded {
                tracing::warn!(
                    "redis out of reach ({why}): deciding alone at 1/{} of the shared rates",
                    self.instances_hint
                );
                m.degraded = true;
            }
            m.probe_at = Some(now + self.probe_every);
        }
    }

    /// Redis answered: the stand-ins of a degraded spell are dropped.
    pub(super) fn back_to_shared(&self) {
        let Ok(mut m) = self.mode.lock() else {
            return;
        };
        if m.degraded {
            m.degraded = false;
            m.probe_at = None;
            self.local.clear();
            tracing::info!("redis answers again: budgets are shared again");
        }
    }
}
