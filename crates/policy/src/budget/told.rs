//! What the budget tells a client, so that a crawler's scheduler can plan
//! around it instead of filling its slots with held requests: the
//! RateLimit fields (draft-ietf-httpapi-ratelimit-headers-11) for the
//! group's budget as it stands, the next turn and why, and how long the
//! client prefers to be held (`Prefer: wait=N`, RFC 7240).

use std::time::Duration;

use serde::Serialize;

use super::HostView;

/// The names the RateLimit fields go by. The draft has renamed them
/// before (`RateLimit-Limit`/`-Remaining`/`-Reset` until -06); a rename
/// is one new constant here and [`FIELD_NAMES`] pointed at it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldNames {
    /// The quota policy field (`q`, `w`).
    pub policy: &'static str,
    /// The current service limit field (`r`, `t`).
    pub limit: &'static str,
}

/// draft-ietf-httpapi-ratelimit-headers-09 to -11.
pub const DRAFT_11: FieldNames = FieldNames {
    policy: "ratelimit-policy",
    limit: "ratelimit",
};

/// The names written on every answer.
pub const FIELD_NAMES: FieldNames = DRAFT_11;

/// The name of our quota policy in both fields: a list member of its
/// own, beside any the origin sent.
pub const POLICY_NAME: &str = "host";

/// The budget's figures as the RateLimit fields carry them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Told {
    /// Requests per window (`q`).
    pub quota: u64,
    /// The window, whole seconds (`w`).
    pub window_s: u64,
    /// Requests that would go now without a wait (`r`).
    pub remaining: u64,
    /// Seconds until the next turn (`t`): 0 when one is free now, the
    /// remaining pause while paused.
    pub reset_s: u64,
}

impl Told {
    /// The fields for `view`: the quota and window are the current pace
    /// written as whole numbers never faster than it (2.5/s is 2 per
    /// second, 0.3/s is 1 per 4 s); the remaining and reset are the next
    /// turn's.
    pub fn of(view: &HostView) -> Told {
        let micro = (view.rate * 1_000_000.0).round().max(1.0) as u64;
        let (quota, window_s) = if micro >= 1_000_000 {
            (micro / 1_000_000, 1)
        } else {
            (1, 1_000_000u64.div_ceil(micro))
        };
        let turn = view.next_turn();
        let remaining = match turn.why {
            TurnWhy::Now => u64::from(
                view.free_slots
                    .min(view.concurrency.saturating_sub(view.in_flight)),
            ),
            _ => 0,
        };
        Told {
            quota,
            window_s,
            remaining,
            reset_s: whole_secs(turn.in_),
        }
    }

    /// The `RateLimit-Policy` member: `"host";q=2;w=1`.
    pub fn policy_item(&self) -> String {
        item(["q=", ";w="], [self.quota, self.window_s])
    }

    /// The `RateLimit` member: `"host";r=1;t=0`.
    pub fn limit_item(&self) -> String {
        item(["r=", ";t="], [self.remaining, self.reset_s])
    }
}

/// `"host";` and the two parameters: by hand rather than `format!`, as
/// every answer carries both fields.
fn item(names: [&str; 2], values: [u64; 2]) -> String {
    let mut out = String::with_capacity(32);
    out.push('"');
    out.push_str(POLICY_NAME);
    out.push_str("\";");
    let mut digits = itoa::Buffer::new();
    for (name, value) in names.into_iter().zip(values) {
        out.push_str(name);
        out.push_str(digits.format(value));
    }
    out
}

/// Whole seconds, rounded up, as Retry-After counts them (a turn 200 ms
/// away is 1, not 0: 0 would say "now").
pub fn whole_secs(d: Duration) -> u64 {
    let ms = d.as_millis();
    u64::try_from(ms.div_ceil(1000)).unwrap_or(u64::MAX)
}

/// Why the next turn is when it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnWhy {
    /// A request may go now.
    Now,
    /// The pace (rate, Crawl-delay, announced limit) puts the next slot ahead.
    Paced,
    /// The origin asked to slow down (429, 503 with Retry-After).
    Paused,
    /// Too many throttles: the breaker leaves the host alone.
    BreakerOpen,
    /// The site shows distress and is left alone meanwhile.
    Distressed,
    /// A slot is free but every concurrency slot is taken: the turn comes
    /// when a request in flight ends, which no clock says.
    Busy,
}

impl TurnWhy {
    /// As `/hosts` and the decision header write it.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnWhy::Now => "now",
            TurnWhy::Paced => "paced",
            TurnWhy::Paused => "paused",
            TurnWhy::BreakerOpen => "breaker_open",
            TurnWhy::Distressed => "distressed",
            TurnWhy::Busy => "busy",
        }
    }
}

/// When the host's next turn is, from the view's `now`, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NextTurn {
    /// How far ahead (zero: now, or unknown for `Busy`).
    pub in_: Duration,
    /// Why then.
    pub why: TurnWhy,
}

impl HostView {
    /// The next turn a new request would get, and why: the pause's
    /// cause first, then the pace, then the concurrency limit.
    pub fn next_turn(&self) -> NextTurn {
        let why = match (self.paused_for, self.breaker_open_for, self.distress) {
            (Some(_), _, Some(_)) => TurnWhy::Distressed,
            (Some(_), Some(_), None) => TurnWhy::BreakerOpen,
            (Some(_), None, None) => TurnWhy::Paused,
            (None, ..) if !self.next_slot_in.is_zero() => TurnWhy::Paced,
            (None, ..) if self.in_flight >= self.concurrency => TurnWhy::Busy,
            (None, ..) => TurnWhy::Now,
        };
        // A pause's end is told as the pause's own Retry-After is, to the
        // millisecond the view has it.
        let in_ = match (why, self.paused_for) {
            (TurnWhy::Now | TurnWhy::Busy, _) => Duration::ZERO,
            (_, Some(pause)) => pause,
            (_, None) => self.next_slot_in,
        };
        NextTurn { in_, why }
    }
}

/// The `wait` preference of a request's `Prefer` fields (RFC 7240 §4.3),
/// seconds: the first one given, case-insensitive, its value a number
/// (quoted or not). `None` when there is none, or it is not a number.
pub fn prefer_wait<'a>(fields: impl IntoIterator<Item = &'a [u8]>) -> Option<u64> {
    for field in fields {
        let text = std::str::from_utf8(field).ok()?;
        for pref in text.split(',') {
            // Parameters after `;` belong to the preference, not its value.
            let head = pref.split(';').next().unwrap_or("");
            let Some((name, value)) = head.split_once('=') else {
                continue;
            };
            if name.trim().eq_ignore_ascii_case("wait") {
                let value = value.trim().trim_matches('"');
                return value.parse().ok();
            }
        }
    }
    None
}
