//! The one table of what a failure means: which outcome, status, source
//! and details the client and the audit line get. Every step that meets a
//! failure asks here, so a kind of failure says the same thing wherever it
//! happens (a blocked GET and a blocked CONNECT alike), and a new kind is
//! one row.

use std::error::Error;
use std::net::IpAddr;
use std::time::Duration;

use http::header::PROXY_AUTHENTICATE;
use http::HeaderValue;
use mannerly_policy::budget::{Distress, Failure, Refusal as BudgetRefusal};
use mannerly_policy::prefs::{Place, PrefsRefusal, TDMREP_PATH};
use mannerly_policy::robots::Verdict;
use mannerly_policy::Outcome;

use super::{Stop, Told};
use crate::error::{find_in_chain, ClientBodyError, ConnectError, Source};
use crate::payments::Refused;

/// An error of the upstream client (the pool's, wrapping ours or hyper's), read
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
        ConnectError::Blocked { .. } => blocked(why),
        // A name that does not resolve is the request's own error, not a
        // robots.txt that cannot be fetched.
        ConnectError::Resolve { .. } => Stop::new(Outcome::Error, Source::Upstream, why)
            .with_status(502)
            .with_detail("reason", "name not resolved"),
        ConnectError::Timeout { .. } => origin(504, why),
        ConnectError::Parent { why } => parent(why),
        // The proxy at its own limits (descriptors, connections being
        // opened): not the origin's fault, and soon over.
        ConnectError::ProxyBusy { .. } => Stop::new(Outcome::Error, Source::Proxy, why)
            .with_status(503)
            .with_retry_after(1),
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

/// A target the operator's rules do not let the proxy reach: 403,
/// `source: policy`. curl and most clients show only a CONNECT answer's
/// headers, so the reason is a detail too.
fn blocked(why: String) -> Stop {
    Stop::new(Outcome::Blocked, Source::Policy, why.clone()).with_detail("reason", why)
}

/// A pass-through tunnel to a port `proxy.connect_ports` does not list:
/// the "blocked" row, as a blocked address is.
pub(crate) fn port_not_allowed(port: u16) -> Stop {
    blocked(format!(
        "CONNECT to port {port} is not allowed (proxy.connect_ports)"
    ))
}

/// The origin failed or misbehaved.
pub(crate) fn origin(status: u16, why: impl Into<String>) -> Stop {
    let why = why.into();
    Stop::new(Outcome::Error, Source::Upstream, why.clone())
        .with_status(status)
        .with_detail("reason", why)
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
        .with_status(502)
        .with_detail("reason", why)
}

/// The client's request body went silent or broke: its own error, and the
/// connection closes; or it could not be spooled: ours.
pub(crate) fn client_body(e: &ClientBodyError) -> Stop {
    Stop::new(Outcome::Error, e.source(), e.to_string())
        .with_status(e.status())
        .closing()
}

/// The client's User-Agent is refused by the crawler's policy
/// (`crawler.user_agent_mode = "require"`, `browser_user_agent = "refuse"`).
pub(crate) fn user_agent_refused(why: String) -> Stop {
    Stop::new(Outcome::Blocked, Source::Policy, why.clone())
        .with_status(403)
        .with_detail("reason", why)
}

/// The client's request cannot be made into the origin's.
pub(crate) fn bad_request(why: impl Into<String>) -> Stop {
    Stop::new(Outcome::Error, Source::Client, why).with_status(400)
}

/// A request whose target cannot be read (a CONNECT without `host:port`,
/// a URI that is not absolute): 400, and the connection closes, since
/// what else it carries cannot be trusted either.
pub(crate) fn bad_target(why: impl Into<String>) -> Stop {
    bad_request(why).closing()
}

/// A request head refused before it is parsed (framing, size, time): its
/// status, the client's error, and the connection closes.
pub(crate) fn bad_head(status: u16, why: String) -> Stop {
    Stop::new(Outcome::Error, Source::Client, why)
        .with_status(status)
        .closing()
}

/// A request that came round through this proxy again (its own `Via`):
/// 508, and the connection closes.
pub(crate) fn proxy_loop() -> Stop {
    let why = "this request has already passed through this proxy (its own Via): a proxy loop";
    Stop::new(Outcome::Error, Source::Client, why)
        .with_status(508)
        .closing()
}

/// A client whose address `proxy.allow` does not list: 403, closed.
pub(crate) fn client_not_allowed(ip: IpAddr) -> Stop {
    let why = format!("client address {ip} is not in proxy.allow");
    Stop::new(Outcome::Denied, Source::Client, why)
        .with_status(403)
        .closing()
}

/// Proxy credentials missing or wrong: 407 with the Basic challenge.
pub(crate) fn proxy_auth_required(why: &str) -> Stop {
    const CHALLENGE: &str = "Basic realm=\"mannerly\", charset=\"UTF-8\"";
    Stop::new(Outcome::Denied, Source::Client, why)
        .with_status(407)
        .with_header(PROXY_AUTHENTICATE, HeaderValue::from_static(CHALLENGE))
}

/// More than one `Proxy-Authorization`: which one decides differs between
/// proxies in a chain, so the request is refused rather than judged by
/// one of them; 400, closed.
pub(crate) fn proxy_auth_twice() -> Stop {
    let why = "more than one Proxy-Authorization field";
    Stop::new(Outcome::Denied, Source::Client, why)
        .with_status(400)
        .closing()
}

/// robots.txt disallows the URL for the agent: the deciding rule, its
/// line, its group and, when the request names one, the agent token as
/// details.
pub(crate) fn disallowed(verdict: &Verdict<'_>, agent: Option<&str>) -> Stop {
    let mut r = Stop::new(
        Outcome::Disallowed,
        Source::Policy,
        format!("robots.txt: {verdict}"),
    );
    if let Some(rule) = verdict.rule {
        r = r
            .with_detail("rule", rule.to_string())
            .with_detail("line", rule.line.to_string());
    }
    if let Some(group) = verdict.group {
        r = r.with_detail("group", group);
    }
    if let Some(token) = agent {
        r = r.with_detail("agent", token);
    }
    r
}

/// A purpose or use robots.txt's usage preferences refuse.
pub(crate) fn refused_in_robots(refusal: &PrefsRefusal<'_>) -> Stop {
    let stop = refused_use(format!("robots.txt: {refusal}"), refusal);
    match refusal.said().place {
        Place::RobotsLine(line) => stop.with_detail("line", line.to_string()),
        _ => stop,
    }
}

/// A response whose preferences (headers, `<meta>`) refuse the crawl, and
/// `policy.response_preferences = "withhold"`: not passed on.
pub(crate) fn withheld(refusal: &PrefsRefusal<'_>) -> Stop {
    refused_use(format!("the response is withheld: {refusal}"), refusal)
}

/// `signal_refused` naming the purpose or the use refused.
fn refused_use(why: String, refusal: &PrefsRefusal<'_>) -> Stop {
    let stop = Stop::new(Outcome::SignalRefused, Source::Policy, why);
    match refusal {
        PrefsRefusal::Purpose { purpose, .. } => stop.with_detail("purpose", purpose.as_str()),
        PrefsRefusal::Use { declared, .. } => stop.with_detail("use", declared.as_str()),
    }
}

/// A text-and-data-mining purpose `tdmrep.json` reserves for the path.
pub(crate) fn refused_in_tdmrep(refusal: &PrefsRefusal<'_>) -> Stop {
    let stop = Stop::new(
        Outcome::SignalRefused,
        Source::Policy,
        format!("{TDMREP_PATH}: {refusal}"),
    )
    .with_detail("purpose", refusal.what());
    match refusal.said().place {
        Place::TdmRepRule(n) => stop.with_detail("rule", n.to_string()),
        _ => stop,
    }
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
            .with_status(r.status())
            .with_retry_after(wait)
            .with_detail("distress", event.as_str());
    }
    let stop = Stop::new(r.outcome(), Source::Policy, why)
        .with_status(r.status())
        .with_retry_after(wait);
    match (r, origin) {
        (BudgetRefusal::QueueFull { .. }, _) | (_, None) => stop,
        (_, Some(o)) => stop.with_detail("origin", o),
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
        ..stop.with_status(503)
    }
    .with_detail("wait", wait.to_string())
    .with_detail("wait_by", by)
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
    .with_retry_after(secs)
}

/// The site's robots.txt cannot be known now: nothing is fetched.
pub(crate) fn robots_unavailable(reason: &str, retry_in: Duration) -> Stop {
    let secs = retry_in.as_secs_f64().ceil().max(1.0) as u64;
    Stop::new(
        Outcome::RobotsUnavailable,
        Source::Policy,
        format!("{reason}; the site's rules cannot be known, so nothing is fetched"),
    )
    .with_retry_after(secs)
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
    .with_detail("file", "tdmrep.json")
    .with_detail("purpose", purpose)
    .with_retry_after(secs)
}

/// A price no limit covers (the operator's rule), or a ledger that cannot
/// hold it (ours): answered 402 by the proxy, nothing sent.
pub(crate) fn payment_refused(r: &Refused, price: &str) -> Stop {
    let source = match r {
        Refused::Over(_) => Source::Policy,
        Refused::Ledger(_) => Source::Internal,
    };
    Stop::new(Outcome::PaymentRefused, source, r.to_string())
        .with_detail("limit", r.limit())
        .with_detail("price", price)
}

/// The operator's x402 signer did not sign a payment the limits cover.
pub(crate) fn payment_unsigned(why: String, price: String) -> Stop {
    Stop::new(Outcome::PaymentFailed, Source::Internal, why).with_detail("price", price)
}

/// The audit log cannot be written, so nothing is answered.
pub(crate) fn audit_unwritable() -> Stop {
    Stop::new(
        Outcome::Error,
        Source::Internal,
        "the audit log cannot be written, so nothing is answered",
    )
    .with_status(503)
    .closing()
}

/// The client went away (closed, or reset its stream) before its answer:
/// no answer, and its line says where the request was.
pub(crate) fn client_gone(at_origin: bool) -> Stop {
    let why = if at_origin {
        "client went away while the request was at the origin"
    } else {
        "client went away before the request was sent"
    };
    Stop::new(Outcome::Error, Source::Client, why).told(Told::Never)
}

/// A client that broke off the TLS handshake of an intercepted tunnel
/// after seeing our certificate: almost always one that does not trust
/// mannerly's CA. No answer: no request got through.
pub(crate) fn client_tls(name: &str, e: &std::io::Error) -> Stop {
    let alert = e.to_string();
    let why = if alert.contains("alert") || e.kind() == std::io::ErrorKind::UnexpectedEof {
        format!("client rejected our certificate for {name} ({alert})")
    } else {
        format!("TLS handshake with the client failed for {name}: {alert}")
    };
    Stop::new(Outcome::Error, Source::Client, why).told(Told::Never)
}

/// No leaf certificate could be made for an intercepted tunnel: ours, and
/// no answer, since the client's TLS never opens.
pub(crate) fn no_leaf(name: &str, e: &dyn std::fmt::Display) -> Stop {
    let why = format!("no leaf certificate for {name}: {e}");
    Stop::new(Outcome::Error, Source::Internal, why).told(Told::Never)
}

/// A later request on a kept-alive connection that hyper's parser
/// rejected: hyper answers it (431 for a head too large, else 400) and
/// closes; the line says so.
pub(crate) fn malformed_kept_alive(h: &hyper::Error) -> Stop {
    let status = if h.is_parse_too_large() { 431 } else { 400 };
    let why = format!("malformed request on a kept-alive connection: {h}");
    Stop::new(Outcome::Error, Source::Client, why)
        .with_status(status)
        .told(Told::ByServer)
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
