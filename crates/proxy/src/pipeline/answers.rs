//! The answers a walk ends in: the funnel that turns a [`Stop`] into the
//! client's answer and its audit line, an origin's response passed on, and
//! a stored page.

use http::{Response, Version};
use http_body::Body as _;
use std::sync::atomic::Ordering;

use mannerly_policy::conditional::{self, CacheOutcome};
use mannerly_policy::encoding;
use mannerly_policy::{strip_hop_by_hop, AuditRecord, Outcome};

use super::{Exchange, Stage, StoredPage};
use crate::answer::{decision_waited, failure, id_value, Stop, DECISION, ID};
use crate::audit::AuditedBody;
use crate::body::{boxed, full, ProxyBody};
use crate::cache::Tee;
use crate::decode::{decode_all, decoded};
use crate::upstream::conns::{ConnHandle, ReleaseOnEnd};

impl Exchange {
    /// The audit record, taken for the one answer of this request.
    fn take_record(&mut self) -> Box<AuditRecord> {
        self.at = Stage::Answered;
        std::mem::take(&mut self.rec)
    }

    /// `details` for the decision header, then what the walk found
    /// (`Exchange::said`), then how often the request was
    /// sent again after a throttle and the Retry-After that asked for it
    /// (`retries=2; retry_after=2`), unless `details` says otherwise.
    fn with_retries<'a>(&self, details: &[(&'a str, String)]) -> Vec<(&'a str, String)> {
        let mut said = details.to_vec();
        said.extend(self.said.iter().cloned());
        if self.retries == 0 {
            return said;
        }
        let mut add = |k: &'a str, v: String| {
            if !said.iter().any(|(d, _)| *d == k) {
                said.push((k, v));
            }
        };
        add("retries", self.retries.to_string());
        if let Some(ra) = &self.retry_after {
            add("retry_after", ra.clone());
        }
        said
    }

    /// The one funnel: a stop becomes the client's answer and its line.
    pub(super) fn stopped(&mut self, stop: Stop) -> Response<ProxyBody> {
        let rec = self.take_record();
        self.shared.stop(rec, stop)
    }

    /// Passes an origin response on, with the decision header and the audit
    /// line attached to the end of its body.
    pub(super) fn forward<B: Forwardable>(
        &mut self,
        resp: Response<B>,
        outcome: Outcome,
    ) -> Response<ProxyBody> {
        self.forward_with(resp, outcome, &[])
    }

    /// [`Exchange::forward`] of a body already taken off its connection,
    /// with more details in the decision header.
    pub(super) fn forward_with<B: Forwardable>(
        &mut self,
        resp: Response<B>,
        outcome: Outcome,
        details: &[(&str, String)],
    ) -> Response<ProxyBody> {
        let said = self.with_retries(details);
        let rec = self.take_record();
        let (mut parts, body, rec) = forwarded_head(rec, resp, outcome, &said);
        let body = self.decoded(&mut parts, body);
        let idle = Some(self.shared.cfg.upstream.idle_timeout);
        AuditedBody::new(body, rec, self.shared.audit.clone(), idle).respond(parts)
    }

    /// Like [`Exchange::forward`], keeping a copy of the body for the
    /// store. The copy is written once the client has had the whole body,
    /// and the audit line waits for that write to say whether it was
    /// `stored`.
    pub(super) fn forward_and_store<B: Forwardable>(
        &mut self,
        resp: Response<B>,
        meta: conditional::CacheEntryMeta,
    ) -> Response<ProxyBody> {
        let said = self.with_retries(&[]);
        let rec = self.take_record();
        let (mut parts, body, rec) = forwarded_head(rec, resp, Outcome::Fetched, &said);
        // The store keeps what the origin sent; the client may get it decoded.
        let (tee, copy) = Tee::new(body, self.shared.cache.params().max_body);
        let body = self.decoded(&mut parts, boxed(tee));
        let shared = &self.shared;
        let idle = Some(shared.cfg.upstream.idle_timeout);
        AuditedBody::new(body, rec, shared.audit.clone(), idle)
            .on_finish(shared.cache.store_when_done(meta, copy))
            .respond(parts)
    }

    /// Answers with a stored page: after a 304 to our validators
    /// (`revalidated`), or fresh without asking the origin (`serve_fresh`,
    /// audit `cache: "hit"`).
    pub(super) fn stored_answer(&mut self, page: StoredPage) -> Response<ProxyBody> {
        let StoredPage {
            status,
            mut headers,
            mut body,
            entry,
        } = page;
        let meta = entry.as_ref().map(|e| &e.meta);
        if let Err(stop) = self.stored_preferences(status, &mut headers, &body, meta) {
            return self.stopped(stop);
        }
        let coding = encoding::to_decode(status.as_u16(), &headers);
        if let Some(coding) = coding.filter(|_| self.decode_for_client) {
            // A stored body that does not decode goes as it was stored.
            if let Ok(plain) = decode_all(coding, &body) {
                let saved = plain.len().saturating_sub(body.len()) as u64;
                self.shared
                    .compression_saved
                    .fetch_add(saved, Ordering::Relaxed);
                encoding::decoded_head(&mut headers);
                body = plain;
            }
        }
        let mut rec = self.take_record();
        let outcome = *rec.outcome.get_or_insert(Outcome::Fetched);
        let waited_ms = rec.waited_ms.unwrap_or(0);
        let details = if outcome == Outcome::Fetched {
            self.with_retries(&[("cache", CacheOutcome::Hit.as_str().to_string())])
        } else {
            self.with_retries(&[])
        };
        strip_hop_by_hop(&mut headers);
        headers.insert(DECISION, decision_waited(outcome, waited_ms, &details));
        headers.insert(ID, id_value(&rec.id));
        rec.status = Some(status.as_u16());
        rec.saved_bytes = Some(body.len() as u64);
        let audit = self.shared.audit.clone();
        let (mut parts, ()) = Response::new(()).into_parts();
        parts.status = status;
        parts.headers = headers;
        AuditedBody::new(full(body), rec, audit, None).respond(parts)
    }
}

impl Exchange {
    /// The client's body: decoded when we asked for compression on its
    /// behalf and the origin used a coding we asked for.
    fn decoded(&self, parts: &mut http::response::Parts, body: ProxyBody) -> ProxyBody {
        let coding = encoding::to_decode(parts.status.as_u16(), &parts.headers);
        match coding.filter(|_| self.decode_for_client) {
            // A HEAD's answer: the head of what a GET would get, no body.
            Some(_) if body.is_end_stream() => {
                encoding::decoded_head(&mut parts.headers);
                body
            }
            Some(coding) => {
                encoding::decoded_head(&mut parts.headers);
                decoded(body, coding, self.shared.compression_saved.clone())
            }
            None => body,
        }
    }
}

/// A body an origin's response may come with: hyper's, or one read whole.
pub(super) trait Forwardable:
    http_body::Body<Data = bytes::Bytes, Error: Into<crate::body::BoxError>>
    + Send
    + Sync
    + Unpin
    + 'static
{
}

impl<B> Forwardable for B where
    B: http_body::Body<Data = bytes::Bytes, Error: Into<crate::body::BoxError>>
        + Send
        + Sync
        + Unpin
        + 'static
{
}

/// The head of an origin's response as the client gets it; its body marks
/// the upstream connection idle once read to the end.
fn forwarded_head<B: Forwardable>(
    mut rec: Box<AuditRecord>,
    resp: Response<B>,
    outcome: Outcome,
    details: &[(&str, String)],
) -> (http::response::Parts, ProxyBody, Box<AuditRecord>) {
    let waited_ms = rec.waited_ms.unwrap_or(0);
    let conn = ConnHandle::of(&resp);
    let (mut parts, body) = resp.into_parts();
    let body = boxed(ReleaseOnEnd::new(body, conn));
    // The client is answered in its own protocol, not the origin's (RFC
    // 9110 §6.2): an HTTP/1.0 origin's version would make hyper close a
    // kept-alive HTTP/1.1 client connection after every answer.
    parts.version = Version::default();
    strip_hop_by_hop(&mut parts.headers);
    parts
        .headers
        .insert(DECISION, decision_waited(outcome, waited_ms, details));
    parts.headers.insert(ID, id_value(&rec.id));
    rec.decided(outcome, parts.status.as_u16());
    (parts, body, rec)
}

/// A walk that never reached its answer: hyper dropped the request's future
/// because the client closed its connection or reset its stream. The origin
/// may have had the request, so it is on the record all the same, with
/// where it was and what had moved. Written as the exchange is let go, when
/// the budget's permit and the origin's response it held go too.
impl Drop for Exchange {
    fn drop(&mut self) {
        if self.at == Stage::Answered {
            return;
        }
        let mut rec = std::mem::take(&mut self.rec);
        failure::client_gone(self.at == Stage::AtOrigin).record(&mut rec);
        rec.received = Some(self.received.get());
        self.shared.audit.send(rec);
    }
}
