//! A request's turn in its group's line: in arrival order, one request at
//! a time asks for its slot, then waits for the slot, a pause's end or a
//! free concurrency slot, whichever the budget says.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use mannerly_policy::budget::{HostParams, Refusal, Reservation, Start, QUEUE_RETRY_AFTER};
use mannerly_state::hosts::{Basis, Lease};
use mannerly_state::wake::Hearing;
use tokio::sync::futures::Notified;
use tokio::time::Instant;

use super::{Backend, Budgets, Line, Loan, Permit};

/// What a wait for a free concurrency slot came to.
enum Freed {
    /// Ask for a slot again.
    Look,
    /// The pause changed: ask for the slot's time again.
    Reset,
    /// The hold ran out.
    HeldTooLong,
}

/// A request asleep until its turn, counted in [`Budgets::asleep`] while
/// this is held.
struct Asleep<'a>(&'a Budgets);

impl Drop for Asleep<'_> {
    fn drop(&mut self) {
        self.0.asleep.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A wait for a slot this long is a pause (or a slow rate) that another
/// proxy's reset may end early: the waiter listens for it.
const HEAR_RESETS_AFTER: Duration = Duration::from_secs(1);

impl Budgets {
    /// Requests asleep now until their turn (a slot, a pause's end, a free
    /// concurrency slot): `mannerly_requests_asleep`, what a test waits on
    /// to know that a request is held.
    pub(crate) fn asleep(&self) -> u64 {
        self.asleep.load(Ordering::SeqCst)
    }

    fn sleeping(&self) -> Asleep<'_> {
        self.asleep.fetch_add(1, Ordering::SeqCst);
        Asleep(self)
    }

    /// Sleeps `d` unless the line's pause changes first (an operator's
    /// reset, here or heard from another proxy): `true` then, counted, and
    /// the request asks again rather than sleep to the old end.
    async fn asleep_for(
        &self,
        d: Duration,
        changed: Pin<&mut Notified<'_>>,
        line: &Line,
        resets: u64,
    ) -> bool {
        let _asleep = self.sleeping();
        tokio::select! {
            _ = tokio::time::sleep(d) => false,
            _ = changed => {
                self.count_reset(line, resets);
                true
            }
        }
    }

    /// [`Budgets::asleep_for`] towards a reserved slot. With the in-process
    /// store an answer that raised the rate meanwhile (a climb) may have
    /// brought the slot forward, so each freed slot reads the wait again.
    /// (A shared budget's waiter sleeps to the slot it was given.)
    async fn asleep_for_slot(
        &self,
        key: &str,
        d: Duration,
        mut changed: Pin<&mut Notified<'_>>,
        line: &Line,
        resets: u64,
    ) -> bool {
        let Backend::Memory(m) = &self.backend else {
            return self.asleep_for(d, changed, line, resets).await;
        };
        let _asleep = self.sleeping();
        let mut until = self.clock.now() + d;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => return false,
                _ = changed.as_mut() => {
                    self.count_reset(line, resets);
                    return true;
                }
                _ = line.freed.notified() => {
                    let now = self.clock.now();
                    if let Some(wait) = m.reserved_wait(key, now.into_std()) {
                        until = until.min(now + wait);
                    }
                }
            }
        }
    }

    /// One request at a time asks for its slot, in arrival order (tokio's
    /// mutex is fair): a slot is only reserved when it is next, so a rate
    /// that changed while others waited applies at once.
    async fn queue_for_turn<'l>(
        &self,
        line: &'l Line,
        key: &str,
        deadline: Instant,
        params: &HostParams,
    ) -> Result<tokio::sync::MutexGuard<'l, ()>, Refusal> {
        if line.waiting.fetch_add(1, Ordering::SeqCst) >= params.queue_limit as usize {
            line.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(Refusal::QueueFull {
                retry_after: QUEUE_RETRY_AFTER,
            });
        }
        let turn = tokio::time::timeout_at(deadline, line.turn.lock()).await;
        line.waiting.fetch_sub(1, Ordering::SeqCst);
        turn.map_err(|_| self.held_too_long(key))
    }

    /// Waits for a free concurrency slot: a release (here, or heard by
    /// message: counted), a reset of the pause, the shared budget's next
    /// look, or the end of the hold. `counts` are the line's releases and
    /// resets heard before the look.
    async fn wait_for_slot(
        &self,
        now: Instant,
        deadline: Instant,
        (freed, changed): (Pin<&mut Notified<'_>>, Pin<&mut Notified<'_>>),
        line: &Line,
        (heard, resets): (u64, u64),
    ) -> Freed {
        let recheck = self.recheck_at(now, deadline);
        let _asleep = self.sleeping();
        tokio::select! {
            _ = freed => {
                if line.heard.load(Ordering::SeqCst) != heard {
                    self.woken_by_message.fetch_add(1, Ordering::Relaxed);
                }
                Freed::Look
            }
            _ = changed => {
                self.count_reset(line, resets);
                Freed::Reset
            }
            _ = tokio::time::sleep_until(recheck), if recheck < deadline => Freed::Look,
            _ = tokio::time::sleep_until(deadline) => Freed::HeldTooLong,
        }
    }

    /// When a wait for a concurrency slot looks again without a wake-up:
    /// the shared budget's next look, never past the hold.
    fn recheck_at(&self, now: Instant, deadline: Instant) -> Instant {
        match self.backend {
            Backend::Memory(_) => deadline,
            Backend::Redis(_) => (now + self.shared_recheck()).min(deadline),
        }
    }

    /// The slot a request was let go with: open until the origin's answer
    /// (or the request's end) releases it.
    fn permit(
        self: &Arc<Self>,
        key: String,
        lease: Option<Lease>,
        basis: Option<Basis>,
        hearing: Option<Hearing>,
    ) -> Permit {
        Permit {
            host: key,
            budgets: self.clone(),
            open: true,
            lease,
            state: basis.map(Basis::as_str),
            since: self.clock.now(),
            _hearing: hearing,
        }
    }

    pub(super) async fn acquire_group(
        self: &Arc<Self>,
        key: String,
        deadline: Instant,
        loan: Loan,
    ) -> Result<Permit, Refusal> {
        let line = self.line(&key);
        let params = self.key_params(&key);
        let _turn = self.queue_for_turn(&line, &key, deadline, &params).await?;
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
                    if self
                        .asleep_for_slot(&key, d, changed.as_mut(), &line, resets)
                        .await
                    {
                        continue 'admit;
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
                        return Ok(self.permit(key, lease, basis, hearing));
                    }
                    Start::Refuse(r) => return Err(r),
                    Start::Wait(d) => {
                        reserved = now;
                        if self.asleep_for(d, changed.as_mut(), &line, resets).await {
                            continue 'admit;
                        }
                    }
                    Start::WaitConcurrency => {
                        if self.hear_for_slot(&key, &mut hearing, now, deadline).await {
                            continue;
                        }
                        let waits = (freed.as_mut(), changed.as_mut());
                        match self
                            .wait_for_slot(now, deadline, waits, &line, (heard, resets))
                            .await
                        {
                            Freed::Look => {}
                            Freed::Reset => continue 'admit,
                            Freed::HeldTooLong => return Err(self.held_too_long(&key)),
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
    /// slot; `true` when it just did, once the subscription holds (or the
    /// next look is due): a release before that went unheard, so the caller
    /// looks again first.
    async fn hear_for_slot(
        &self,
        key: &str,
        hearing: &mut Option<Hearing>,
        now: Instant,
        deadline: Instant,
    ) -> bool {
        if hearing.is_some() {
            return false;
        }
        let Some(h) = self.hear(key) else {
            return false;
        };
        h.ready(
            self.recheck_at(now, deadline)
                .saturating_duration_since(now),
        )
        .await;
        *hearing = Some(h);
        true
    }
}
