//! What the budget decides, as values: reservations, starts, refusals and
//! what it learned from a response; and a host as seen from outside.

use std::time::Duration;

use serde::{Serialize, Serializer};

use super::Distress;
use crate::Outcome;

/// What [`HostBudget::admit`] decided for a new request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reservation {
    /// The rate slot is now: call [`HostBudget::try_start`].
    Go,
    /// A rate slot is reserved this far ahead, in arrival order: sleep, then
    /// call [`HostBudget::try_start`].
    Wait(Duration),
    /// Not held: answer the client at once.
    Refuse(Refusal),
}

/// What [`HostBudget::try_start`] decided for a request whose slot has come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Send it; an in-flight slot is taken until `on_response` or `finish`.
    Go,
    /// The host was paused meanwhile: a new slot after the pause is reserved
    /// this far ahead; sleep, then call `try_start` again.
    Wait(Duration),
    /// The concurrency limit is reached: wait until `finish`/`on_response`
    /// of another request (or the end of the hold), then call again.
    WaitConcurrency,
    /// Not held any longer: answer the client at once.
    Refuse(Refusal),
}

/// Why a request is answered by the proxy instead of being held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The host is paused for longer than the request may be held.
    Paused {
        /// Remaining pause.
        retry_after: Duration,
    },
    /// The breaker is open for longer than the request may be held.
    BreakerOpen {
        /// Remaining time until the breaker closes.
        retry_after: Duration,
    },
    /// The rate queue is full, or the reserved slot would be later than the
    /// hold allows.
    QueueFull {
        /// When the refused slot would have come.
        retry_after: Duration,
    },
    /// Nothing is waiting, but the host's pace alone (a long Crawl-delay,
    /// a rate learned from 429s) puts its next turn beyond the hold.
    Paced {
        /// When the next turn comes.
        retry_after: Duration,
    },
    /// The host is paused (or its breaker open) after repeated distress:
    /// answered at once, however long the hold, since a struggling site's
    /// clients are better told now than after another timeout.
    Distressed {
        /// Remaining pause.
        retry_after: Duration,
        /// The event that paused it.
        event: Distress,
        /// The pause is the breaker's.
        breaker: bool,
    },
}

impl Refusal {
    /// The Retry-After header's whole seconds, at least 1. The budget keeps
    /// a pause's end in whole milliseconds, rounded up, so one millisecond is
    /// taken off before rounding up: a request within a millisecond of a
    /// 60 s pause's start is told 60, not 61.
    pub fn retry_after_secs(&self) -> u64 {
        let d = self.retry_after().saturating_sub(Duration::from_millis(1));
        (d.as_secs_f64().ceil() as u64).max(1)
    }

    /// The Retry-After the client should get.
    pub fn retry_after(&self) -> Duration {
        match *self {
            Refusal::Paused { retry_after }
            | Refusal::BreakerOpen { retry_after }
            | Refusal::QueueFull { retry_after }
            | Refusal::Paced { retry_after }
            | Refusal::Distressed { retry_after, .. } => retry_after,
        }
    }

    /// The audit outcome and `Mannerly-Decision` of this refusal.
    pub fn outcome(&self) -> Outcome {
        match self {
            Refusal::Paused { .. } => Outcome::Paused,
            Refusal::BreakerOpen { .. } => Outcome::BreakerOpen,
            Refusal::QueueFull { .. } => Outcome::QueueFull,
            Refusal::Paced { .. } => Outcome::Paced,
            Refusal::Distressed { .. } => Outcome::Distressed,
        }
    }

    /// The status the client gets: 429 for a paused host, 503 for a full
    /// queue, a turn beyond the hold or a host in distress.
    pub fn status(&self) -> u16 {
        match self {
            Refusal::Paused { .. } | Refusal::BreakerOpen { .. } => 429,
            Refusal::QueueFull { .. } | Refusal::Paced { .. } | Refusal::Distressed { .. } => 503,
        }
    }
}

/// What the budget learned from a response.
#[derive(Clone, Debug, PartialEq)]
pub enum Reaction {
    /// A success (anything but 429 and 5xx): the rate recovered a step.
    Ok {
        /// Rate now, requests/s.
        rate: f64,
        /// Ceiling now, requests/s.
        ceiling: f64,
    },
    /// A 5xx that is not a throttle: the rate was lowered mildly.
    SlowedDown {
        /// Rate now, requests/s.
        rate: f64,
        /// Ceiling now (unchanged), requests/s.
        ceiling: f64,
    },
    /// A 429, or a 503 with Retry-After: the host is paused and slowed.
    Throttled(Throttle),
    /// A distress event: the rate was cut, and the host paused when the
    /// event was one too many.
    Distressed(Strain),
}

impl Reaction {
    /// Rate after the reaction, requests/s (audit `rate`).
    pub fn rate(&self) -> f64 {
        match self {
            Reaction::Ok { rate, .. } | Reaction::SlowedDown { rate, .. } => *rate,
            Reaction::Throttled(t) => t.rate,
            Reaction::Distressed(s) => s.rate,
        }
    }

    /// Ceiling after the reaction, requests/s (audit `ceiling`).
    pub fn ceiling(&self) -> f64 {
        match self {
            Reaction::Ok { ceiling, .. } | Reaction::SlowedDown { ceiling, .. } => *ceiling,
            Reaction::Throttled(t) => t.ceiling,
            Reaction::Distressed(s) => s.ceiling,
        }
    }
}

/// The details of a distress event, for the audit line.
#[derive(Clone, Debug, PartialEq)]
pub struct Strain {
    /// What the site showed.
    pub event: Distress,
    /// The host's pause from `now`, when it is paused (this event paused
    /// it, or it was already paused: an answer to a request sent before).
    pub pause: Option<Duration>,
    /// This event opened the breaker.
    pub breaker_opened: bool,
    /// Rate now, requests/s.
    pub rate: f64,
    /// Ceiling now, requests/s.
    pub ceiling: f64,
}

/// The details of a throttle, for the retry decision and the audit line.
#[derive(Clone, Debug, PartialEq)]
pub struct Throttle {
    /// How long the host is now paused for, from `now` (audit `pause_s`).
    /// With an open breaker this is the breaker's remaining time.
    pub pause: Duration,
    /// The Retry-After that was used, if it was usable.
    pub retry_after: Option<Duration>,
    /// The Retry-After header as received (first 64 bytes), for audit `retry_after`.
    pub retry_after_raw: Option<String>,
    /// The rate that drew the throttle, requests/s.
    pub rate_before: f64,
    /// Rate now, requests/s.
    pub rate: f64,
    /// Ceiling now, requests/s.
    pub ceiling: f64,
    /// Concurrency limit now.
    pub concurrency: u32,
    /// This throttle opened the breaker.
    pub breaker_opened: bool,
}

/// A host's budget as seen from outside: audit lines and the `/hosts` API.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HostView {
    /// Current rate, requests/s (after ceiling and Crawl-delay caps).
    pub rate: f64,
    /// Current learned ceiling, requests/s (`max_rate` when nothing is learned).
    pub ceiling: f64,
    /// Current concurrency limit.
    pub concurrency: u32,
    /// Requests in flight.
    pub in_flight: u32,
    /// Requests holding a future rate slot, estimated from the reserved time
    /// ahead at the current rate (exact while the rate is steady).
    pub queued: u32,
    /// Remaining pause (any cause, breaker included), in seconds when serialised.
    #[serde(serialize_with = "opt_secs")]
    pub paused_for: Option<Duration>,
    /// Remaining time the breaker stays open, in seconds when serialised.
    #[serde(serialize_with = "opt_secs")]
    pub breaker_open_for: Option<Duration>,
    /// The Crawl-delay in force, in seconds when serialised.
    #[serde(serialize_with = "opt_secs")]
    pub crawl_delay: Option<Duration>,
    /// The rate cap taken from a limit the origin announced
    /// (`RateLimit-Policy`, `X-RateLimit-*`), requests/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub announced_rate: Option<f64>,
    /// Throttles inside the breaker window.
    pub recent_throttles: u32,
    /// Throttles of the last hour the budget holds: the last one and the
    /// earlier ones of its ring, those that opened a breaker included (so
    /// at most `breaker_threshold`). Restored with the host after a restart.
    pub throttles_last_hour: u32,
    /// Time until a lowered ceiling is back at `max_rate` (`None` when it
    /// is not lowered). `/hosts` shows it as `ceiling_relaxes_in_s`.
    #[serde(skip)]
    pub ceiling_relaxes_in: Option<Duration>,
    /// The event behind a pause in force for distress.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distress: Option<Distress>,
    /// The latest distress event, paused or not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_distress: Option<Distress>,
    /// Distress events inside the distress window.
    pub recent_distress: u32,
    /// The host's baseline time to first byte, ms (slow to rise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_baseline_ms: Option<u32>,
    /// The host's fast average time to first byte, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u32>,
    /// Time until the next rate slot (the end of a pause included): zero
    /// when a request may go now. `/hosts` shows it as `next_turn_in_s`.
    #[serde(skip)]
    pub next_slot_in: Duration,
    /// Rate slots free now: what is left of the burst, 0 while the next
    /// slot is ahead.
    #[serde(skip)]
    pub free_slots: u32,
}

impl HostView {
    /// Why a request that ran out of hold while waiting in the host's line
    /// is answered by the proxy: the open breaker or the pause if there is
    /// one (with its remaining time), else a full queue.
    pub fn hold_refusal(&self) -> Refusal {
        if let (Some(event), Some(d)) = (self.distress, self.paused_for) {
            return Refusal::Distressed {
                retry_after: d,
                event,
                breaker: self.breaker_open_for.is_some(),
            };
        }
        match (self.breaker_open_for, self.paused_for) {
            (Some(d), _) => Refusal::BreakerOpen { retry_after: d },
            (None, Some(d)) => Refusal::Paused { retry_after: d },
            (None, None) => Refusal::QueueFull {
                retry_after: QUEUE_RETRY_AFTER,
            },
        }
    }
}

/// Retry-After for a full queue: the line moves at the host's rate, so a
/// second is a fair first guess.
pub const QUEUE_RETRY_AFTER: Duration = Duration::from_secs(1);

fn opt_secs<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_some(&d.as_secs_f64()),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_secs_rounds_up_past_the_stored_millisecond() {
        let paused = |ms| Refusal::Paused {
            retry_after: Duration::from_millis(ms),
        };
        assert_eq!(paused(60_001).retry_after_secs(), 60);
        assert_eq!(paused(60_000).retry_after_secs(), 60);
        assert_eq!(paused(60_002).retry_after_secs(), 61);
        assert_eq!(paused(59_500).retry_after_secs(), 60);
        assert_eq!(paused(200).retry_after_secs(), 1);
        assert_eq!(paused(0).retry_after_secs(), 1);
    }
}
