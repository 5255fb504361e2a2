//! A request's turn in its group's line: in arrival order, one request at
//! a time asks for its slot, then waits for the slot, a pause's end or a
//! free concurrency slot, whichever the budget says.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use mannerly_policy::budget::{Refusal, Reservation, Start, QUEUE_RETRY_AFTER};
use mannerly_state::hosts::Basis;
use tokio::sync::futures::Notified;
use tokio::time::Instant;

use super::{Backend, Budgets, Line, Loan, Permit};

impl Budgets {
    pub(super) async fn acquire_group(
        self: &Arc<Self>,
        mut key: String,
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
        'admit: loop {
            // A pause that ends early takes the slots reserved behind it:
            // the waiter asks again rather than sleep to the old end.
            let changed = line.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let resets = line.resets_heard.load(Ordering::SeqCst);
            let now = self.clock.now();
            let (reservation, admitted_on, reserved) = self
                .admit(&key, now, deadline.saturating_duration_since(now), loan)
                .await;
            match reservation {
                Reservation::Refuse(r) => return Err(r),
                Reservation::Wait(d) => tokio::select! {
                    _ = tokio::time::sleep(d) => {}
                    _ = &mut changed => {
                        self.count_reset(&line, resets);
                        continue 'admit;
                    }
                },
                Reservation::Go => {}
            }
            let max_hold = params.max_hold();
            let started = self
                .start(
                    &mut key,
                    &line,
                    deadline,
                    (admitted_on, reserved),
                    max_hold,
                    changed.as_mut(),
                    resets,
                )
                .await;
            match started {
                Some(done) => return done,
                None => continue 'admit,
            }
        }
    }

    /// The start of an admitted request: waits for its slot, or for a free
    /// concurrency slot, until it may go. `None`: a pause changed while it
    /// waited, and the request asks for its slot again.
    #[allow(clippy::too_many_arguments)]
    async fn start(
        self: &Arc<Self>,
        key: &mut String,
        line: &Line,
        deadline: Instant,
        (admitted_on, mut reserved): (Option<Basis>, Instant),
        max_hold: Duration,
        mut changed: Pin<&mut Notified<'_>>,
        resets: u64,
    ) -> Option<Result<Permit, Refusal>> {
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
            let next = (line.waiting.load(Ordering::SeqCst) > 0).then_some(max_hold);
            let (answer, lease, started_on) = self
                .try_start_since(key, now, hold_left, reserved, next)
                .await;
            match answer {
                Start::Go => {
                    let basis = Basis::of_request(admitted_on, started_on);
                    return Some(Ok(Permit {
                        host: std::mem::take(key),
                        budgets: self.clone(),
                        open: true,
                        lease,
                        state: basis.map(Basis::as_str),
                        since: self.clock.now(),
                    }));
                }
                Start::Refuse(r) => return Some(Err(r)),
                Start::Wait(d) => {
                    reserved = now;
                    tokio::select! {
                        _ = tokio::time::sleep(d) => {}
                        _ = &mut changed => {
                            self.count_reset(line, resets);
                            return None;
                        }
                    }
                }
                Start::WaitConcurrency => {
                    let recheck = match self.backend {
                        Backend::Memory(_) => deadline,
                        Backend::Redis(_) => (now + self.shared_recheck()).min(deadline),
                    };
                    tokio::select! {
                        _ = &mut freed => {
                            if line.heard.load(Ordering::SeqCst) != heard {
                                self.woken_by_message.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        _ = &mut changed => {
                            self.count_reset(line, resets);
                            return None;
                        }
                        _ = tokio::time::sleep_until(recheck), if recheck < deadline => {}
                        _ = tokio::time::sleep_until(deadline) => {
                            return Some(Err(self.held_too_long(key)));
                        }
                    }
                }
            }
        }
    }
}
