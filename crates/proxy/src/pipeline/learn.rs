//! Step 6, learn: what the origin's answer teaches the budget and the store,
//! and what the client gets from it. Step 7, audit: a forwarded answer's
//! line is written when its body has been passed on.

use http::header::RETRY_AFTER;
use http::request::Parts;
use http::{HeaderValue, Response, StatusCode};
use hyper::body::Incoming;
use mannerly_policy::answer::{self, ForBudget, Reading, Route, Sent, Then, Unmatched};
use mannerly_policy::budget::{HostParams, Reaction, Refusal, Throttle};
use mannerly_policy::conditional::{self, CacheOutcome, WriteBack};
use mannerly_policy::identity::{AskedSignature, Challenge};
use mannerly_policy::Outcome;

use super::{CacheStep, Exchange, Learned, Step, StoredPage};
use crate::answer::failure;
use crate::body::ProxyBody;
use crate::error::Source;
use crate::hosts::budget::Permit;

impl Exchange {
    /// The budget learns from every answer; a throttle is waited out and
    /// sent again when it may be; a 304 to our validators is the stored
    /// page; any other answer may become the stored page. What the answer
    /// means is `mannerly_policy::answer::read`'s; this step acts on it.
    pub(super) async fn learn(
        &mut self,
        parts: &Parts,
        cache: &mut CacheStep,
        permit: Option<Permit>,
        resp: Response<Incoming>,
        resendable: bool,
    ) -> Step<Learned> {
        let sent = Sent {
            target_status: self.rec.target_status,
            resendable,
            paid_again: self.paid_again,
            revalidating: cache.validators.is_some(),
            signing: self.shared.identity.is_some(),
            signed_as_asked: self.asked.is_some(),
        };
        let wall = self.wall_at(self.answered);
        let Reading { budget, route } = answer::read(resp.status(), resp.headers(), &sent, wall);
        let status = budget.status;
        let reaction = self.hear(permit, budget).await;
        self.invalidate(parts, status, &resp).await;
        self.account(&resp).await;
        let learned = match route {
            Route::PaymentFailed { code, price } => {
                self.rec.cache(cache.outcome);
                return Ok(Learned::Answer(self.crawler_failed(resp, code, price)));
            }
            Route::PaymentRequired { may_pay } => {
                self.rec.cache(cache.outcome);
                // Boxed: the rare 402's future would otherwise size (and be
                // copied with) every response's step.
                return Box::pin(self.payment_required(resp, may_pay)).await;
            }
            Route::Learn(learned) => learned,
        };
        self.challenged(learned.challenge);
        match reaction {
            Some(Reaction::Throttled(t)) => {
                // The pause is on disk before it counts: before the 429 is
                // answered or the request waits to be sent again, so a
                // `kill -9` the moment after still finds the host paused.
                Box::pin(self.shared.save_budgets_now()).await;
                let veto = learned.throttle_veto;
                Ok(self.throttled(parts, resp, &t, cache.outcome, veto))
            }
            _ => self.learn_page(parts, cache, resp, learned.then).await,
        }
    }

    /// The host's budget hears the answer, when the request held its turn;
    /// the line says what it made of it.
    async fn hear(&mut self, permit: Option<Permit>, told: ForBudget) -> Option<Reaction> {
        let reaction = match permit {
            Some(p) => {
                let (retry_after, ttfb) = (told.retry_after.as_deref(), self.rec.upstream_ms);
                let announced = told.announced.as_ref();
                Some(p.respond(told.status, retry_after, announced, ttfb).await)
            }
            None => None,
        };
        self.rec.announced = told.announced;
        if let Some(r) = &reaction {
            self.rec.budget(r);
            let host = self.shared.budgets.view(&self.target.host);
            self.rec.baseline_ms = host.and_then(|v| v.latency_baseline_ms);
        }
        reaction
    }

    /// What an origin's `Accept-Signature` asked, on the line; a request
    /// answered so is signed as asked from its next send on.
    fn challenged(&mut self, found: Option<Challenge>) {
        match found {
            Some(Challenge::Resend(asked)) => {
                self.rec.signature_asked = Some(asked_text(&asked));
                self.asked = Some(asked);
            }
            Some(Challenge::AskedAgain) => {
                self.rec.signature_not_resent = Some(answer::ASKED_AGAIN.into());
            }
            Some(Challenge::PassOn(why)) => self.rec.signature_not_resent = Some(why),
            None => {}
        }
    }

    /// An unsafe method's success makes stale what is stored for its target
    /// (and its `Location` / `Content-Location` on the same origin).
    async fn invalidate(&mut self, parts: &Parts, status: u16, resp: &Response<Incoming>) {
        let status = StatusCode::from_u16(status).unwrap_or(resp.status());
        let cache = &self.shared.cache;
        let keys = conditional::invalidated_by(
            parts,
            &self.rec.url,
            status,
            resp.headers(),
            cache.params(),
        );
        if !keys.is_empty() {
            Box::pin(cache.remove_now(keys)).await;
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
        then: Then,
    ) -> Step<Learned> {
        let own = match then {
            Then::SignAsAsked => return Ok(Learned::SignAsAsked),
            Then::Fail(status, why) => return Err(failure::origin(status, why)),
            Then::Revalidated { unmatched } => {
                return self.not_modified(parts, cache, resp, unmatched)
            }
            Then::Unchanged => None,
            Then::Page { targets_page } => Some(targets_page),
        };
        let resp = self.preferences(resp).await?;
        self.rec.cache(cache.outcome);
        let Some(own) = own else {
            // The client's own validators: its 304 goes back as is.
            return Ok(Learned::Answer(self.forward(resp, Outcome::Unchanged)));
        };
        let shared = self.shared.clone();
        let immediate = self.rec.prefs.as_ref().is_some_and(|p| p.forbids_storing());
        let keep = answer::keep(own, immediate, cache.had_entry);
        if let Some(key) = cache.key.clone().filter(|_| keep.drop_stored) {
            shared.cache.remove_later(key);
        }
        let Some(key) = cache.key.clone().filter(|_| keep.store) else {
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
        unmatched: Unmatched,
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
                    entry: Some(stored),
                };
                Ok(Learned::Answer(self.stored_answer(page)))
            }
            _ => match unmatched {
                Unmatched::Fail(status, why) => Err(failure::origin(status, why)),
                Unmatched::Refetch => {
                    if let Some(key) = cache.key.clone() {
                        shared.cache.remove_later(key);
                    }
                    cache.had_entry = false;
                    Ok(Learned::RefetchWithoutValidators)
                }
            },
        }
    }
}

/// The audit line's `signature_asked`: the components asked, and `nonce`.
fn asked_text(asked: &AskedSignature) -> String {
    let mut parts = asked.components.clone();
    if asked.nonce.is_some() {
        parts.push("nonce".into());
    }
    parts.join(" ")
}
