//! Step 6, learn: what the origin's answer teaches the budget and the store,
//! and what the client gets from it. Step 7, audit: a forwarded answer's
//! line is written when its body has been passed on.

use http::header::RETRY_AFTER;
use http::request::Parts;
use http::{HeaderValue, Response, StatusCode};
use hyper::body::Incoming;
use mannerly_policy::budget::{Announced, HostParams, Reaction, Refusal, Throttle};
use mannerly_policy::conditional::{self, CacheOutcome, WriteBack};
use mannerly_policy::identity::{self, AskedSignature, Challenge};
use mannerly_policy::Outcome;

use super::{CacheStep, Exchange, Learned, Step, StoredPage};
use crate::answer::failure;
use crate::body::ProxyBody;
use crate::error::Source;
use crate::hosts::budget::Permit;

impl Exchange {
    /// The budget learns from every answer; a throttle is waited out and
    /// sent again when it may be; a 304 to our validators is the stored
    /// page; any other answer may become the stored page.
    pub(super) async fn learn(
        &mut self,
        parts: &Parts,
        cache: &mut CacheStep,
        permit: Option<Permit>,
        resp: Response<Incoming>,
        resendable: bool,
    ) -> Step<Learned> {
        let retry_after = resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok());
        let announced = Announced::from_headers(resp.headers(), self.shared.clock.wall());
        let reaction = match permit {
            // Behind a provider, the target's status as it carried it.
            Some(p) => {
                let status = self.rec.target_status.unwrap_or(resp.status().as_u16());
                let ttfb = self.rec.upstream_ms;
                Some(
                    p.respond(status, retry_after, announced.as_ref(), ttfb)
                        .await,
                )
            }
            None => None,
        };
        self.rec.announced = announced;
        if let Some(r) = &reaction {
            self.rec.budget(r);
            let host = self.shared.budgets.view(&self.target.host);
            self.rec.baseline_ms = host.and_then(|v| v.latency_baseline_ms);
        }
        self.invalidate(parts, &resp).await;
        if let Some(code) = self.account(&resp).await {
            self.rec.cache(cache.outcome);
            return Ok(Learned::Answer(self.crawler_failed(resp, code)));
        }
        if resp.status() == StatusCode::PAYMENT_REQUIRED {
            self.rec.cache(cache.outcome);
            let may_pay = resendable && !self.paid_again;
            // Boxed: the rare 402's future would otherwise size (and be
            // copied with) every response's step.
            return Box::pin(self.payment_required(resp, may_pay)).await;
        }
        let challenge = self.challenge(&resp, resendable);
        match reaction {
            Some(Reaction::Throttled(t)) => {
                // The pause is on disk before it counts: before the 429 is
                // answered or the request waits to be sent again, so a
                // `kill -9` the moment after still finds the host paused.
                self.shared.save_budgets_now().await;
                let veto = match challenge {
                    Some(Challenge::AskedAgain) => Some(ASKED_AGAIN),
                    _ if !resendable => Some("the request's body cannot be sent again"),
                    _ => None,
                };
                Ok(self.throttled(parts, resp, &t, cache.outcome, veto))
            }
            _ if matches!(challenge, Some(Challenge::Resend(_))) => Ok(Learned::SignAsAsked),
            _ => self.learn_page(parts, cache, resp, resendable).await,
        }
    }

    /// An origin's `Accept-Signature` with a 401, 403 or 429, when we sign:
    /// the line says what it asked and whether it is answered; a request
    /// answered so is signed as asked from its next send on.
    fn challenge(&mut self, resp: &Response<Incoming>, replayable: bool) -> Option<Challenge> {
        self.shared.identity.as_ref()?;
        let field = resp.headers().get("accept-signature").map(|v| v.as_bytes());
        let status = resp.status().as_u16();
        let found = identity::challenge(status, field, replayable, self.asked.is_some())?;
        match &found {
            Challenge::Resend(asked) => {
                self.rec.signature_asked = Some(asked_text(asked));
                self.asked = Some(asked.clone());
            }
            Challenge::AskedAgain => self.rec.signature_not_resent = Some(ASKED_AGAIN.into()),
            Challenge::PassOn(why) => self.rec.signature_not_resent = Some(why.clone()),
        }
        Some(found)
    }

    /// An unsafe method's success makes stale what is stored for its target
    /// (and its `Location` / `Content-Location` on the same origin).
    async fn invalidate(&mut self, parts: &Parts, resp: &Response<Incoming>) {
        let status = self
            .rec
            .target_status
            .and_then(|s| StatusCode::from_u16(s).ok())
            .unwrap_or(resp.status());
        let cache = &self.shared.cache;
        let keys =
            conditional::invalidated_by(parts, &self.url, status, resp.headers(), cache.params());
        if !keys.is_empty() {
            cache.remove_now(keys).await;
        }
    }

    /// A throttled answer: the stored page is left alone (a throttle says
    /// nothing about it). Sent again after the pause when the method, the
    /// body and the hold allow, the throttled attempt's line naming the
    /// retry's and the other way round; else the client gets the origin's
    /// answer, with the breaker's time as Retry-After when this throttle
    /// opened it.
    fn throttled(
        &mut self,
        parts: &Parts,
        resp: Response<Incoming>,
        t: &Throttle,
        cache: CacheOutcome,
        veto: Option<&'static str>,
    ) -> Learned {
        self.rec.cache(cache);
        self.rec.source = Some(Source::Upstream.as_str());
        let origin = self.target.url(None);
        let group = self.shared.budgets.group(&self.target.host);
        self.shared.throttled_by.note(&group.key, origin);
        self.retry_after = t.retry_after_raw.clone();
        let hold_left = self
            .deadline
            .saturating_duration_since(self.shared.clock.now());
        let params = self.shared.budgets.params(&self.target.host);
        let pause = t.pause.as_secs_f64();
        let not_again =
            veto.or_else(|| params.no_retry(&parts.method, self.retries, t.pause, hold_left));
        if let Some(why) = not_again {
            if self.rec.signature_asked.is_some() && self.rec.signature_not_resent.is_none() {
                // Asked with this throttle, but it is not sent again.
                self.rec.signature_not_resent =
                    Some(format!("Accept-Signature not answered: {why}"));
            }
            return Learned::Answer(if t.breaker_opened {
                self.breaker_opened(resp, t, &params)
            } else {
                self.rec.reason = Some(format!(
                    "origin throttled; host paused {pause:.1} s; not sent again: {why}"
                ));
                self.forward(resp, Outcome::Throttled)
            });
        }
        self.retries += 1;
        let next = self.shared.next_id();
        let mut line = self.rec.clone();
        line.attempt = Some(self.retries);
        line.retried_by = Some(next.clone());
        line.reason = Some(format!(
            "origin throttled; host paused {pause:.1} s, request sent again after the pause (attempt {})",
            self.retries + 1
        ));
        line.decided(Outcome::Throttled, resp.status().as_u16());
        self.shared.audit.send(line);
        // The next attempt's line starts afresh but for what names it.
        self.rec.retry_of = Some(std::mem::replace(&mut self.rec.id, next));
        self.rec.attempt = Some(self.retries + 1);
        (self.rec.sent, self.rec.source) = (None, None);
        (self.rec.retry_after, self.rec.pause_s) = (None, None);
        Learned::RetryAfterThrottle
    }

    /// The throttle that opened the breaker: the origin's 429 goes on, but
    /// what it tells the client is the proxy's, the breaker's remaining
    /// time, since no request reaches the host before that.
    fn breaker_opened(
        &mut self,
        mut resp: Response<Incoming>,
        t: &Throttle,
        params: &HostParams,
    ) -> Response<ProxyBody> {
        let refusal = Refusal::BreakerOpen {
            retry_after: t.pause,
        };
        let secs = refusal.retry_after_secs();
        self.rec.reason = Some(format!(
            "origin throttled; {} throttles within {} s opened the breaker: the host is left alone for {secs} s",
            params.breaker_threshold, params.breaker_window_secs
        ));
        resp.headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(secs));
        let mut said = vec![("retry_after", secs.to_string())];
        if let Some(origin) = &t.retry_after_raw {
            said.push(("origin_retry_after", origin.clone()));
        }
        self.forward_with(resp, Outcome::BreakerOpen, &said)
    }

    /// An answer that is not a throttle, and the response store.
    async fn learn_page(
        &mut self,
        parts: &Parts,
        cache: &mut CacheStep,
        resp: Response<Incoming>,
        resendable: bool,
    ) -> Step<Learned> {
        if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
            // Upgrade is a hop-by-hop field we never forward, so no 101 was
            // asked for: the origin is speaking something else.
            let why = "the origin switched protocols (101) without being asked to";
            return Err(failure::origin(502, why));
        }
        if resp.status() == StatusCode::NOT_MODIFIED && cache.validators.is_some() {
            return self.not_modified(parts, cache, resp, resendable);
        }
        let resp = self.preferences(resp).await?;
        self.rec.cache(cache.outcome);
        if resp.status() == StatusCode::NOT_MODIFIED {
            // The client's own validators: its 304 goes back as is.
            return Ok(Learned::Answer(self.forward(resp, Outcome::Unchanged)));
        }
        let own = conditional::is_targets_page(self.rec.target_status, resp.status());
        let shared = self.shared.clone();
        // A site that allows only `use=immediate` (use without storing):
        // the page is not kept, and a copy kept before is dropped.
        let immediate = self.rec.prefs.as_ref().is_some_and(|p| p.forbids_storing());
        if let Some(key) = cache.key.clone().filter(|_| immediate && cache.had_entry) {
            shared.cache.remove_later(key);
        }
        let Some(key) = cache.key.clone().filter(|_| own && !immediate) else {
            return Ok(Learned::Answer(self.forward(resp, Outcome::Fetched)));
        };
        let (head, body) = resp.into_parts();
        let verdict = conditional::storable(
            parts,
            &key,
            &head,
            shared.cache.params(),
            shared.clock.wall(),
        );
        let resp = Response::from_parts(head, body);
        Ok(Learned::Answer(match verdict {
            Ok(meta) => self.forward_and_store(resp, meta),
            Err(_) => {
                if cache.had_entry && conditional::invalidates_stored(resp.status()) {
                    shared.cache.remove_later(key);
                }
                self.forward(resp, Outcome::Fetched)
            }
        }))
    }

    /// A 304 to our validators: the stored page, its headers refreshed,
    /// written back; a 304 that is not for it sends the request once more.
    fn not_modified(
        &mut self,
        parts: &Parts,
        cache: &mut CacheStep,
        resp: Response<Incoming>,
        resendable: bool,
    ) -> Step<Learned> {
        let shared = self.shared.clone();
        let (params, now) = (shared.cache.params(), shared.clock.wall());
        let stored = cache.stored.take();
        let (head, _) = resp.into_parts();
        let merged = stored
            .as_ref()
            .map(|s| conditional::merge_not_modified(&s.meta, parts, &head, params, now));
        match (merged, stored) {
            (Some(Ok(fresh)), Some(stored)) => {
                let body = stored.body.clone();
                match fresh.write {
                    WriteBack::Unchanged => {}
                    WriteBack::Replace(meta) => shared.cache.write_back(*meta, body.clone()),
                    WriteBack::Remove(_) => shared.cache.remove_later(stored.meta.key().clone()),
                }
                self.rec.cache(CacheOutcome::Revalidated);
                self.rec.saved_bytes = Some(body.len() as u64);
                self.rec.outcome = Some(Outcome::Revalidated);
                let mut headers = fresh.headers;
                self.saved_charge(&mut headers);
                let page = StoredPage {
                    status: fresh.status,
                    headers,
                    body,
                };
                Ok(Learned::Answer(self.stored_answer(page)))
            }
            _ if !resendable => Err(failure::origin(
                502,
                "the origin's 304 does not match the stored page, and the request cannot be sent again",
            )),
            _ => {
                if let Some(key) = cache.key.clone() {
                    shared.cache.remove_later(key);
                }
                cache.had_entry = false;
                Ok(Learned::RefetchWithoutValidators)
            }
        }
    }
}

/// Why a second `Accept-Signature` is passed on.
const ASKED_AGAIN: &str = "Accept-Signature asked again after its one signed resend: passed on";

/// The audit line's `signature_asked`: the components asked, and `nonce`.
fn asked_text(asked: &AskedSignature) -> String {
    let mut parts = asked.components.clone();
    if asked.nonce.is_some() {
        parts.push("nonce".into());
    }
    parts.join(" ")
}
