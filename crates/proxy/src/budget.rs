//! Waiting for a host's budget: the tokio half of `mannerly_policy::budget`.
//! The store decides (slot, pause, concurrency, refusal); this module only
//! sleeps until the decided time or until another request to the same host
//! frees a concurrency slot. No polling: one timer or one notification per
//! wait.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use dashmap::DashMap;
use mannerly_policy::budget::{
    host_key, PersistedHost, Reaction, Refusal, Reservation, Start, QUEUE_RETRY_AFTER,
};
use mannerly_state::hosts::HostStore;
use mannerly_state::responses::{ResponseStore, StoreError};
use tokio::sync::{Mutex, Notify};
use tokio::time::Instant;

use crate::clock::Clock;

/// The budgets of all hosts and the wake-ups of their waiters.
pub(crate) struct Budgets {
    store: Arc<dyn HostStore>,
    clock: Clock,
    lines: DashMap<String, Arc<Line>>,
    seed: AtomicU64,
}

/// The requests waiting for one host.
struct Line {
    /// Held by the request whose slot is being reserved or waited for.
    turn: Mutex<()>,
    /// Signalled when a response frees a concurrency slot.
    freed: Notify,
    /// Requests waiting for `turn`, for the queue bound.
    waiting: AtomicUsize,
}

/// An in-flight slot of a host. Released by [`Permit::respond`], or on drop
/// when no response came (error, timeout, client gone).
pub(crate) struct Permit {
    host: String,
    budgets: Arc<Budgets>,
    open: bool,
}

impl Budgets {
    pub(crate) fn new(store: Arc<dyn HostStore>, clock: Clock) -> Arc<Budgets> {
        Arc::new(Budgets {
            store,
            clock,
            lines: DashMap::new(),
            seed: AtomicU64::new(0x9e37_79b9_7f4a_7c15),
        })
    }

    pub(crate) fn store(&self) -> &dyn HostStore {
        self.store.as_ref()
    }

    /// The longest a new request to `host` may be held.
    pub(crate) fn max_hold(&self, host: &str) -> Duration {
        self.store.params(&host_key(host)).max_hold()
    }

    /// Waits for `host`'s turn: a rate slot in arrival order, the end of a
    /// pause, a free concurrency slot. Gives up at `deadline` with the
    /// budget's refusal.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        host: &str,
        deadline: Instant,
    ) -> Result<Permit, Refusal> {
        let key = host_key(host).into_owned();
        let line = self.line(&key);
        let params = self.store.params(&key);
        // One request at a time asks for its slot, in arrival order (tokio's
        // mutex is fair): a slot is only reserved when it is next, so a rate
        // that changed while others waited applies at once.
        if line.waiting.fetch_add(1, Ordering::SeqCst) >= params.queue_limit as usize {
            line.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(Refusal::QueueFull {
                retry_after: QUEUE_RETRY_AFTER,
            });
        }
        let turn = tokio::time::timeout_at(deadline, line.turn.lock()).await;
        line.waiting.fetch_sub(1, Ordering::SeqCst);
        let Ok(_turn) = turn else {
            return Err(self.held_too_long(&key));
        };
        let now = self.clock.now();
        let mut reserved = now;
        match self.store.admit(
            &key,
            now.into_std(),
            deadline.saturating_duration_since(now),
        ) {
            Reservation::Refuse(r) => return Err(r),
            Reservation::Wait(d) => tokio::time::sleep(d).await,
            Reservation::Go => {}
        }
        loop {
            // Registered before asking, so a slot freed between the answer
            // and the wait is not missed.
            let freed = line.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            let now = self.clock.now();
            let hold_left = deadline.saturating_duration_since(now);
            let answer =
                self.store
                    .try_start_since(&key, now.into_std(), hold_left, reserved.into_std());
            match answer {
                Start::Go => {
                    return Ok(Permit {
                        host: key,
                        budgets: self.clone(),
                        open: true,
                    })
                }
                Start::Refuse(r) => return Err(r),
                Start::Wait(d) => {
                    reserved = now;
                    tokio::time::sleep(d).await
                }
                Start::WaitConcurrency => {
                    tokio::select! {
                        _ = &mut freed => {}
                        _ = tokio::time::sleep_until(deadline) => {
                            return Err(self.held_too_long(&key));
                        }
                    }
                }
            }
        }
    }

    /// The refusal for a request whose hold ran out in the line: the host's
    /// pause if it has one, else a full queue.
    fn held_too_long(&self, key: &str) -> Refusal {
        self.store.view(key, self.clock.now_std()).map_or(
            Refusal::QueueFull {
                retry_after: QUEUE_RETRY_AFTER,
            },
            |v| v.hold_refusal(),
        )
    }

    /// Makes sure a robots.txt Crawl-delay caps the host's rate.
    pub(crate) fn set_crawl_delay(&self, host: &str, delay: Option<f64>) {
        self.store
            .set_crawl_delay(&host_key(host), self.clock.now_std(), delay);
    }

    fn line(&self, key: &str) -> Arc<Line> {
        if let Some(l) = self.lines.get(key) {
            return l.clone();
        }
        self.lines
            .entry(key.to_string())
            .or_insert_with(|| {
                Arc::new(Line {
                    turn: Mutex::new(()),
                    freed: Notify::new(),
                    waiting: AtomicUsize::new(0),
                })
            })
            .clone()
    }

    fn wake(&self, key: &str) {
        if let Some(l) = self.lines.get(key) {
            l.freed.notify_one();
        }
    }

    /// A number in [0, 1) for backoff jitter; quality does not matter, only
    /// that proxies and hosts do not retry in lockstep.
    fn jitter(&self) -> f64 {
        let mut x = self
            .seed
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
        x ^= self
            .clock
            .wall()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.subsec_nanos() as u64)
            .unwrap_or(0);
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        (x >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Writes what must survive a restart (pauses, open breakers, lowered
    /// ceilings) to `store`, and forgets the records of hosts that no longer
    /// have any. Blocking: call it off the async threads.
    pub(crate) fn save(&self, store: &dyn ResponseStore) -> Result<usize, StoreError> {
        let now = self.clock.now_std();
        let saved = self.store.persisted(now, self.clock.wall());
        let before = store.host_records()?;
        for (host, record) in &saved {
            let bytes = serde_json::to_vec(record)?;
            let unchanged = before.iter().any(|(h, b)| h == host && *b == bytes);
            if !unchanged {
                store.put_host_record(host, &bytes)?;
            }
        }
        for (host, _) in before {
            if !saved.iter().any(|(h, _)| *h == host) {
                store.remove_host_record(&host)?;
            }
        }
        Ok(saved.len())
    }

    /// Loads what [`Budgets::save`] wrote in an earlier process. A record
    /// that cannot be read is skipped (and overwritten at the next save).
    pub(crate) fn load(&self, store: &dyn ResponseStore) -> Result<usize, StoreError> {
        let records = store.host_records()?;
        let saved: Vec<(String, PersistedHost)> = records
            .into_iter()
            .filter_map(|(host, bytes)| match serde_json::from_slice(&bytes) {
                Ok(r) => Some((host, r)),
                Err(e) => {
                    tracing::warn!("saved budget of {host} unreadable, ignored: {e}");
                    None
                }
            })
            .collect();
        let n = saved.len();
        self.store
            .restore(saved, self.clock.now_std(), self.clock.wall());
        Ok(n)
    }

    /// Forgets hosts with nothing to remember, and their wakers.
    pub(crate) fn sweep(&self) -> usize {
        let dropped = self.store.sweep(self.clock.now_std());
        self.lines.retain(|_, l| Arc::strong_count(l) > 1);
        dropped
    }
}

impl Permit {
    /// Releases the slot with what the origin answered; returns what the
    /// budget learned.
    pub(crate) fn respond(mut self, status: u16, retry_after: Option<&str>) -> Reaction {
        self.open = false;
        let b = &self.budgets;
        let reaction = b.store.on_response(
            &self.host,
            b.clock.now_std(),
            b.clock.wall(),
            status,
            retry_after,
            b.jitter(),
        );
        b.wake(&self.host);
        reaction
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.open {
            self.budgets
                .store
                .finish(&self.host, self.budgets.clock.now_std());
            self.budgets.wake(&self.host);
        }
    }
}

#[cfg(test)]
mod tests;
