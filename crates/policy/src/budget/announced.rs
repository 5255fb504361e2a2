//! Limits an origin announces before it enforces them.
//!
//! Two families of response headers are read:
//!
//! - the IETF draft (draft-ietf-httpapi-ratelimit-headers), structured
//!   fields: `RateLimit-Policy: "default";q=100;w=60` (a quota of `q` units
//!   per window of `w` seconds) and `RateLimit: "default";r=50;t=30` (`r`
//!   units remain, the quota resets in `t` seconds). Several policies may be
//!   listed; the strictest one counts (lowest `q/w`, lowest `r`). The
//!   pending draft-12 change names `RateLimit`'s parameters `a` (available)
//!   and `w` (wait until the reset) instead of `r` and `t`: both spellings
//!   are read, the draft-11 one first where a server sends both. A policy's
//!   name may be a String (`"default"`) or a Token (`default`), as the
//!   working group is considering; the name is not used either way.
//! - the widespread `X-RateLimit-Limit` / `X-RateLimit-Remaining` /
//!   `X-RateLimit-Reset` (and the unprefixed `RateLimit-Limit` /
//!   `-Remaining` / `-Reset` of the draft's first versions). They name no
//!   window. `Reset` is either delta seconds or a Unix time: a value above
//!   [`EPOCH_THRESHOLD`] (10^9, September 2001 as a Unix time, 31 years as
//!   a delta) is a Unix time in seconds and is turned into a delta with the
//!   caller's wall clock; anything at or below it is delta seconds.
//!
//! The pace an announcement allows ([`Announced::rate`]) is `q/w` when a
//! window is known; without one it is what remains spread over what is left
//! of the window (`remaining / reset`), since a limit with no window says
//! nothing about a rate on its own.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderName};
use serde::Serialize;
use sfv::{BareItem, ListEntry, Parser};

use super::decision::Reaction;
use super::host::{get, put, HostBudget};
use super::params::{micro, HostParams};

/// `X-RateLimit-Reset` values above this are Unix times (seconds), not
/// delta seconds.
pub const EPOCH_THRESHOLD: u64 = 1_000_000_000;

/// The fields read, named once: looked up by `&str`, every response would
/// parse and hash each name again, and the legacy names were formatted.
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `(X-RateLimit-*, RateLimit-*)` for limit, remaining and reset.
const LEGACY: [(HeaderName, HeaderName); 3] = [
    (
        HeaderName::from_static("x-ratelimit-limit"),
        HeaderName::from_static("ratelimit-limit"),
    ),
    (
        HeaderName::from_static("x-ratelimit-remaining"),
        HeaderName::from_static("ratelimit-remaining"),
    ),
    (
        HeaderName::from_static("x-ratelimit-reset"),
        HeaderName::from_static("ratelimit-reset"),
    ),
];

/// Which header family an announcement came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AnnouncedBy {
    /// `RateLimit-Policy` / `RateLimit` (structured fields, IETF draft).
    Ratelimit,
    /// `X-RateLimit-*` (or the draft's early `RateLimit-Limit` etc.).
    XRatelimit,
}

/// A limit announced in a response's headers. Recorded in the audit line
/// (`announced`) as it was read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Announced {
    /// The header family.
    pub by: AnnouncedBy,
    /// Quota units per window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// Window, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_s: Option<u64>,
    /// Units left in the current window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remaining: Option<u64>,
    /// Seconds until the quota resets (a Unix-time `Reset` converted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reset_s: Option<u64>,
}

// === impl Announced ===

impl Announced {
    /// The announcement in `headers`, if any usable one is there. The IETF
    /// fields win over `X-RateLimit-*` when both are sent. `wall` turns a
    /// Unix-time reset into seconds from now.
    pub fn from_headers(headers: &HeaderMap, wall: SystemTime) -> Option<Announced> {
        // Every field read is named `ratelimit…` or `x-ratelimit…`. One
        // pass over the names a response has is cheaper than the eight
        // hashed lookups below, and most responses announce nothing.
        let announces = headers.keys().any(|name| {
            let name = name.as_str();
            name.starts_with("ratelimit") || name.starts_with("x-ratelimit")
        });
        if !announces {
            return None;
        }
        Self::structured(headers).or_else(|| Self::legacy(headers, wall))
    }

    /// Requests per second the announcement allows, if it says.
    ///
    /// Without a window, what remains over the time to the reset; but a
    /// reset within the second (0 or 1 in whole seconds) brings the whole
    /// limit back within it, so the pace is the limit per second. Read as
    /// what remains over one second, a limit of 2 in a 1 s window
    /// (express-rate-limit's `{ windowMs: 1000, limit: 2 }`, which sends
    /// `Remaining: 1` after the window's first request) paced the host at
    /// half its limit. Sending faster than the window allows still only
    /// spends what remains: `Remaining: 0` pauses the host to the reset.
    pub fn rate(&self) -> Option<f64> {
        match (self.limit, self.window_s, self.remaining, self.reset_s) {
            (Some(q), Some(w), _, _) if q > 0 && w > 0 => Some(q as f64 / w as f64),
            (Some(q), None, _, Some(t)) if q > 0 && t <= 1 => Some(q as f64),
            (_, None, Some(r), Some(t)) if r > 0 && t > 0 => Some(r as f64 / t as f64),
            _ => None,
        }
    }

    /// How long to send nothing: until the reset when nothing remains.
    pub fn exhausted_for(&self) -> Option<Duration> {
        match (self.remaining, self.reset_s) {
            (Some(0), Some(t)) if t > 0 => Some(Duration::from_secs(t)),
            _ => None,
        }
    }

    fn structured(headers: &HeaderMap) -> Option<Announced> {
        let policies: Vec<(u64, Option<u64>)> = headers
            .get_all(RATELIMIT_POLICY)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| items(v, &[&["q"], &["w"]]))
            .filter_map(|p| match p {
                [Some(q), w] => Some((q, w.filter(|&w| w > 0))),
                _ => None,
            })
            .collect();
        // Strictest windowed policy: lowest q/w, compared without division.
        // A policy without a window says no rate; it is kept only as the
        // announced limit when no other is there.
        let policy = policies
            .iter()
            .filter_map(|&(q, w)| w.map(|w| (q, w)))
            .min_by(|a, b| {
                (u128::from(a.0) * u128::from(b.1)).cmp(&(u128::from(b.0) * u128::from(a.1)))
            })
            .map(|(q, w)| (q, Some(w)))
            .or_else(|| policies.first().copied());
        let state = headers
            .get_all(RATELIMIT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| items(v, &[&["r", "a"], &["t", "w"]]))
            .filter_map(|p| match p {
                [Some(r), t] => Some((r, t)),
                _ => None,
            })
            .min_by_key(|&(r, _)| r);
        if policy.is_none() && state.is_none() {
            return None;
        }
        Some(Announced {
            by: AnnouncedBy::Ratelimit,
            limit: policy.map(|p| p.0),
            window_s: policy.and_then(|p| p.1),
            remaining: state.map(|s| s.0),
            reset_s: state.and_then(|s| s.1),
        })
    }

    fn legacy(headers: &HeaderMap, wall: SystemTime) -> Option<Announced> {
        let num = |name: &HeaderName| -> Option<u64> {
            let v = headers.get(name)?.to_str().ok()?.trim();
            // Some origins send "100, 100;w=60": the first number counts.
            let first = v.split([',', ';']).next()?.trim();
            first.parse::<u64>().ok()
        };
        let [limit, remaining, reset] = LEGACY.map(|(x, plain)| num(&x).or_else(|| num(&plain)));
        let reset = reset.map(|r| {
            if r > EPOCH_THRESHOLD {
                // A Unix time in whole seconds is rounded up by the servers
                // that send it (express-rate-limit: `Math.ceil`), so the
                // reset is up to a second before it: the whole seconds
                // left from now's fraction on, not from its floor.
                let now = wall
                    .duration_since(UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64());
                (r as f64 - now).floor().max(0.0) as u64
            } else {
                r
            }
        });
        if limit.is_none() && remaining.is_none() {
            return None;
        }
        Some(Announced {
            by: AnnouncedBy::XRatelimit,
            limit,
            window_s: None,
            remaining,
            reset_s: reset,
        })
    }
}

// === impl HostBudget (announced limits) ===

impl HostBudget {
    /// [`HostBudget::on_response`] for a response that may announce a limit
    /// (see [`Announced`]); with `announced_limits` on, the announcement is
    /// learned first:
    ///
    /// - a rate it allows caps the host at `announced_share` × that rate,
    ///   and the host goes at that cap at once (never above `max_rate`, a
    ///   ceiling learned from a 429, or a Crawl-delay): the site has said
    ///   what it accepts, so there is nothing to probe for;
    /// - nothing remaining pauses the host until the reset (clamped to
    ///   `max_pause_secs`). This pause is no throttle: the rate is not
    ///   halved and the breaker does not count it.
    ///
    /// The cap stays until another announcement replaces it.
    #[allow(clippy::too_many_arguments)]
    pub fn on_answer(
        &mut self,
        p: &HostParams,
        now: Instant,
        wall: SystemTime,
        status: u16,
        retry_after: Option<&str>,
        announced: Option<&Announced>,
        jitter: f64,
    ) -> Reaction {
        if let Some(a) = announced.filter(|_| p.announced_limits) {
            self.learn_announced(p, now, a);
        }
        self.on_response(p, now, wall, status, retry_after, jitter)
    }

    fn learn_announced(&mut self, p: &HostParams, now: Instant, a: &Announced) {
        let n = self.tick(now);
        if let Some(rate) = a.rate() {
            let tau = self.tau_ms(p, n);
            let interval = self.interval_ms(p, n);
            let cap = micro(rate * p.announced_share).max(1);
            if cap != self.announced {
                self.announced = cap;
                self.rate = cap;
            }
            // The site said what it takes: nothing goes early on a loan.
            self.flags &= !(super::host::LENT | super::host::ON_LOAN);
            // The next slot was spaced at the old rate: it is re-spaced
            // from the last one given at the new rate, so the request right
            // after the announcement already goes at the announced pace,
            // even behind requests that hold slots (several connections to
            // one host: their queue was spaced at the start rate). Without
            // the last slot known exactly (a budget from an older shared
            // layout), only when no future slot is held: the rate may have
            // moved since the last slot was spaced, so the guess could land
            // before it.
            let last = match get(self.slot) {
                Some(slot) => Some(slot),
                None => get(self.tat)
                    .map(|t| t.saturating_sub(tau + interval))
                    .filter(|&last| last <= n),
            };
            match last {
                Some(last) => {
                    let next = last + self.interval_ms(p, n);
                    self.tat = put(next + self.tau_ms(p, n));
                }
                None => self.keep_next_slot(p, n, tau),
            }
        }
        if let Some(wait) = a.exhausted_for() {
            let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
            let until = self.ms_ceil(now).saturating_add(ms.min(p.max_pause_ms()));
            if get(self.pause).is_none_or(|u| u < until) {
                let tau = self.tau_ms(p, n);
                let next = get(self.tat).map_or(0, |t| t.saturating_sub(tau));
                self.pause = put(until);
                self.tat = put(next.max(until) + tau);
            }
        }
    }
}

/// The integer parameters `keys` of every item of a structured-field list,
/// each key given by its spellings (the first present counts); a list that
/// does not parse gives nothing, a negative or non-integer parameter counts
/// as absent.
fn items<const N: usize>(value: &str, keys: &[&[&str]; N]) -> Vec<[Option<u64>; N]> {
    let Ok(list) = Parser::new(value).parse::<sfv::List>() else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|e| match e {
            ListEntry::Item(i) => Some(&i.params),
            ListEntry::InnerList(_) => None,
        })
        .map(|params| {
            keys.map(|spellings| {
                spellings
                    .iter()
                    .find_map(|k| params.iter().find(|(key, _)| key.as_str() == *k))
                    .and_then(|(_, v)| match v {
                        BareItem::Integer(n) => u64::try_from(i64::from(*n)).ok(),
                        _ => None,
                    })
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn ietf_fields_give_quota_window_remaining_reset() {
        let h = headers(&[
            ("ratelimit-policy", "\"default\";q=100;w=60"),
            ("ratelimit", "\"default\";r=50;t=30"),
        ]);
        let a = Announced::from_headers(&h, UNIX_EPOCH).unwrap();
        assert_eq!(
            a,
            Announced {
                by: AnnouncedBy::Ratelimit,
                limit: Some(100),
                window_s: Some(60),
                remaining: Some(50),
                reset_s: Some(30)
            }
        );
        assert_eq!(a.rate(), Some(100.0 / 60.0));
        assert_eq!(a.exhausted_for(), None);
    }

    #[test]
    fn draft_12_parameter_names_and_token_policy_names_are_read_too() {
        let want = |h: &HeaderMap| {
            let a = Announced::from_headers(h, UNIX_EPOCH).unwrap();
            (a.limit, a.window_s, a.remaining, a.reset_s)
        };
        let draft11 = headers(&[
            ("ratelimit-policy", "\"default\";q=100;w=60"),
            ("ratelimit", "\"default\";r=50;t=30"),
        ]);
        let draft12 = headers(&[
            ("ratelimit-policy", "default;q=100;w=60"),
            ("ratelimit", "default;a=50;w=30"),
        ]);
        assert_eq!(want(&draft11), (Some(100), Some(60), Some(50), Some(30)));
        assert_eq!(want(&draft12), want(&draft11));
        // Both spellings on one item: the draft-11 one counts.
        let both = headers(&[("ratelimit", "burst;r=5;a=9;t=2;w=7")]);
        assert_eq!(want(&both), (None, None, Some(5), Some(2)));
        // Nothing left under the new name pauses as under the old one.
        let empty = headers(&[("ratelimit", "day;a=0;w=12")]);
        let a = Announced::from_headers(&empty, UNIX_EPOCH).unwrap();
        assert_eq!(a.exhausted_for(), Some(Duration::from_secs(12)));
    }

    #[test]
    fn the_strictest_of_several_policies_counts() {
        let h = headers(&[(
            "ratelimit-policy",
            "\"burst\";q=100;w=60, \"day\";q=1000;w=86400",
        )]);
        let a = Announced::from_headers(&h, UNIX_EPOCH).unwrap();
        assert_eq!((a.limit, a.window_s), (Some(1000), Some(86400)));
    }

    #[test]
    fn x_ratelimit_reset_is_delta_up_to_1e9_and_unix_time_above() {
        let wall = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let h = headers(&[
            ("x-ratelimit-limit", "5000"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1700000042"),
        ]);
        let a = Announced::from_headers(&h, wall).unwrap();
        assert_eq!(a.reset_s, Some(42));
        assert_eq!(a.exhausted_for(), Some(Duration::from_secs(42)));
        let h = headers(&[
            ("x-ratelimit-remaining", "120"),
            ("x-ratelimit-reset", "60"),
        ]);
        let a = Announced::from_headers(&h, wall).unwrap();
        assert_eq!((a.reset_s, a.rate()), (Some(60), Some(2.0)));
    }

    #[test]
    fn a_reset_within_the_second_is_the_limit_per_second() {
        // express-rate-limit, 2 per 1000 ms: after the window's first
        // request 1 remains, and the reset (a Unix time rounded up) is
        // within the next second or two of whole seconds.
        let wall = UNIX_EPOCH + Duration::from_millis(1_700_000_000_300);
        let h = headers(&[
            ("x-ratelimit-limit", "2"),
            ("x-ratelimit-remaining", "1"),
            ("x-ratelimit-reset", "1700000002"),
        ]);
        let a = Announced::from_headers(&h, wall).unwrap();
        assert_eq!((a.reset_s, a.rate()), (Some(1), Some(2.0)));
        // Nothing remains: no pace, a pause to the reset.
        let h = headers(&[
            ("x-ratelimit-limit", "2"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1700000002"),
        ]);
        let a = Announced::from_headers(&h, wall).unwrap();
        assert_eq!(a.exhausted_for(), Some(Duration::from_secs(1)));
        // A reset further off: what remains over the time left.
        let h = headers(&[
            ("x-ratelimit-limit", "5000"),
            ("x-ratelimit-remaining", "90"),
            ("x-ratelimit-reset", "1700000031"),
        ]);
        let a = Announced::from_headers(&h, wall).unwrap();
        assert_eq!(a.rate(), Some(3.0));
    }

    #[test]
    fn garbage_is_no_announcement() {
        let h = headers(&[("ratelimit-policy", "q=;;"), ("x-ratelimit-limit", "lots")]);
        assert_eq!(Announced::from_headers(&h, UNIX_EPOCH), None);
        let h = headers(&[("ratelimit", "\"default\";r=-3;t=1")]);
        assert_eq!(Announced::from_headers(&h, UNIX_EPOCH), None);
    }
}
