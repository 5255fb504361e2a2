//! What the client sees: the `Mannerly-Decision` header on every answer,
//! and the [`Stop`]: a decision that ends a request's walk (outcome,
//! status, source, reason, details), turned into the plain-text answer and
//! its audit fields in one place, [`Stop::record`] and
//! [`Stop::into_response`]. What each kind of failure means is one row of
//! [`failure`].

use http::header::{HeaderName, HeaderValue, CONNECTION, CONTENT_TYPE, RETRY_AFTER};
use http::{Response, StatusCode};
use mannerly_policy::{AuditRecord, Outcome};

use crate::body::{full, ProxyBody};
use crate::error::Source;

pub(crate) mod failure;

/// Header naming the decision made for a request. Names, not strings: set
/// on every answer, a `&str` name would be parsed and hashed each time.
pub(crate) const DECISION: HeaderName = HeaderName::from_static("mannerly-decision");
/// Header carrying the audit id of the request.
pub(crate) const ID: HeaderName = HeaderName::from_static("mannerly-id");

/// A header value made from any text: characters a header cannot carry are
/// replaced, so a rule with odd bytes still produces a valid answer.
pub(crate) fn header_text(s: &str) -> HeaderValue {
    header_owned(s.to_owned())
}

/// The `Mannerly-Id` value: marked sensitive, which HTTP/2 sends as a
/// literal never indexed (RFC 7541 §6.2.3) and HTTP/1 ignores. An id is
/// new on every answer, so indexing it only churned the connection's HPACK
/// table: each insert evicted an entry that might repeat, and every later
/// id was compared with the chain of earlier ones under the same name.
pub(crate) fn id_value(id: &str) -> HeaderValue {
    let mut v = header_text(id);
    v.set_sensitive(true);
    v
}

/// [`header_text`] of a string already built: several on every answer (the
/// decision, the id, the budget's fields), so clean text becomes the value
/// without a copy.
pub(crate) fn header_owned(s: String) -> HeaderValue {
    // Every byte looked at, without stopping at the first bad one: a loop
    // that cannot stop early compares sixteen bytes at a time, where `all`
    // went byte by byte.
    let printable = s.bytes().fold(true, |ok, b| ok & shown(b));
    let clean = if s.len() <= 512 && printable {
        s
    } else {
        s.chars()
            .take(512)
            .map(|c| {
                if c.is_ascii() && shown(c as u8) {
                    c
                } else {
                    '?'
                }
            })
            .collect()
    };
    // A boxed slice (shrunk in place) becomes `Bytes` as it is; a `String`
    // with spare capacity would cost `Bytes` an allocation of its own.
    HeaderValue::from_maybe_shared(bytes::Bytes::from(clean.into_bytes().into_boxed_slice()))
        .unwrap_or_else(|_| HeaderValue::from_static("?"))
}

/// What a header value of ours keeps: the graphic characters and space,
/// `' '..='~'`, as one comparison.
const fn shown(b: u8) -> bool {
    b.wrapping_sub(b' ') <= b'~' - b' '
}

/// The `Mannerly-Decision` value: the outcome, then `; key=value` details.
pub(crate) fn decision_value(outcome: Outcome, details: &[(&str, String)]) -> HeaderValue {
    decision(outcome, None, details)
}

/// [`decision_value`] with `waited_ms` as its first detail, as every
/// answer that reached the origin or the store has: written in place, not
/// made a string in a list first (two allocations an answer).
pub(crate) fn decision_waited(
    outcome: Outcome,
    waited_ms: u64,
    details: &[(&str, String)],
) -> HeaderValue {
    decision(outcome, Some(waited_ms), details)
}

fn decision(outcome: Outcome, waited_ms: Option<u64>, details: &[(&str, String)]) -> HeaderValue {
    const WAITED: &str = "; waited_ms=";
    // Sized once: grown as it was written, the string was copied twice.
    let len = details.iter().map(|(k, d)| k.len() + d.len() + 5);
    let waited_len = if waited_ms.is_some() {
        WAITED.len() + 20
    } else {
        0
    };
    let mut v = String::with_capacity(outcome.as_str().len() + waited_len + len.sum::<usize>());
    v.push_str(outcome.as_str());
    if let Some(ms) = waited_ms {
        v.push_str(WAITED);
        v.push_str(itoa::Buffer::new().format(ms));
    }
    for (k, d) in details {
        v.push_str("; ");
        v.push_str(k);
        v.push('=');
        if d.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-*".contains(&b))
        {
            v.push_str(d);
        } else {
            v.push('"');
            v.push_str(&d.replace(['"', '\\'], "'"));
            v.push('"');
        }
    }
    header_owned(v)
}

/// A decision that ends a request's walk: a refusal or a failure, before
/// it becomes the client's answer and the request's audit line.
///
/// Sealed: its fields are private and it is built only here, one
/// constructor per row of [`failure`], so a kind of failure says the same
/// wherever it happens and no step makes up a status, source or outcome of
/// its own. Everything else reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stop {
    /// What was decided.
    outcome: Outcome,
    /// Whose doing it is, for the audit line's `source`.
    source: Source,
    /// Status to send.
    status: u16,
    /// Why, in plain words.
    reason: String,
    /// Extra `; key=value` details for the decision header.
    details: Vec<(&'static str, String)>,
    /// Seconds after which the client may try again.
    retry_after: Option<u64>,
    /// Close the client connection after answering (bad input).
    close: bool,
    /// Extra headers (`Proxy-Authenticate`).
    headers: Vec<(http::HeaderName, HeaderValue)>,
    /// How the client hears of it.
    told: Told,
}

/// How the client hears of a [`Stop`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Told {
    /// Our plain-text answer (`Stop::into_response`).
    Answer,
    /// hyper's own answer to a head it could not parse, with the stop's
    /// status; none of its body is ours to count.
    ByServer,
    /// Not at all: the client is gone, or its TLS never opened. The line
    /// has no status and counts no byte sent.
    Never,
}

// === impl Stop: the rows build it ===

impl Stop {
    /// A stop with the outcome's usual status.
    fn new(outcome: Outcome, source: Source, reason: impl Into<String>) -> Self {
        Stop {
            outcome,
            source,
            status: outcome.refusal_status(),
            reason: reason.into(),
            details: Vec::new(),
            retry_after: None,
            close: false,
            headers: Vec::new(),
            told: Told::Answer,
        }
    }

    /// Adds a header to the answer.
    fn with_header(mut self, name: http::HeaderName, value: HeaderValue) -> Self {
        self.headers.push((name, value));
        self
    }

    /// Sets the status.
    fn with_status(mut self, status: u16) -> Self {
        self.status = status;
        self
    }

    /// Adds Retry-After.
    fn with_retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    /// Adds a detail to the decision header.
    fn with_detail(mut self, key: &'static str, value: impl Into<String>) -> Self {
        self.details.push((key, value.into()));
        self
    }

    /// Closes the connection after the answer.
    fn closing(mut self) -> Self {
        self.close = true;
        self
    }

    /// Told the client some other way than by our answer.
    fn told(mut self, told: Told) -> Self {
        self.told = told;
        self
    }
}

// === impl Stop: what the rest reads ===

impl Stop {
    /// What was decided.
    pub(crate) fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// Whose doing it is.
    pub(crate) fn source(&self) -> Source {
        self.source
    }

    /// Why, in plain words.
    pub(crate) fn reason(&self) -> &str {
        &self.reason
    }

    /// The plain-text body.
    pub(crate) fn body_text(&self) -> String {
        let mut s = format!("mannerly: {}: {}\n", self.outcome, self.reason);
        if let Some(r) = self.retry_after {
            s.push_str(&format!("retry after {r} s\n"));
        }
        s
    }

    /// Writes the stop's audit fields into `rec`.
    pub(crate) fn record(&self, rec: &mut AuditRecord) {
        let (outcome, source) = (self.outcome, self.source.as_str());
        match self.told {
            Told::Answer => {
                let body = self.body_text().len() as u64;
                rec.refused(outcome, self.status, &self.reason, source, body);
            }
            Told::ByServer => {
                rec.decided(outcome, self.status);
                rec.reason = Some(self.reason.clone());
                rec.source = Some(source);
            }
            Told::Never => {
                rec.refused(outcome, 0, &self.reason, source, 0);
                rec.status = None;
            }
        }
    }

    /// Builds the response.
    pub(crate) fn into_response(self, id: &str) -> Response<ProxyBody> {
        let text = self.body_text();
        let mut resp = Response::new(full(text));
        *resp.status_mut() =
            StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let h = resp.headers_mut();
        h.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        h.insert(DECISION, decision_value(self.outcome, &self.details));
        h.insert(ID, id_value(id));
        if let Some(r) = self.retry_after {
            h.insert(RETRY_AFTER, HeaderValue::from(r));
        }
        if self.close {
            h.insert(CONNECTION, HeaderValue::from_static("close"));
        }
        for (k, v) in self.headers {
            h.insert(k, v);
        }
        resp
    }
}

/// What the steps' unit tests read of a stop; the rest of the proxy
/// only records and answers it.
#[cfg(test)]
impl Stop {
    /// The status the client gets.
    pub(crate) fn status(&self) -> u16 {
        self.status
    }

    /// The decision header's `; key=value` details.
    pub(crate) fn details(&self) -> &[(&'static str, String)] {
        &self.details
    }

    /// Seconds after which the client may try again.
    pub(crate) fn retry_after(&self) -> Option<u64> {
        self.retry_after
    }

    /// The connection closes after the answer.
    pub(crate) fn closes(&self) -> bool {
        self.close
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decision_header_quotes_details() {
        let v = decision_value(
            Outcome::Disallowed,
            &[("rule", "Disallow: /private/".into()), ("line", "3".into())],
        );
        assert_eq!(v, "disallowed; rule=\"Disallow: /private/\"; line=3");
        let v = decision_value(Outcome::Fetched, &[("waited_ms", "0".into())]);
        assert_eq!(v, "fetched; waited_ms=0");
        assert_eq!(header_text("ü\n"), "??");
    }

    /// Every ASCII byte is kept when graphic or a space, else replaced;
    /// text over 512 bytes is cut there.
    #[test]
    fn header_text_keeps_graphic_ascii_and_spaces_only() {
        for b in 0u8..=127 {
            let text = format!("a{}b", char::from(b));
            let kept = b.is_ascii_graphic() || b == b' ';
            let want = if kept {
                text.clone()
            } else {
                "a?b".to_string()
            };
            assert_eq!(header_owned(text), want.as_str(), "byte {b:#04x}");
        }
        assert_eq!(header_owned("x".repeat(513)), "x".repeat(512).as_str());
        assert_eq!(header_owned("x".repeat(512)), "x".repeat(512).as_str());
    }

    /// The waited time written in place reads as it did as a detail.
    #[test]
    fn waited_ms_in_place_is_the_first_detail() {
        let details = [("cache", "hit".to_string()), ("why", "a b".to_string())];
        for ms in [0, 7, 1_234, u64::MAX] {
            let mut said = vec![("waited_ms", ms.to_string())];
            said.extend(details.iter().cloned());
            let listed = decision_value(Outcome::Fetched, &said);
            assert_eq!(decision_waited(Outcome::Fetched, ms, &details), listed);
            let alone = decision_value(Outcome::Revalidated, &said[..1]);
            assert_eq!(decision_waited(Outcome::Revalidated, ms, &[]), alone);
        }
        let v = decision_waited(Outcome::Collapsed, 12, &details);
        assert_eq!(v, "collapsed; waited_ms=12; cache=hit; why=\"a b\"");
    }

    #[test]
    fn a_blocked_port_says_what_a_blocked_address_says() {
        let port = failure::port_not_allowed(8080);
        let why = "CONNECT to port 8080 is not allowed (proxy.connect_ports)";
        assert_eq!(
            (port.outcome, port.status, port.source),
            (Outcome::Blocked, 403, Source::Policy)
        );
        assert_eq!(port.reason, why);
        assert_eq!(port.details, vec![("reason", why.to_string())]);
        let resp = port.into_response("id1");
        assert_eq!(resp.status(), 403);
        assert_eq!(
            resp.headers()[DECISION],
            format!("blocked; reason=\"{why}\"")
        );
    }

    #[test]
    fn the_loop_and_a_bad_target_are_answered_and_close() {
        let looped = failure::proxy_loop();
        assert_eq!(
            (looped.outcome, looped.status, looped.source, looped.close),
            (Outcome::Error, 508, Source::Client, true)
        );
        let mut rec = AuditRecord::default();
        looped.record(&mut rec);
        assert_eq!(
            (rec.status, rec.source, rec.bytes),
            (
                Some(508),
                Some("client"),
                Some(looped.body_text().len() as u64)
            )
        );
        let resp = looped.into_response("id2");
        assert_eq!(resp.headers()[CONNECTION], "close");
        assert_eq!(resp.headers()[DECISION], "error");
        let bad = failure::bad_target("CONNECT needs host:port");
        assert_eq!((bad.status, bad.close), (400, true));
    }

    #[test]
    fn proxy_auth_challenges_with_basic() {
        let stop = failure::proxy_auth_required("proxy authentication required");
        assert_eq!((stop.outcome, stop.status), (Outcome::Denied, 407));
        let resp = stop.into_response("id3");
        assert_eq!(
            resp.headers()[http::header::PROXY_AUTHENTICATE],
            "Basic realm=\"mannerly\", charset=\"UTF-8\""
        );
        let twice = failure::proxy_auth_twice();
        assert_eq!((twice.status, twice.close), (400, true));
        let ip = std::net::IpAddr::from([192, 0, 2, 7]);
        let outside = failure::client_not_allowed(ip);
        assert_eq!(
            outside.reason,
            "client address 192.0.2.7 is not in proxy.allow"
        );
        assert_eq!((outside.status, outside.close), (403, true));
    }

    #[test]
    fn a_failure_no_answer_told_has_no_status_on_its_line() {
        let mut rec = AuditRecord::default();
        failure::client_gone(true).record(&mut rec);
        assert_eq!(rec.outcome, Some(Outcome::Error));
        assert_eq!(rec.status, None);
        assert_eq!(rec.bytes, Some(0));
        assert_eq!(rec.source, Some("client"));
        assert_eq!(
            rec.reason.as_deref(),
            Some("client went away while the request was at the origin")
        );
        let mut rec = AuditRecord::default();
        failure::no_leaf("a.example", &"no key").record(&mut rec);
        assert_eq!((rec.status, rec.source), (None, Some("internal")));
        assert_eq!(
            rec.reason.as_deref(),
            Some("no leaf certificate for a.example: no key")
        );
    }
}
