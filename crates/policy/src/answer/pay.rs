//! Paying, as decisions: the standing offer a request carries, what a 402
//! leads to, and what a site's charge counts for in the ledger. The ledger
//! hold, the signer and the send are the proxy's; the prices and limits
//! are [`crate::payment`]'s.

use http::{HeaderMap, HeaderName, StatusCode};

use crate::payment::{
    self, Asked, Money, Offer, Over, PaymentParams, CRAWLER_CHARGED, CRAWLER_EXACT_PRICE,
    CRAWLER_MAX_PRICE, PAYMENT_SIGNATURE, X_PAYMENT,
};

/// An x402 v1 price is in the body; a 402 body larger than this is not read
/// for one (it is passed on as it comes).
pub const PRICE_BODY_MAX: usize = 64 * 1024;

/// Fields a client may not send: a price or payment the proxy did not hold
/// in its ledger would be spent without being counted.
const PAYING_FIELDS: [HeaderName; 4] = [
    HeaderName::from_static(CRAWLER_MAX_PRICE),
    HeaderName::from_static(CRAWLER_EXACT_PRICE),
    HeaderName::from_static(PAYMENT_SIGNATURE),
    HeaderName::from_static(X_PAYMENT),
];

/// Takes a client's price and payment fields off its request: only what
/// the proxy holds in its ledger is offered or paid.
pub fn strip_paying_fields(headers: &mut HeaderMap) {
    // Almost no request carries one: comparing the few names it has is
    // cheaper than four removals, each hashing its name (~600
    // instructions a request).
    if !headers.keys().any(|n| PAYING_FIELDS.contains(n)) {
        return;
    }
    for name in PAYING_FIELDS {
        headers.remove(name);
    }
}

/// A stored page that was bought, served again: its `crawler-charged`
/// comes off (nothing was charged this time), and what paying again would
/// have cost is returned for the line, as money when it reads as money.
pub fn saved_charge(headers: &mut HeaderMap) -> Option<String> {
    let v = headers.remove(CRAWLER_CHARGED)?;
    let text = String::from_utf8_lossy(v.as_bytes()).into_owned();
    Some(Money::parse(&text).map_or(text, |m| m.to_string()))
}

/// How a request is paid for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// Cloudflare's Pay Per Crawl: a price field on the request, the charge
    /// in `crawler-charged`.
    PayPerCrawl,
    /// x402: a signed payment, settled by the site's success.
    X402,
}

/// The Pay Per Crawl offer a request to `host` for `path` carries up front
/// (`crawler-max-price`), when the operator pays the host so; robots.txt
/// is never charged, so never offered a price.
pub fn standing_offer<'p>(params: &'p PaymentParams, host: &str, path: &str) -> Option<&'p Money> {
    let max = params.standing_offer(host)?;
    (!crate::url::is_robots_txt(path)).then_some(max)
}

/// What a request whose standing offer the ledger cannot hold does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unheld {
    /// Sent without the offer.
    SendWithout,
    /// Refused unsent, with why the hold failed.
    Refuse,
}

/// A standing offer that cannot be held: a revalidation goes without it,
/// since a 304 costs nothing; anything else is refused unsent.
pub fn unheld(revalidating: bool) -> Unheld {
    if revalidating {
        Unheld::SendWithout
    } else {
        Unheld::Refuse
    }
}

/// Whether a 402's body is read for its price: its head names none, and
/// the body is known (`upper`, the body's size hint) to be no larger than
/// [`PRICE_BODY_MAX`].
pub fn price_in_body(asked: &Asked, upper: Option<u64>) -> bool {
    matches!(asked, Asked::Unpriced(_)) && upper.is_some_and(|n| n <= PRICE_BODY_MAX as u64)
}

/// What to do with a 402.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pay {
    /// Pass it on, unpaid, with its price.
    Pass,
    /// Hold this price and send once more with `crawler-exact-price`.
    Exact(Money),
    /// Hold `money`, have the operator's signer sign `input`, and send
    /// once more with the payment in `field`.
    X402 {
        /// What the requirement chosen costs, in the limits' currency.
        money: Money,
        /// `PAYMENT-SIGNATURE` (v2) or `X-PAYMENT` (v1).
        field: &'static str,
        /// What the signer gets on stdin.
        input: String,
    },
    /// Refuse: no requirement the limits cover (answered 402 by the proxy).
    Refuse(Over),
}

/// What a 402 that `asked` so leads to, for a request to `host` that may
/// be paid for once more (`may_pay`, [`super::Route::PaymentRequired`]),
/// with or without an x402 signer (`can_sign`). Nothing is paid to a host
/// the operator does not pay; Pay Per Crawl's price is paid only when
/// `payment.offer = "exact_price"` (a standing offer was already refused
/// otherwise); x402 is paid only with a signer, the first requirement the
/// limits price.
pub fn plan(
    params: &PaymentParams,
    host: &str,
    asked: &Asked,
    may_pay: bool,
    can_sign: bool,
) -> Pay {
    if !(may_pay && params.may_pay(host)) {
        return Pay::Pass;
    }
    match asked {
        Asked::PayPerCrawl(price) if params.offer == Offer::ExactPrice => Pay::Exact(price.clone()),
        Asked::X402 {
            version,
            accepts,
            resource,
        } if can_sign => match payment::x402_choice(params, accepts) {
            Ok((r, money)) => Pay::X402 {
                money,
                field: payment::x402_payment_header(*version),
                input: payment::x402_signer_input(*version, resource, r),
            },
            Err(over) => Pay::Refuse(over),
        },
        _ => Pay::Pass,
    }
}

/// The decision header's details of a 402 passed on: its price and scheme,
/// and for x402 the first requirement's terms.
pub fn passed(asked: &Asked) -> Vec<(&'static str, String)> {
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
    details
}

/// What an answer to a paid request counts for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Charge {
    /// What the ledger settles the hold with; `None`: nothing was charged.
    pub settled: Option<Money>,
    /// The audit line's `charged`, when something was.
    pub charged: Option<String>,
    /// The audit line's `pay_error`: a charge that cannot be added up.
    pub error: Option<String>,
    /// The audit line's `pay_tx`: an x402 settlement's transaction.
    pub transaction: Option<String>,
}

/// What the answer with `status` and `headers` to a request paid by
/// `scheme`, with `held` held for it, counts for. Pay Per Crawl counts its
/// `crawler-charged`; a charge not in words that add up counts the most
/// that was offered, so the limits stay on the safe side. x402 counts what
/// was paid when the site answers with success, nothing otherwise.
pub fn charge(scheme: Scheme, status: StatusCode, headers: &HeaderMap, held: &Money) -> Charge {
    match scheme {
        Scheme::PayPerCrawl => match payment::charged(headers) {
            Some(Ok(m)) => Charge {
                charged: Some(m.to_string()),
                settled: Some(m),
                ..Charge::default()
            },
            Some(Err(why)) => Charge {
                settled: Some(held.clone()),
                charged: headers
                    .get(CRAWLER_CHARGED)
                    .map(|v| String::from_utf8_lossy(v.as_bytes()).into()),
                error: Some(why),
                transaction: None,
            },
            None => Charge::default(),
        },
        Scheme::X402 if status.is_success() => Charge {
            settled: Some(held.clone()),
            charged: Some(held.to_string()),
            error: None,
            transaction: payment::x402_transaction(headers),
        },
        Scheme::X402 => Charge::default(),
    }
}
