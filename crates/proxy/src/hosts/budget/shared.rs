//! The budgets of a cluster's proxies sharing Redis: how the store is made
//! from `[state]`, and what comes from the other proxies on this proxy's
//! own channels of the hosts it waits on (`mannerly_state::wake`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use mannerly_state::hosts::{RedisHosts, RedisSettings};
use mannerly_state::responses::SharedPages;
use mannerly_state::robots::SharedRobots;
use mannerly_state::wake::{Hearing, Wakes};

use super::{Backend, Budgets, SHARED_SLOT_RECHECK, SHARED_SLOT_RECHECK_UNHEARD};
use crate::clock::Clock;
use crate::config::Config;
use crate::error::ConfigError;

impl Budgets {
    /// The budgets of `state.backend = "redis"`, with a subscriber for the
    /// channels its waiters listen on. Must run inside the runtime.
    pub(super) fn shared_from_config(
        cfg: &Config,
        clock: Clock,
    ) -> Result<Arc<Budgets>, ConfigError> {
        let invalid = ConfigError::from;
        let s = &cfg.state;
        let u = &cfg.upstream;
        let mut settings = RedisSettings::new(s.redis_url.clone());
        settings.key_prefix = s.key_prefix.clone();
        settings.instances_hint = s.instances_hint;
        settings.command_timeout = Duration::from_secs_f64(s.command_timeout_ms / 1000.0);
        // A lease outlives the longest a request may wait for its
        // response head, plus a margin for a slow clock or GC.
        settings.lease_ttl =
            u.connect_timeout + u.first_byte_timeout + Duration::from_secs_f64(s.lease_margin_secs);
        settings.budget_ttl = Duration::from_secs_f64(
            cfg.budget.ceiling_relax_secs + cfg.budget.breaker_open_secs + 3600.0,
        );
        let wall = clock.wall();
        let hosts = RedisHosts::new(cfg.budget.clone(), settings, wall).map_err(|e| match e {
            mannerly_state::hosts::RedisHostsError::Params(e) => invalid(e),
            other => ConfigError::Invalid {
                key: "state.redis_url".into(),
                why: other.to_string(),
            },
        })?;
        let hosts = Arc::new(hosts);
        let budgets = Budgets::with(Backend::Redis(hosts.clone()), clock, cfg.budget.clone());
        let weak = Arc::downgrade(&budgets);
        let wakes = Wakes::subscribe(
            &s.redis_url,
            &s.key_prefix,
            Duration::from_secs_f64(s.command_timeout_ms / 1000.0),
            move |host, payload| {
                if let Some(b) = weak.upgrade() {
                    b.heard(host, payload);
                }
            },
        )
        .map_err(|e| ConfigError::Invalid {
            key: "state.redis_url".into(),
            why: e.to_string(),
        })?;
        hosts.listen_with(wakes.waiters());
        let _ = budgets.wakes.set(wakes);
        Ok(budgets)
    }

    /// The cluster's robots.txt copies, when state is shared.
    pub(crate) fn shared_robots(&self) -> Option<SharedRobots> {
        let r = self.shared()?;
        let s = r.settings();
        let robots = SharedRobots::new(r.connection(), &s.key_prefix, s.command_timeout);
        Some(match self.wakes.get() {
            Some(w) => robots.hearing(w.waiters()),
            None => robots,
        })
    }

    /// Waits for another proxy's robots.txt copy woken by its message.
    pub(crate) fn robots_woken_by_message(&self) -> u64 {
        self.wakes.get().map_or(0, |w| w.waiters().woken())
    }

    /// Requests asleep now until another proxy's robots.txt copy comes.
    pub(crate) fn robots_asleep(&self) -> u64 {
        self.wakes.get().map_or(0, |w| w.waiters().asleep())
    }

    /// The cluster's page store (`state.share_pages`), when state is shared.
    pub(crate) fn shared_pages(&self, cfg: &Config) -> Option<SharedPages> {
        let r = self.shared()?;
        let s = r.settings();
        Some(SharedPages::new(
            r.connection(),
            &s.key_prefix,
            s.command_timeout,
            cfg.cache.max_body,
            Duration::from_secs_f64(cfg.state.pages_ttl_secs),
        ))
    }

    /// A message of a host (another proxy's change, told to this proxy as
    /// the next to act on it): refreshes the copy seen last and wakes the
    /// waiters it concerns.
    fn heard(&self, host: &str, payload: &[u8]) {
        let Backend::Redis(r) = &self.backend else {
            return;
        };
        let heard = r.heard(host, payload, self.clock.now_std(), self.clock.wall());
        let Some(l) = self.lines.get(host).map(|l| l.clone()) else {
            return;
        };
        if heard.released {
            l.heard.fetch_add(1, Ordering::SeqCst);
            l.freed.notify_one();
        }
        if heard.reset {
            l.resets_heard.fetch_add(1, Ordering::SeqCst);
            l.changed.notify_waiters();
        }
    }

    /// Listens on this proxy's own channel for `key` while the hearing is
    /// held, where the budget script tells it the changes it acts on next
    /// (shared budgets with a subscriber only).
    pub(super) fn hear(&self, key: &str) -> Option<Hearing> {
        match &self.backend {
            Backend::Redis(r) => r.hear(key),
            Backend::Memory(_) => None,
        }
    }

    /// A hearing of `key` when another proxy shares it lately: the changes
    /// told to this proxy as the next to act keep its copy current.
    pub(super) fn hear_if_shared(&self, key: &str) -> Option<Hearing> {
        let Backend::Redis(r) = &self.backend else {
            return None;
        };
        if r.shared_lately(key, self.clock.now_std()) {
            self.hear(key)
        } else {
            None
        }
    }

    /// Channels this proxy listens on now.
    pub(crate) fn channels_heard(&self) -> usize {
        self.wakes.get().map_or(0, Wakes::channels)
    }

    /// Messages heard from other proxies since the start.
    pub(crate) fn messages_heard(&self) -> u64 {
        self.wakes.get().map_or(0, Wakes::messages)
    }

    /// How long a shared concurrency waiter sleeps before looking again.
    pub(super) fn shared_recheck(&self) -> Duration {
        match self.wakes.get() {
            Some(w) if w.is_live() => SHARED_SLOT_RECHECK,
            _ => SHARED_SLOT_RECHECK_UNHEARD,
        }
    }

    /// Waiters woken by another proxy's release, and whether that channel
    /// is heard now.
    pub(crate) fn woken_by_message(&self) -> (u64, bool) {
        let live = self.wakes.get().is_some_and(Wakes::is_live);
        (self.woken_by_message.load(Ordering::Relaxed), live)
    }

    /// Waiters woken by another proxy's early end of a pause.
    pub(crate) fn woken_by_reset(&self) -> u64 {
        self.woken_by_reset.load(Ordering::Relaxed)
    }
}
