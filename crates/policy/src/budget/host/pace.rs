//! The pace the origin saw: what a host's sends looked like from the other
//! end, and so the rate that drew a 429.
//!
//! Every request the origin received was a send here (robots.txt, its
//! redirects, retries, every client and, with a shared store, every proxy
//! of the cluster), so the pace is read from the sends, not from the
//! nominal rate: the rate runs ahead of the sends while it climbs (a slot
//! is spaced at the rate in force when it was reserved), and a burst runs
//! ahead of the rate.
//!
//! Two reads of it:
//!
//! - **short**: the sends of the last second before the 429, at least the
//!   last gap and at most the last two. Two gaps inside a second are what
//!   a sliding "N in a window" limit first refuses; one gap is what a
//!   limit with no burst (nginx `limit_req` without `burst`) refuses.
//! - **long**: every send since the window began (the host's first send,
//!   or the first after its last 429, restarted every `LONG_WINDOW_MS`).
//!
//! A send on the first slot's loan (`HostBudget::admit_within`) reads as
//! half a second after the send it borrowed from: the two are what the
//! origin received in that second.
//!
//! The short read is the rate that drew the 429 unless the origin had
//! already accepted that pace since the window began: then what it limits
//! is a volume over a longer time (a token bucket with a burst, nginx
//! `burst=5`), the short pace says nothing of its rate, and the long read
//! is what it let through.

use super::super::params::HostParams;
use super::{get, put, HostBudget, GAP_NONE, LOAN_SENT, MAX_SEND_GAP_MS, NONE, ON_LOAN};
/// The short read looks this far back.
const SHORT_WINDOW_MS: u64 = 1_000;
/// The long read's window starts afresh after this long.
const LONG_WINDOW_MS: u64 = 60_000;
/// The accepted pace is kept in hundredths of a request per second.
const CENTI: u64 = 10_000;
/// A pace within this share of one already accepted counts as accepted
/// (the sends' own jitter).
const ACCEPTED_SHARE: u64 = 95;

// === impl HostBudget (pace) ===

impl HostBudget {
    /// Records a send at `n`.
    pub(super) fn note_send(&mut self, n: u64) {
        self.log
            .push(get(self.sent).map(|last| n.saturating_sub(last)));
        if let Some(last) = get(self.sent) {
            // Long idle gaps are capped so one quiet spell does not read as
            // a crawl of one request a day.
            let mut gap = n.saturating_sub(last).clamp(1, MAX_SEND_GAP_MS);
            if self.flags & ON_LOAN != 0 {
                // Two requests together on the first slot's loan are what
                // the origin received in that second: 2/s, not the
                // inverse of a gap of a few milliseconds, which would
                // teach nothing of its limit.
                gap = gap.max(SHORT_WINDOW_MS / 2);
            }
            self.gaps = [gap as u16, self.gaps[0]]; // at most 10 000
        }
        self.sent = put(n);
        self.flags = match self.flags & ON_LOAN {
            0 => self.flags & !LOAN_SENT,
            _ => (self.flags & !ON_LOAN) | LOAN_SENT,
        };
        match get(self.since) {
            Some(since) if n.saturating_sub(since) < LONG_WINDOW_MS => {
                self.sends = self.sends.saturating_add(1);
            }
            _ => {
                self.since = put(n);
                self.sends = 1;
                self.accepted = 0;
            }
        }
    }

    /// The origin accepted a request: the short pace at this point was
    /// one it lets through.
    pub(super) fn note_accepted(&mut self) {
        if let Some(pace) = self.short_pace_u() {
            let centi = u64::from(pace) / CENTI;
            self.accepted = self.accepted.max(centi.min(u64::from(u16::MAX)) as u16);
        }
    }

    /// A 429 ends the window: what comes after it is a new episode.
    pub(super) fn restart_window(&mut self) {
        self.since = NONE;
        self.sends = 0;
        self.accepted = 0;
    }

    /// The rate that drew a throttle, micro-requests/s (module docs): the
    /// nominal rate only when no gap between sends is known.
    pub(super) fn drawn_rate_u(&self, p: &HostParams, n: u64) -> u32 {
        let Some(short) = self.short_pace_u() else {
            return self.rate_u(p, n);
        };
        let accepted = u64::from(self.accepted) * CENTI;
        if accepted * 100 >= u64::from(short) * ACCEPTED_SHARE {
            if let Some(long) = self.long_pace_u() {
                return long.min(short).max(1);
            }
        }
        short.max(1)
    }

    /// Sends of the last second: the last gap, and the one before it when
    /// both fall inside the second.
    fn short_pace_u(&self) -> Option<u32> {
        let [newest, older] = self.gaps;
        if newest == GAP_NONE {
            return None;
        }
        let (count, span) = match u64::from(newest) + u64::from(older) {
            two if older != GAP_NONE && two <= SHORT_WINDOW_MS => (2, two),
            _ => (1, u64::from(newest)),
        };
        Some(pace_u(count, span))
    }

    /// Sends since the window began, when there are three or more.
    fn long_pace_u(&self) -> Option<u32> {
        let (since, sent) = (get(self.since)?, get(self.sent)?);
        let span = sent.checked_sub(since).filter(|&s| s > 0)?;
        (self.sends >= 3).then(|| pace_u(u64::from(self.sends) - 1, span))
    }
}

/// `count` gaps over `span_ms`, in micro-requests per second.
fn pace_u(count: u64, span_ms: u64) -> u32 {
    u32::try_from(count * 1_000_000_000 / span_ms.max(1)).unwrap_or(u32::MAX)
}
