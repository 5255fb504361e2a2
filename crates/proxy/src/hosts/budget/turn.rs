//! A request's turn in its group's line: in arrival order, one request at
//! a time asks for its slot, then waits for the slot, a pause's end or a
//! free concurrency slot, whichever the budget says.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use mannerly_policy::budget::{Refusal, Reservation, Start, QUEUE_RETRY_AFTER};
use mannerly_state::hosts::Basis;
use mannerly_state::wake::Hearing;
use tokio::time::Instant;

use super::{Backend, Budgets, Loan, Permit};

/// A wait for a slot this long is a pause (or a slow rate) that another
/// proxy's reset may end early: the waiter listens for it.
const HEAR_RESETS_AFTER: Duration = Duration::from_secs(1);

impl Budgets {
    pub(super) async fn acquire_group(
        self: &Arc<Self>,
        key: String,
        deadline: Instant,
        loan: Loan,
    ) -> Result<Permit, Refusal> {
        let line = self.line(&key);
        let params = self.key_params(&key);
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
        self.apply_crawl_delay(&key).await;
        let mut hearing = self.hear_if_shared(&key);
        'admit: loop {
            // A pause that ends early takes the slots reserved behind it:
            // the waiter asks again rather than sleep to the old end.
            let changed = line.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let resets = line.resets_heard.load(Ordering::SeqCst);
            let now = self.clock.now();
            let (reservation, admitted_on, mut reserved) = self
                .admit(&key, now, deadline.saturating_duration_since(now), loan)
                .await;
            match reservation {
                Reservation::Refuse(r) => return Err(r),
                Reservation::Wait(d) => {
                    self.hear_long_wait(&key, d, &mut hearing);
                    tokio::select! {
                        _ = tokio::time::sleep(d) => {}
                        _ = &mut changed => {
                            self.count_reset(&line, resets);
                            continue 'admit;
                        }
                    }
                }
                Reservation::Go => {}
            }
            loop {
                // Registered before asking, so a slot freed between the
                // answer and the wait is not missed.
                let freed = line.freed.notified();
                tokio::pin!(freed);
                freed.as_mut().enable();
                let heard = line.heard.load(Ordering::SeqCst);
                let now = self.clock.now();
                let hold_left = deadline.saturating_duration_since(now);
                // The next request of the line, if one waits, has its slot
                // reserved with this one's start (shared budgets).
                let next = (line.waiting.load(Ordering::SeqCst) > 0).then(|| params.max_hold());
                let (answer, lease, started_on) = self
                    .try_start_since(&key, now, hold_left, reserved, next)
                    .await;
                match answer {
                    Start::Go => {
                        let basis = Basis::of_request(admitted_on, started_on);
                        return Ok(Permit {
                            host: key,
                            budgets: self.clone(),
                            open: true,
                            lease,
                            state: basis.map(Basis::as_str),
                            since: self.clock.now(),
                            _hearing: hearing,
                        });
                    }
                    Start::Refuse(r) => return Err(r),
                    Start::Wait(d) => {
                        reserved = now;
                        tokio::select! {
                            _ = tokio::time::sleep(d) => {}
                            _ = &mut changed => {
                                self.count_reset(&line, resets);
                                continue 'admit;
                            }
                        }
                    }
                    Start::WaitConcurrency => {
                        let recheck = match self.backend {
                            Backend::Memory(_) => deadline,
                            Backend::Redis(_) => (now + self.shared_recheck()).min(deadline),
                        };
                        let limit = recheck.saturating_duration_since(now);
                        if self.hear_for_slot(&key, &mut hearing, limit).await {
                            continue;
                        }
                        tokio::select! {
                            _ = &mut freed => {
                                if line.heard.load(Ordering::SeqCst) != heard {
                                    self.woken_by_message.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            _ = &mut changed => {
                                self.count_reset(&line, resets);
                                continue 'admit;
                            }
                            _ = tokio::time::sleep_until(recheck), if recheck < deadline => {}
                            _ = tokio::time::sleep_until(deadline) => {
                                return Err(self.held_too_long(&key));
                            }
                        }
                    }
                }
            }
        }
    }

    /// A wait this long is a pause another proxy may end early: listen for
    /// its reset.
    fn hear_long_wait(&self, key: &str, wait: Duration, hearing: &mut Option<Hearing>) {
        if wait >= HEAR_RESETS_AFTER && hearing.is_none() {
            *hearing = self.hear(key);
        }
    }

    /// Starts listening for another proxy's release before waiting for a
    /// slot; `true` when it just did, once the subscription holds (or
    /// `limit` passed): a release before that went unheard, so the caller
    /// looks again first.
    async fn hear_for_slot(
        &self,
        key: &str,
        hearing: &mut Option<Hearing>,
        limit: Duration,
    ) -> bool {
        if hearing.is_some() {
            return false;
        }
        let Some(h) = self.hear(key) else {
            return false;
        };
        h.ready(limit).await;
        *hearing = Some(h);
        true
    }
}
