//! The one table of what a failure means: which outcome, status, source
//! and details the client and the audit line get. Every step that meets a
//! failure asks here, so a kind of failure says the same thing wherever it
//! happens (a blocked GET and a blocked CONNECT alike), and a new kind is
//! one row.

use std::error::Error;
use std::time::Duration;

use mannerly_policy::budget::{Distress, Failure, Refusal as BudgetRefusal};
use mannerly_policy::Outcome;

use super::Stop;
use crate::error::{find_in_chain, ClientBodyError, ConnectError, Source};
use crate::payments::Refused;

/// An error of the upstream client (hyper-util's, wrapping ours), read
/// down its chain: the client's body, our connector, TLS, else the origin.
pub(crate) fn upstream(err: &(dyn Error + 'static)) -> Stop {
    if let Some(c) = find_in_chain::<ClientBodyError>(err) {
        return client_body(c);
    }
    if let Some(c) = find_in_chain::<ConnectError>(err) {
        return connect(c);
    }
    if let Some(tls) = find_in_chain::<rustls::Error>(err) {
        return origin(502, tls_words(tls));
    }
    if let Some(h) = find_in_chain::<hyper::Error>(err).filter(|h| h.is_parse()) {
        // Framing RFC 9112 §6.3 forbids (conflicting or invalid
        // Content-Length, ...) or a head over the limit: not relayed.
        let why = if h.is_parse_too_large() {
            format!(
                "the origin's response head is larger than {} bytes",
                crate::upstream::MAX_RESPONSE_HEAD
            )
        } else {
            format!("the origin's response is not valid HTTP/1.1: {h}")
        };
        return origin(502, why);
    }
    let mut why = err.to_string();
    let mut src = err.source();
    while let Some(s) = src {
        why.push_str(": ");
        why.push_str(&s.to_string());
        src = s.source();
    }
    origin(502, format!("origin failed: {why}"))
}

/// Why a connection to the target was not made, before or while connecting.
pub(crate) fn connect(e: &ConnectError) -> Stop {
    let why = e.to_string();
    match e {
        // curl and most clients show only a CONNECT answer's headers, so
        // the reason is a detail too.
        ConnectError::Blocked { .. } => {
            Stop::new(Outcome::Blocked, Source::Policy, why.clone()).detail("reason", why)
        }
        // A name that does not resolve is the request's own error, not a
        // robots.txt that cannot be fetched.
        ConnectError::Resolve { .. } => Stop::new(Outcome::Error, Source::Upstream, why)
            .status(502)
            .detail("reason", "name not resolved"),
        ConnectError::Timeout { .. } => origin(504, why),
        ConnectError::Parent { why } => parent(why),
        // The proxy at its own limits (descriptors, connections being
        // opened): not the origin's fault, and soon over.
        ConnectError::ProxyBusy { .. } => Stop::new(Outcome::Error, Source::Proxy, why)
            .status(503)
            .retry_after(1),
        ConnectError::Io { .. } | ConnectError::NoHost(_) => origin(502, why),
    }
}

/// What an upstream client error shows of the site, for its budget: a
/// connect timeout, or a connection refused, reset or closed before the
/// head. A refusal of ours, the client's body, TLS or bad framing show
/// nothing of the site's load.
pub(crate) fn distress(err: &(dyn Error + 'static)) -> Failure {
    if find_in_chain::<ClientBodyError>(err).is_some() {
        return Failure::Nothing;
    }
    if let Some(c) = find_in_chain::<ConnectError>(err) {
        return match c {
            ConnectError::Timeout { .. } => Failure::Distress(Distress::ConnectTimeout),
            ConnectError::Io { .. } => Failure::Distress(Distress::Reset),
            _ => Failure::Nothing,
        };
    }
    if find_in_chain::<rustls::Error>(err).is_some() {
        return Failure::Nothing;
    }
    if let Some(h) = find_in_chain::<hyper::Error>(err) {
        if h.is_parse() || h.is_user() {
            return Failure::Nothing;
        }
        return Failure::Distress(Distress::Reset);
    }
    match find_in_chain::<std::io::Error>(err).map(std::io::Error::kind) {
        Some(
            std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::UnexpectedEof,
        ) => Failure::Distress(Distress::Reset),
        _ => Failure::Nothing,
    }
}

/// The origin failed or misbehaved.
pub(crate) fn origin(status: u16, why: impl Into<String>) -> Stop {
    let why = why.into();
    Stop::new(Outcome::Error, Source::Upstream, why.clone())
        .status(status)
        .detail("reason", why)
}

/// The origin sent no response head in time.
pub(crate) fn no_first_byte(within: Duration) -> Stop {
    origin(
        504,
        format!("no response from the origin within {within:?}"),
    )
}

/// The parent proxy (`upstream.proxy`) failed or refused; the target was
/// never asked.
pub(crate) fn parent(why: &str) -> Stop {
    Stop::new(Outcome::Error, Source::Parent, why)
        .status(502)
        .detail("reason", why)
}

/// The client's request body went silent or broke: its own error, and the
/// connection closes; or it could not be spooled: ours.
pub(crate) fn client_body(e: &ClientBodyError) -> Stop {
    Stop::new(Outcome::Error, e.source(), e.to_string())
        .status(e.status())
        .close()
}

/// The client's User-Agent is refused by the crawler's policy
/// (`crawler.user_agent_mode = "require"`, `browser_user_agent = "refuse"`).
pub(crate) fn user_agent_refused(why: String) -> Stop {
    Stop::new(Outcome::Blocked, Source::Policy, why.clone())
        .status(403)
        .detail("reason", why)
}

/// The client's request cannot be made into the origin's.
pub(crate) fn bad_request(why: impl Into<String>) -> Stop {
    Stop::new(Outcome::Error, Source::Client, why).status(400)
}

/// A request the budget will not hold; `prefix` names what was waiting
/// when it is not the request itself (its robots.txt fetch); `origin` is
/// the one whose answer paused the host, when known.
pub(crate) fn budget(r: &BudgetRefusal, prefix: &str, origin: Option<&str>) -> Stop {
    let wait = r.retry_after_secs();
    // Budgets are per host name: a 429 from one port pauses them all, which
    // surprises unless the answer says whose it was.
    let by = origin.map_or(String::new(), |o| {
        format!(" ({o} answered it; all ports of a host share its budget)")
    });
    let why = match r {
        BudgetRefusal::Paused { .. } => format!(
            "{prefix}the host is paused for {wait} s after the origin asked to slow down{by}"
        ),
        BudgetRefusal::BreakerOpen { .. } => {
            format!("{prefix}the host drew too many 429s and is left alone for {wait} s{by}")
        }
        BudgetRefusal::QueueFull { .. } => {
            format!("{prefix}too many requests are waiting for this host")
        }
        BudgetRefusal::Paced { .. } => format!(
            "{prefix}the host's pace (its robots.txt Crawl-delay, or a rate learned from the site) puts its next turn {wait} s away, longer than a request may be held (budget.max_hold_secs)"
        ),
        BudgetRefusal::Distressed { event, breaker, .. } => {
            let left = if *breaker {
                "repeated distress opened the breaker: the host is left alone"
            } else {
                "the host is paused"
            };
            format!("{prefix}the site shows distress ({event}) without asking to slow down; {left} for {wait} s and answered at once meanwhile")
        }
    };
    if let BudgetRefusal::Distressed { event, .. } = r {
        return Stop::new(r.outcome(), Source::Policy, why)
            .status(r.status())
            .retry_after(wait)
            .detail("distress", event.as_str());
    }
    let stop = Stop::new(r.outcome(), Source::Policy, why)
        .status(r.status())
        .retry_after(wait);
    match (r, origin) {
        (BudgetRefusal::QueueFull { .. }, _) | (_, None) => stop,
        (_, Some(o)) => stop.detail("origin", o),
    }
}

/// A request whose client chose not to be held as long as the budget
/// would have (`Prefer: wait=N`, or its default in `proxy.prefer_wait`):
/// 503 at once, with the host's next turn as Retry-After, whatever the
/// budget's refusal was (a pause it would have waited out included), and
/// the decision header naming the choice.
pub(crate) fn not_waited(stop: Stop, wait: u64, by: &'static str) -> Stop {
    let reason = format!(
        "{}; the {} chose to be held at most {wait} s",
        stop.reason,
        if by == "client" {
            "client (Prefer: wait)"
        } else {
            "client's configured default (proxy.prefer_wait)"
        }
    );
    Stop {
        reason,
        ..stop.status(503)
    }
    .detail("wait", wait.to_string())
    .detail("wait_by", by)
}

/// The host is closed now (its robots.txt `Visit-time`, the operator's
/// quiet hours) and opens later than the request may be held: `paced`,
/// 503, with when it opens as Retry-After.
pub(crate) fn outside_window(why: &str, opens_in: Duration) -> Stop {
    let secs = opens_in.as_secs_f64().ceil().max(1.0) as u64;
    Stop::new(
        Outcome::Paced,
        Source::Policy,
        format!("the host is not visited now: {why}; it opens in {secs} s"),
    )
    .retry_after(secs)
}

/// The site's robots.txt cannot be known now: nothing is fetched.
pub(crate) fn robots_unavailable(reason: &str, retry_in: Duration) -> Stop {
    let secs = retry_in.as_secs_f64().ceil().max(1.0) as u64;
    Stop::new(
        Outcome::RobotsUnavailable,
        Source::Policy,
        format!("{reason}; the site's rules cannot be known, so nothing is fetched"),
    )
    .retry_after(secs)
}

/// `/.well-known/tdmrep.json` could not be read (429, 5xx, unreachable),
/// for a crawl declaring a text-and-data-mining purpose: whether the site
/// reserves it is unknown, and a crawler does not guess in its own favour.
/// The outcome is robots.txt's: a site file saying what the site wants
/// could not be read.
pub(crate) fn tdmrep_unavailable(reason: &str, retry_in: Duration, purpose: &str) -> Stop {
    let secs = retry_in.as_secs_f64().ceil().max(1.0) as u64;
    Stop::new(
        Outcome::RobotsUnavailable,
        Source::Policy,
        format!(
            "{reason}; whether the site reserves text and data mining cannot be known, \
             so nothing is fetched for {purpose}"
        ),
    )
    .detail("file", "tdmrep.json")
    .detail("purpose", purpose)
    .retry_after(secs)
}

/// A price no limit covers (the operator's rule), or a ledger that cannot
/// hold it (ours): answered 402 by the proxy, nothing sent.
pub(crate) fn payment_refused(r: &Refused, price: &str) -> Stop {
    let source = match r {
        Refused::Over(_) => Source::Policy,
        Refused::Ledger(_) => Source::Internal,
    };
    Stop::new(Outcome::PaymentRefused, source, r.to_string())
        .detail("limit", r.limit())
        .detail("price", price)
}

/// The operator's x402 signer did not sign a payment the limits cover.
pub(crate) fn payment_unsigned(why: String, price: String) -> Stop {
    Stop::new(Outcome::PaymentFailed, Source::Internal, why).detail("price", price)
}

/// The audit log cannot be written, so nothing is answered.
pub(crate) fn audit_unwritable() -> Stop {
    Stop::new(
        Outcome::Error,
        Source::Internal,
        "the audit log cannot be written, so nothing is answered",
    )
    .status(503)
    .close()
}

fn tls_words(e: &rustls::Error) -> String {
    use rustls::CertificateError as C;
    if crate::upstream::pinned::ca_used_as_end_entity(e) {
        return "the origin serves a CA certificate (basicConstraints CA:TRUE, as `openssl req -x509` makes by default) as its own, which TLS clients refuse: give the origin a certificate with CA:FALSE, or name this exact certificate in upstream.extra_roots (`mannerly run --local cert.pem`) to trust it as it is".into();
    }
    let cert = match e {
        rustls::Error::InvalidCertificate(c) => c,
        rustls::Error::AlertReceived(a) => {
            return format!("the origin ended the TLS handshake ({a:?})")
        }
        rustls::Error::NoApplicationProtocol => {
            return "the origin speaks neither h2 nor http/1.1 over TLS".into()
        }
        other => return format!("TLS with the origin failed: {other}"),
    };
    match cert {
        C::UnknownIssuer => {
            "origin certificate not trusted (unknown issuer) — add its CA to upstream.extra_roots"
                .into()
        }
        C::NotValidForName | C::NotValidForNameContext { .. } => {
            "origin certificate is not valid for this host name".into()
        }
        C::Expired | C::ExpiredContext { .. } => "origin certificate has expired".into(),
        C::NotValidYet | C::NotValidYetContext { .. } => {
            "origin certificate is not valid yet (check this machine's clock)".into()
        }
        C::Revoked => "origin certificate has been revoked".into(),
        C::BadSignature => "origin certificate has a bad signature".into(),
        C::InvalidPurpose | C::InvalidPurposeContext { .. } => {
            "origin certificate is not for TLS servers".into()
        }
        other => format!("origin certificate rejected: {other}"),
    }
}
