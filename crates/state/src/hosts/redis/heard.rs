//! Changes told on this proxy's own channel of a host: `op.lua` tells each
//! change of a shared host's copy, with the copy itself, to the proxy that
//! acts next on it, so that proxy's copy seen last is current when its
//! step comes, and that step's compare-and-set succeeds in one round trip
//! where it would have found the copy changed. (Messages of the earlier
//! schemes, on the host's channel, have the same form.) Also where this
//! proxy listens ([`RedisHosts::hear`]) and when a host counts as shared.

use std::time::{Instant, SystemTime};

use mannerly_policy::budget::host_key;

use super::script::QUIET;
use super::{decode_or_new, RedisHosts};

/// What a message of a host's budget told.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Heard {
    /// Another proxy gave a lease back: a concurrency waiter may go.
    pub released: bool,
    /// Another proxy ended the host's pause early (an operator's reset):
    /// waiters ask again rather than sleep to the old end.
    pub reset: bool,
}

impl RedisHosts {
    /// Gives the store this proxy's subscriber ([`Waiters`](crate::wake::Waiters)),
    /// for [`RedisHosts::hear`].
    pub fn listen_with(&self, waiters: crate::wake::Waiters) {
        let _ = self.hearing.set(waiters);
    }

    /// Listens, while the hearing is held, on this proxy's own channel for
    /// `host` ([`own_channel`](crate::wake::own_channel)): the budget
    /// script tells a change there when this proxy is the one to act on
    /// it next. `None` without a subscriber ([`RedisHosts::listen_with`]).
    pub fn hear(&self, host: &str) -> Option<crate::wake::Hearing> {
        let w = self.hearing.get()?;
        Some(w.hear_own(&host_key(host), &self.instance))
    }

    /// Whether another proxy has called or changed `key` within the
    /// sharing window: its changes are worth hearing.
    pub fn shared_lately(&self, key: &str, now: Instant) -> bool {
        self.seen.get(key).is_some_and(|s| {
            [s.conflict_at, s.shared_at]
                .into_iter()
                .flatten()
                .any(|t| now.saturating_duration_since(t) < QUIET)
        })
    }

    pub(super) fn mark_shared(&self, key: &str, shared: bool, now: Instant) {
        if shared {
            if let Some(mut s) = self.seen.get_mut(key) {
                s.shared_at = Some(now);
            }
        }
    }

    /// Takes in a message of `host`'s channel (its `payload`, see
    /// `op.lua`): a copy newer than the one seen last replaces it (and
    /// voids a reservation kept unstored on the old one), and marks the
    /// host as changed by another proxy. This proxy's own messages teach
    /// nothing. Hosts this proxy has not seen are not taken in.
    pub fn heard(&self, host: &str, payload: &[u8], now: Instant, wall: SystemTime) -> Heard {
        // An earlier version publishes an empty message, on a release only.
        let Some(nl) = payload.iter().position(|&c| c == b'\n') else {
            return Heard {
                released: true,
                reset: false,
            };
        };
        let Some((kind, version, leases, instance)) = std::str::from_utf8(&payload[..nl])
            .ok()
            .and_then(parse_head)
        else {
            return Heard::default();
        };
        if instance == self.instance {
            return Heard::default();
        }
        let heard = Heard {
            released: kind.contains('-'),
            reset: kind.contains('r'),
        };
        if heard.reset {
            // Its slot was reserved behind the pause that ended.
            self.early_admits.remove(host);
        }
        let p = self.table().for_host(host);
        if let Some(mut s) = self.seen.get_mut(host) {
            if replaces(version, s.at) {
                let bytes = &payload[nl + 1..];
                let mut budget = decode_or_new(&p, bytes, now, wall);
                budget.set_in_flight(leases);
                s.budget = budget;
                s.bytes = bytes.to_vec();
                s.leases = leases;
                s.at = version;
                if s.pending.take().is_some() {
                    s.voided = true;
                }
                s.conflict_at = Some(now);
            }
        }
        heard
    }
}

/// A copy at server time `candidate` (µs) replaces the one at `current`:
/// it is newer. One more than [`CLOCK_STEP`] older is not a message
/// overtaken by an answer (they are milliseconds apart) but a server clock
/// that went back (a failover to a node whose clock is behind): it
/// replaces too, or the copy seen last would stay stale until that clock
/// caught up.
pub(super) fn replaces(candidate: u64, current: u64) -> bool {
    candidate > current || current - candidate > CLOCK_STEP
}

/// See [`replaces`].
const CLOCK_STEP: u64 = 1_000_000;

/// `<kind> <version> <leases> <instance>`.
fn parse_head(head: &str) -> Option<(&str, u64, u32, &str)> {
    let mut parts = head.splitn(4, ' ');
    let kind = parts.next()?;
    let version = parts.next()?.parse().ok()?;
    let leases = parts.next()?.parse().ok()?;
    Some((kind, version, leases, parts.next()?))
}

#[cfg(test)]
mod tests {
    use super::{parse_head, replaces};

    #[test]
    fn a_newer_copy_replaces_an_older_one_unless_the_clock_went_back() {
        assert!(replaces(2, 1));
        assert!(!replaces(1, 2));
        assert!(!replaces(5, 5));
        assert!(!replaces(1_000_000, 1_500_000));
        assert!(replaces(1_000_000, 2_000_001));
        // Any copy replaces one of no known version (0).
        assert!(replaces(1_764_600_000_000_000, 0));
    }

    #[test]
    fn a_message_head_names_kind_version_leases_and_sender() {
        assert_eq!(
            parse_head("-r 1764600000123456 2 host:12:ab"),
            Some(("-r", 1_764_600_000_123_456, 2, "host:12:ab"))
        );
        // An instance id may hold anything after the third space.
        assert_eq!(parse_head(". 1 0 a b"), Some((".", 1, 0, "a b")));
        assert_eq!(parse_head(". x 0 a"), None);
        assert_eq!(parse_head(". 1 0"), None);
    }
}
