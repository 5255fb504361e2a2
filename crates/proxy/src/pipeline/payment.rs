//! Sites that charge. Before the send: a standing Pay Per Crawl offer
//! (`crawler-max-price`) for a host the operator allows to be paid, held in
//! the ledger, or the request refused when no limit covers it. After it:
//! the charge settled (`crawler-charged`), a `crawler-error` answered
//! without sending again, and a 402 either paid within limits (sent once
//! more with `crawler-exact-price`, or an x402 payment from the operator's
//! signer) or passed on with its price. The rules are
//! `mannerly_policy::answer::pay` (what is offered, paid and counted) and
//! `mannerly_policy::payment` (prices and limits); the ledger and signer
//! are `crate::payments`. Here: hold, sign, send, record.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use mannerly_policy::answer::pay::{self, Pay, Scheme, Unheld, PRICE_BODY_MAX};
use mannerly_policy::payment::{self, Asked, Settled};
use mannerly_policy::Outcome;

use super::{CacheStep, Exchange, Learned, Step};
use crate::answer::{failure, header_text, Stop};
use crate::body::ProxyBody;
use crate::payments::{Held, Refused};
use crate::upstream::conns::{ConnHandle, ReleaseOnEnd};

mod paying;
pub(super) use paying::{put_offer, Paying};

impl Exchange {
    /// Before the budget's turn: a host the operator pays with a standing
    /// offer gets `crawler-max-price`, held in the ledger first; a request
    /// no limit covers is refused unsent. A revalidation is sent without
    /// an offer when none can be held: a 304 costs nothing.
    pub(super) async fn offer(&mut self, cache: &CacheStep) -> Step<()> {
        if self.paying.is_some() {
            return Ok(());
        }
        let payments = self.shared.payments.clone();
        let (host, path) = (&self.target.host, self.path());
        let Some(max) = pay::standing_offer(&payments.params, host, path).cloned() else {
            return Ok(());
        };
        // Boxed: only a host priced by a standing offer gets here, and the
        // hold's future would otherwise size every request's step.
        match Box::pin(payments.hold(&self.target.host, &max)).await {
            Ok(held) => {
                self.rec.offered = Some(max.to_string());
                self.paying = Some(Paying {
                    held,
                    field: HeaderName::from_static(payment::CRAWLER_MAX_PRICE),
                    value: header_text(&max.to_string()),
                    scheme: Scheme::PayPerCrawl,
                });
                Ok(())
            }
            Err(r) => match pay::unheld(cache.validators.is_some()) {
                Unheld::SendWithout => Ok(()),
                Unheld::Refuse => Err(self.refused(&r, &max.to_string())),
            },
        }
    }

    /// After the send: the hold ends with what the site charged (or
    /// nothing), as `pay::charge` counts it.
    pub(super) async fn account(&mut self, resp: &Response<Incoming>) {
        let Some(p) = self.paying.take() else {
            return;
        };
        let charge = pay::charge(p.scheme, resp.status(), resp.headers(), &p.held.amount);
        if charge.charged.is_some() {
            self.rec.charged = charge.charged;
        }
        if charge.error.is_some() {
            self.rec.pay_error = charge.error;
        }
        if charge.transaction.is_some() {
            self.rec.pay_tx = charge.transaction;
        }
        let settled = charge.settled;
        let held = p.held.amount.clone();
        match Box::pin(p.held.settle(settled)).await {
            Ok(Settled::Counted) => {}
            Ok(Settled::Foreign(counted)) => {
                let counted = counted.map_or_else(
                    || "its expired hold was counted".to_string(),
                    |m| format!("{m} counted in its place"),
                );
                self.rec.pay_limit = Some("currency");
                self.rec.pay_error = Some(format!(
                    "charged in another currency than the limits ({}): {counted}; the host is paid no more today",
                    held.currency()
                ));
            }
            Err(why) => self.rec.pay_error = Some(format!("{why}; paying is stopped")),
        }
    }

    /// A site's `crawler-error` (`PaymentFailed`, `InvalidCrawlerMaxPrice`,
    /// …): passed on as it came, never sent again.
    pub(super) fn crawler_failed(
        &mut self,
        resp: Response<Incoming>,
        code: String,
        price: Option<String>,
    ) -> Response<ProxyBody> {
        if price.is_some() {
            self.rec.price = price;
            self.rec.pay_scheme = Some("pay-per-crawl");
        }
        self.rec.pay_error = Some(code.clone());
        self.forward_with(resp, Outcome::PaymentFailed, &[("crawler_error", code)])
    }

    /// The client's answer to an origin's 402, or the request sent again
    /// with a payment the limits cover (once, and only if it may be sent
    /// again).
    pub(super) async fn payment_required(
        &mut self,
        resp: Response<Incoming>,
        may_pay: bool,
    ) -> Step<Learned> {
        let asked = payment::asked(resp.headers(), None);
        let upper = http_body::Body::size_hint(resp.body()).upper();
        if !pay::price_in_body(&asked, upper) {
            return self.pay_or_pass(resp, asked, may_pay).await;
        }
        // No price in the head: an x402 v1 site says it in the JSON body.
        let conn = ConnHandle::of(&resp);
        let (parts, body) = resp.into_parts();
        let idle = self.shared.cfg.upstream.idle_timeout;
        let read = Limited::new(ReleaseOnEnd::new(body, conn), PRICE_BODY_MAX).collect();
        let body = match tokio::time::timeout(idle.max(Duration::from_secs(1)), read).await {
            Ok(Ok(collected)) => collected.to_bytes(),
            // The origin broke off its own 402: what it sent of the head is
            // still the answer, with no body.
            _ => Bytes::new(),
        };
        let asked = payment::asked(&parts.headers, Some(&body));
        let resp = Response::from_parts(parts, Full::new(body));
        self.pay_or_pass(resp, asked, may_pay).await
    }

    async fn pay_or_pass<B: super::answers::Forwardable>(
        &mut self,
        resp: Response<B>,
        asked: Asked,
        may_pay: bool,
    ) -> Step<Learned> {
        let price = asked.to_string();
        self.rec.price = Some(price.clone());
        self.rec.pay_scheme = Some(asked.scheme());
        let payments = self.shared.payments.clone();
        let host = self.target.host.clone();
        let signer = payments.signer.as_ref();
        match pay::plan(&payments.params, &host, &asked, may_pay, signer.is_some()) {
            Pay::Pass => self.pass(resp, &asked),
            Pay::Refuse(over) => Err(self.refused(&Refused::Over(over), &price)),
            Pay::Exact(money) => {
                let held = payments
                    .hold(&host, &money)
                    .await
                    .map_err(|r| self.refused(&r, &price))?;
                let value = header_text(&money.to_string());
                self.pay_with(
                    held,
                    payment::CRAWLER_EXACT_PRICE,
                    value,
                    Scheme::PayPerCrawl,
                );
                Ok(Learned::PayAndRetry)
            }
            Pay::X402 {
                money,
                field,
                input,
            } => {
                let Some(signer) = signer else {
                    return self.pass(resp, &asked);
                };
                let held = payments
                    .hold(&host, &money)
                    .await
                    .map_err(|r| self.refused(&r, &price))?;
                match signer.sign(&input).await {
                    Ok(value) => {
                        self.pay_with(held, field, value, Scheme::X402);
                        Ok(Learned::PayAndRetry)
                    }
                    Err(why) => {
                        self.rec.pay_error = Some(why.clone());
                        Err(failure::payment_unsigned(why, price))
                    }
                }
            }
        }
    }

    /// The 402 passed on unpaid, with what it asked.
    fn pass<B: super::answers::Forwardable>(
        &mut self,
        resp: Response<B>,
        asked: &Asked,
    ) -> Step<Learned> {
        let details = pay::passed(asked);
        Ok(Learned::Answer(self.forward_with(
            resp,
            Outcome::PaymentRequired,
            &details,
        )))
    }

    fn pay_with(&mut self, held: Held, field: &'static str, value: HeaderValue, scheme: Scheme) {
        self.rec.offered = Some(held.amount.to_string());
        self.paid_again = true;
        self.paying = Some(Paying {
            held,
            field: HeaderName::from_static(field),
            value,
            scheme,
        });
    }

    /// A price no limit covers: answered 402 by the proxy, nothing sent.
    fn refused(&mut self, r: &Refused, price: &str) -> Stop {
        self.rec.pay_limit = Some(r.limit());
        self.rec.price = Some(price.to_string());
        failure::payment_refused(r, price)
    }

    /// A stored page that was bought: the client gets it without the
    /// `crawler-charged` of its purchase (nothing was charged this time),
    /// and the line says what paying again would have cost.
    pub(super) fn saved_charge(&mut self, headers: &mut HeaderMap) {
        if let Some(saved) = pay::saved_charge(headers) {
            self.rec.saved_charge = Some(saved);
        }
    }
}
