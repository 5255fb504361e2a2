//! Sites that charge. Before the send: a standing Pay Per Crawl offer
//! (`crawler-max-price`) for a host the operator allows to be paid, held in
//! the ledger, or the request refused when no limit covers it. After it:
//! the charge settled (`crawler-charged`), a `crawler-error` answered
//! without sending again, and a 402 either paid within limits (sent once
//! more with `crawler-exact-price`, or an x402 payment from the operator's
//! signer) or passed on with its price. The rules are
//! `mannerly_policy::payment`; the ledger and signer are `crate::payments`.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use mannerly_policy::payment::{self, Asked, Money, Offer, Settled};
use mannerly_policy::Outcome;

use super::{CacheStep, Exchange, Learned, Step};
use crate::answer::{header_text, Stop};
use crate::body::ProxyBody;
use crate::error::Source;
use crate::payments::{Held, Refused};
use crate::upstream::conns::{ConnHandle, ReleaseOnEnd};

/// An x402 v1 price is in the body; a 402 body larger than this is not read
/// for one (it is passed on as it comes).
const PRICE_BODY_MAX: usize = 64 * 1024;

/// Fields a client may not send: a price or payment the proxy did not hold
/// in its ledger would be spent without being counted.
const PAYING_FIELDS: [HeaderName; 4] = [
    HeaderName::from_static(payment::CRAWLER_MAX_PRICE),
    HeaderName::from_static(payment::CRAWLER_EXACT_PRICE),
    HeaderName::from_static(payment::PAYMENT_SIGNATURE),
    HeaderName::from_static(payment::X_PAYMENT),
];

/// A request on its way to be paid for.
pub(super) struct Paying {
    held: Held,
    /// The field that carries the offer or the payment.
    field: HeaderName,
    value: HeaderValue,
    scheme: Scheme,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Scheme {
    PayPerCrawl,
    X402,
}

impl Paying {
    /// The request is on its way to the site: its hold now outlives an
    /// abandoning client.
    pub(super) fn sent(&mut self) {
        self.held.sent();
    }

    /// The Pay Per Crawl price field, which the Web Bot Auth signature
    /// must cover.
    pub(super) fn signed_field(&self) -> Option<&str> {
        (self.scheme == Scheme::PayPerCrawl).then(|| self.field.as_str())
    }
}

/// Takes the client's paying fields off, and puts ours on.
pub(super) fn put_offer(headers: &mut HeaderMap, paying: Option<&Paying>) {
    for name in PAYING_FIELDS {
        headers.remove(name);
    }
    if let Some(p) = paying {
        headers.insert(p.field.clone(), p.value.clone());
    }
}

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
        let Some(max) = payments.params.standing_offer(&self.target.host).cloned() else {
            return Ok(());
        };
        // Pay Per Crawl never charges robots.txt.
        if mannerly_policy::url::is_robots_txt(&self.path) {
            return Ok(());
        }
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
            Err(_) if cache.validators.is_some() => Ok(()),
            Err(r) => Err(self.refused(&r, &max.to_string())),
        }
    }

    /// After the send: the hold ends with what the site charged (or
    /// nothing), and the site's `crawler-error`, if any, is returned.
    pub(super) async fn account(&mut self, resp: &Response<Incoming>) -> Option<String> {
        let headers = resp.headers();
        let error = payment::crawler_error(headers);
        let Some(p) = self.paying.take() else {
            return error;
        };
        let charged = match p.scheme {
            Scheme::PayPerCrawl => payment::charged(headers),
            Scheme::X402 if resp.status().is_success() => Some(Ok(p.held.amount.clone())),
            Scheme::X402 => None,
        };
        if p.scheme == Scheme::X402 && resp.status().is_success() {
            self.rec.pay_tx = payment::x402_transaction(headers);
        }
        let settled = match charged {
            Some(Ok(m)) => {
                self.rec.charged = Some(m.to_string());
                Some(m)
            }
            Some(Err(why)) => {
                // Charged, but not in words we can add up: the most that
                // was offered is counted, so the limit stays on the safe side.
                let raw = headers.get(payment::CRAWLER_CHARGED);
                self.rec.charged = raw.map(|v| String::from_utf8_lossy(v.as_bytes()).into());
                self.rec.pay_error = Some(why);
                Some(p.held.amount.clone())
            }
            None => None,
        };
        let held = p.held.amount.clone();
        match p.held.settle(settled).await {
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
        error
    }

    /// A site's `crawler-error` (`PaymentFailed`, `InvalidCrawlerMaxPrice`,
    /// …): passed on as it came, never sent again.
    pub(super) fn crawler_failed(
        &mut self,
        resp: Response<Incoming>,
        code: String,
    ) -> Response<ProxyBody> {
        if let Some(price) = resp.headers().get("crawler-price") {
            self.rec.price = Some(String::from_utf8_lossy(price.as_bytes()).into());
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
        if !matches!(asked, Asked::Unpriced(_)) || !small(&resp) {
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
        self.rec.price = Some(asked.to_string());
        self.rec.pay_scheme = Some(asked.scheme());
        let payments = self.shared.payments.clone();
        let host = self.target.host.clone();
        let pays = may_pay && payments.params.may_pay(&host);
        match &asked {
            Asked::PayPerCrawl(price) if pays && payments.params.offer == Offer::ExactPrice => {
                let held = payments
                    .hold(&host, price)
                    .await
                    .map_err(|r| self.refused(&r, &price.to_string()))?;
                self.pay_with(
                    held,
                    payment::CRAWLER_EXACT_PRICE,
                    header_text(&price.to_string()),
                    Scheme::PayPerCrawl,
                );
                return Ok(Learned::PayAndRetry);
            }
            Asked::X402 {
                version,
                accepts,
                resource,
            } if pays => {
                let Some(signer) = payments.signer.as_ref() else {
                    return self.pass(resp, &asked);
                };
                let price_text = asked.to_string();
                let (r, money) = payment::x402_choice(&payments.params, accepts)
                    .map_err(|o| self.refused(&Refused::Over(o), &price_text))?;
                let held = payments
                    .hold(&host, &money)
                    .await
                    .map_err(|r| self.refused(&r, &price_text))?;
                let input = payment::x402_signer_input(*version, resource, r);
                match signer.sign(&input).await {
                    Ok(value) => {
                        let field = payment::x402_payment_header(*version);
                        self.pay_with(held, field, value, Scheme::X402);
                        return Ok(Learned::PayAndRetry);
                    }
                    Err(why) => {
                        self.rec.pay_error = Some(why.clone());
                        let stop = Stop::new(Outcome::PaymentFailed, Source::Internal, why)
                            .detail("price", price_text);
                        return Err(stop);
                    }
                }
            }
            _ => {}
        }
        self.pass(resp, &asked)
    }

    /// The 402 passed on unpaid, with what it asked.
    fn pass<B: super::answers::Forwardable>(
        &mut self,
        resp: Response<B>,
        asked: &Asked,
    ) -> Step<Learned> {
        let mut details = vec![
            ("price", asked.to_string()),
            ("scheme", asked.scheme().to_string()),
        ];
        if let Asked::X402 { accepts, .. } = asked {
            if let Some(r) = accepts.first() {
                details.push(("amount", r.amount.clone()));
                details.push(("asset", r.asset.clone()));
                details.push(("network", r.network.clone()));
                details.push(("pay_to", r.pay_to.clone()));
            }
        }
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
        let source = match r {
            Refused::Over(_) => Source::Policy,
            Refused::Ledger(_) => Source::Internal,
        };
        Stop::new(Outcome::PaymentRefused, source, r.to_string())
            .detail("limit", r.limit())
            .detail("price", price)
    }

    /// A stored page that was bought: the client gets it without the
    /// `crawler-charged` of its purchase (nothing was charged this time),
    /// and the line says what paying again would have cost.
    pub(super) fn saved_charge(&mut self, headers: &mut HeaderMap) {
        if let Some(v) = headers.remove(payment::CRAWLER_CHARGED) {
            let text = String::from_utf8_lossy(v.as_bytes()).into_owned();
            self.rec.saved_charge = Some(Money::parse(&text).map_or(text, |m| m.to_string()));
        }
    }
}

/// Whether the 402's body is known to be small enough to read for a price.
fn small(resp: &Response<Incoming>) -> bool {
    http_body::Body::size_hint(resp.body())
        .upper()
        .is_some_and(|n| n <= PRICE_BODY_MAX as u64)
}
