//! Per-host request budgets that learn from 429s.
//!
//! One [`HostBudget`] per host name (not per port) holds a rate, a ceiling, a
//! concurrency limit, a pause and the recent throttle history. It is a plain
//! state machine: every call takes the caller's `now` (and `wall` where an
//! HTTP-date must be read) and answers with a value — [`Reservation`],
//! [`Start`], [`Reaction`] — that the proxy turns into timers, queues and
//! HTTP answers.
//!
//! The request path, as the proxy walks it:
//!
//! 1. [`HostBudget::admit`] reserves the next rate slot in arrival order
//!    (a token bucket with `burst`, so FIFO spacing at `1/rate` falls out):
//!    `Go`, `Wait(d)` or `Refuse(..)`.
//! 2. When the slot has come (at once for `Go`, after sleeping `d` for
//!    `Wait`), [`HostBudget::try_start`] re-checks the pause (a 429 may have
//!    arrived meanwhile) and the concurrency gate, and on `Go` takes an
//!    in-flight slot.
//! 3. [`HostBudget::on_response`] (or [`HostBudget::finish`] when there is no
//!    response) releases it and learns from the status.
//!
//! Rates are kept as whole micro-requests per second and times as whole
//! milliseconds, so that the arithmetic is exact and a host costs 88 bytes.

mod announced;
mod decision;
mod distress;
mod host;
mod limit;
mod params;
mod persist;
mod reset;
mod retry_after;
pub mod site;
mod told;

pub use announced::{Announced, AnnouncedBy, EPOCH_THRESHOLD};
pub use decision::{
    HostView, Reaction, Refusal, Reservation, Start, Strain, Throttle, QUEUE_RETRY_AFTER,
};
pub use distress::{Distress, Failure};
pub use host::{DecodeError, HostBudget, ENCODED_LEN};
pub use limit::{
    estimate, estimate_recent, estimate_weighed, slowest_above, Learned, Outcome, Sent, LOG_LEN,
    PHASES,
};
pub use params::{
    BudgetParams, HostOverride, HostParams, DEFAULT_MAX_HOSTS, MAX_BREAKER_THRESHOLD,
};
pub use persist::PersistedHost;
pub use reset::ResetReport;
pub use retry_after::{parse_retry_after, RETRY_AFTER_ABSURD};
pub use told::{
    prefer_wait, whole_secs, FieldNames, NextTurn, Told, TurnWhy, DRAFT_11, FIELD_NAMES,
    POLICY_NAME,
};

use std::borrow::Cow;

/// The budget key of a request target: the host name lower-cased, without
/// port and without a trailing dot.
///
/// `Example.COM:8443`, `example.com.` and `example.com` share one budget: a
/// crawler must not get a second budget by spelling the host differently.
/// IPv6 literals keep their brackets (`[::1]:80` → `[::1]`).
pub fn host_key(authority: &str) -> Cow<'_, str> {
    let host = if authority.starts_with('[') {
        match authority.find(']') {
            Some(end) => &authority[..=end],
            None => authority,
        }
    } else {
        // The port is the digits after the last `:`; read from the end,
        // only the port's digits are looked at (this runs about ten times
        // a request, and a search for the last `:` over the whole
        // authority cost twice the rest).
        let digits = authority
            .bytes()
            .rev()
            .take_while(u8::is_ascii_digit)
            .count();
        let before = authority.len() - digits;
        match before.checked_sub(1) {
            Some(colon) if authority.as_bytes()[colon] == b':' => &authority[..colon],
            _ => authority,
        }
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(host.to_ascii_lowercase())
    } else {
        Cow::Borrowed(host)
    }
}

#[cfg(test)]
mod tests {
    use super::host_key;

    #[test]
    fn host_key_drops_port_case_and_trailing_dot() {
        assert_eq!(host_key("Example.COM:8443"), "example.com");
        assert_eq!(host_key("example.com."), "example.com");
        assert_eq!(host_key("example.com"), "example.com");
        assert_eq!(host_key("[::1]:8080"), "[::1]");
        assert_eq!(host_key("[::1]"), "[::1]");
        assert_eq!(host_key("10.0.0.1:80"), "10.0.0.1");
    }

    /// The key as it was made before the port was read from the end.
    fn by_last_colon(authority: &str) -> String {
        let host = match authority.rsplit_once(':') {
            Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
            _ => authority,
        };
        host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase()
    }

    #[test]
    fn the_port_read_from_the_end_is_the_one_after_the_last_colon() {
        let odd = [
            "",
            ":",
            ":80",
            "80",
            "example.com:",
            "a:b:80",
            "a:80:b",
            "host:8a",
            "Ex.COM.:443",
            "example.com.:",
            "x:0",
            "::",
            "a.:",
            "1.2.3.4:65536",
            "ex ample:80",
        ];
        for authority in odd {
            assert_eq!(
                host_key(authority),
                by_last_colon(authority),
                "{authority:?}"
            );
        }
    }
}
