//! Step 6 for a site that charges: a 402 is passed on with what it asked
//! (`payment_required; price="USD 0.01"; scheme=pay-per-crawl`), recorded
//! in the audit line, and never paid or sent again. The reading of prices
//! is `mannerly_policy::payment`.

use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use mannerly_policy::payment::{self, Asked};
use mannerly_policy::Outcome;

use super::Exchange;
use crate::body::ProxyBody;
use crate::upstream::conns::{ConnHandle, ReleaseOnEnd};

/// An x402 v1 price is in the body; a 402 body larger than this is not read
/// for one (it is passed on as it comes).
const PRICE_BODY_MAX: usize = 64 * 1024;

impl Exchange {
    /// The client's answer to an origin's 402.
    pub(super) async fn payment_required(
        &mut self,
        resp: Response<Incoming>,
    ) -> Response<ProxyBody> {
        let asked = payment::asked(resp.headers(), None);
        if !matches!(asked, Asked::Unpriced(_)) || !small(&resp) {
            return self.priced(resp, &asked);
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
        self.priced(resp, &asked)
    }

    fn priced<B: super::answers::Forwardable>(
        &mut self,
        resp: Response<B>,
        asked: &Asked,
    ) -> Response<ProxyBody> {
        let price = asked.to_string();
        self.rec.price = Some(price.clone());
        self.rec.pay_scheme = Some(asked.scheme());
        let details = [("price", price), ("scheme", asked.scheme().to_string())];
        self.forward_with(resp, Outcome::PaymentRequired, &details)
    }
}

/// Whether the 402's body is known to be small enough to read for a price.
fn small(resp: &Response<Incoming>) -> bool {
    http_body::Body::size_hint(resp.body())
        .upper()
        .is_some_and(|n| n <= PRICE_BODY_MAX as u64)
}
