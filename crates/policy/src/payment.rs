//! Sites that charge: what a `402 Payment Required` asks for, read from the
//! two schemes sites use today, so that the proxy can answer the client
//! with the price and record it, and pay nothing by default.
//!
//! - **Pay Per Crawl** (Cloudflare): `crawler-price: USD 0.01` on the 402.
//! - **x402** (v2): `PAYMENT-REQUIRED`, base64 of a JSON object with
//!   `x402Version`, `resource` and `accepts[]` (`scheme`, `network`,
//!   `amount`, `asset`, `payTo`, `maxTimeoutSeconds`); v1 sent the same in
//!   the body, with `maxAmountRequired` for `amount`.
//!
//! Money is decimal text, never a float: [`Money`] keeps the digits.

use std::fmt;

use base64::Engine as _;
use http::{HeaderMap, HeaderName};

mod ledger;
mod limits;
mod money;

pub use ledger::{Hold, HostSpend, Ledger, Settled};
pub use limits::{Offer, Over, PaymentParams, X402Asset};
pub use money::{Money, MoneyError, SumError};

/// The standing offer sent up front (Pay Per Crawl).
pub const CRAWLER_MAX_PRICE: &str = "crawler-max-price";
/// The price of a 402, accepted on the request sent again (Pay Per Crawl).
pub const CRAWLER_EXACT_PRICE: &str = "crawler-exact-price";
/// What the site charged for a page (Pay Per Crawl, on the 2xx).
pub const CRAWLER_CHARGED: &str = "crawler-charged";
/// Why a priced request failed (Pay Per Crawl: `PaymentFailed`, …).
pub const CRAWLER_ERROR: &str = "crawler-error";
/// The signed payment of x402 v2.
pub const PAYMENT_SIGNATURE: &str = "payment-signature";
/// The signed payment of x402 v1.
pub const X_PAYMENT: &str = "x-payment";
/// x402's settlement receipt (v2; v1: `X-PAYMENT-RESPONSE`).
pub const PAYMENT_RESPONSE: &str = "payment-response";

/// What a 402 asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Asked {
    /// Pay Per Crawl: this price, for this request.
    PayPerCrawl(Money),
    /// x402: any one of these requirements.
    X402 {
        /// `x402Version` (1 or 2).
        version: u32,
        /// `accepts[]`, in the site's order.
        accepts: Vec<X402Requirement>,
        /// `resource` as the site sent it (v1: the first requirement's).
        resource: serde_json::Value,
    },
    /// A 402 with no price we can read; the reason says what was there.
    Unpriced(String),
}

/// One `accepts[]` entry of an x402 requirement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct X402Requirement {
    /// `scheme` (`exact`, …).
    pub scheme: String,
    /// `network` (a chain id such as `eip155:8453` or `base-sepolia`).
    pub network: String,
    /// `amount` (v1: `maxAmountRequired`), in the asset's atomic units.
    pub amount: String,
    /// `asset`: the token contract or identifier.
    pub asset: String,
    /// `payTo`: who is paid.
    pub pay_to: String,
    /// The requirement as the site sent it, handed to a payment signer.
    pub raw: serde_json::Value,
}

impl Asked {
    /// The scheme, as the audit line and the decision header name it.
    pub fn scheme(&self) -> &'static str {
        match self {
            Asked::PayPerCrawl(_) => "pay-per-crawl",
            Asked::X402 { .. } => "x402",
            Asked::Unpriced(_) => "unknown",
        }
    }
}

impl fmt::Display for Asked {
    /// The price in one line: `USD 0.01`, or the first x402 requirement.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Asked::PayPerCrawl(m) => write!(f, "{m}"),
            Asked::X402 { accepts, .. } => match accepts.first() {
                Some(r) => write!(
                    f,
                    "{} {} of {} on {} to {}{}",
                    r.scheme,
                    r.amount,
                    r.asset,
                    r.network,
                    r.pay_to,
                    match accepts.len() {
                        1 => String::new(),
                        n => format!(" (and {} more it accepts)", n - 1),
                    }
                ),
                None => write!(f, "x402 with nothing it accepts"),
            },
            Asked::Unpriced(why) => write!(f, "no price: {why}"),
        }
    }
}

/// Reads what a 402's head (and, for x402 v1, its body) asks for.
pub fn asked(headers: &HeaderMap, body: Option<&[u8]>) -> Asked {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(price) = text("crawler-price") {
        return match Money::parse(price) {
            Ok(m) => Asked::PayPerCrawl(m),
            Err(e) => Asked::Unpriced(format!("crawler-price {price:?}: {e}")),
        };
    }
    if let Some(encoded) = text("payment-required") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|e| format!("PAYMENT-REQUIRED is not base64: {e}"));
        return match decoded.and_then(|json| x402(&json)) {
            Ok(a) => a,
            Err(why) => Asked::Unpriced(why),
        };
    }
    match body.map(x402) {
        Some(Ok(a)) => a,
        Some(Err(_)) | None => {
            Asked::Unpriced("neither crawler-price nor PAYMENT-REQUIRED nor an x402 body".into())
        }
    }
}

/// An x402 requirements object (v2 header or v1 body).
fn x402(json: &[u8]) -> Result<Asked, String> {
    let v: serde_json::Value =
        serde_json::from_slice(json).map_err(|e| format!("x402 requirements are not JSON: {e}"))?;
    let version = v["x402Version"]
        .as_u64()
        .ok_or("x402 requirements without x402Version")?;
    let accepts = v["accepts"]
        .as_array()
        .ok_or("x402 requirements without accepts")?;
    let field = |r: &serde_json::Value, names: &[&str]| {
        names
            .iter()
            .find_map(|n| r[*n].as_str().map(str::to_string))
            .unwrap_or_default()
    };
    let accepts = accepts
        .iter()
        .map(|r| X402Requirement {
            scheme: field(r, &["scheme"]),
            network: field(r, &["network"]),
            amount: field(r, &["amount", "maxAmountRequired"]),
            asset: field(r, &["asset"]),
            pay_to: field(r, &["payTo"]),
            raw: r.clone(),
        })
        .collect::<Vec<_>>();
    let resource = match &v["resource"] {
        serde_json::Value::Null => accepts
            .iter()
            .map(|r| r.raw["resource"].clone())
            .find(|r| !r.is_null())
            .unwrap_or_default(),
        r => r.clone(),
    };
    Ok(Asked::X402 {
        version: u32::try_from(version).unwrap_or(u32::MAX),
        accepts,
        resource,
    })
}

/// What a site says it charged (`crawler-charged`), on any answer.
/// `Err` when the header is there but is not a price: the charge happened
/// and is recorded as text, but cannot be added up.
pub fn charged(headers: &HeaderMap) -> Option<Result<Money, String>> {
    let v = headers.get(CRAWLER_CHARGED)?;
    let text = String::from_utf8_lossy(v.as_bytes()).into_owned();
    Some(Money::parse(&text).map_err(|e| format!("crawler-charged {text:?}: {e}")))
}

/// The Pay Per Crawl error code of an answer (`crawler-error`), if any.
pub fn crawler_error(headers: &HeaderMap) -> Option<String> {
    // A name made at compile time: by `&str` it was parsed on every response.
    const NAME: HeaderName = HeaderName::from_static(CRAWLER_ERROR);
    let v = headers.get(NAME)?;
    let code = String::from_utf8_lossy(v.as_bytes()).trim().to_string();
    // A code is one token; anything else is quoted back as the site sent it.
    Some(code.chars().filter(|c| !c.is_control()).take(200).collect())
}

/// The x402 requirement to pay: the first of `accepts` in the `exact`
/// scheme whose asset the operator priced, with its amount as money.
pub fn x402_choice<'a>(
    params: &PaymentParams,
    accepts: &'a [X402Requirement],
) -> Result<(&'a X402Requirement, Money), Over> {
    let mut why = Over::NotPayable("the 402 accepts nothing".into());
    for r in accepts {
        if r.scheme != "exact" {
            why = Over::NotPayable(format!("x402 scheme {:?} is not paid", r.scheme));
            continue;
        }
        match params.x402_price(&r.network, &r.asset, &r.amount) {
            Ok(m) => return Ok((r, m)),
            Err(e) => why = e,
        }
    }
    Err(why)
}

/// What a payment signer gets on stdin for the requirement it is to pay:
/// `{"x402Version", "resource", "accepted"}`, the parts of x402's
/// `PaymentPayload` that are not the signature.
pub fn x402_signer_input(
    version: u32,
    resource: &serde_json::Value,
    r: &X402Requirement,
) -> String {
    serde_json::json!({
        "x402Version": version,
        "resource": resource,
        "accepted": r.raw,
    })
    .to_string()
}

/// The header a signed x402 payment goes in: `PAYMENT-SIGNATURE` (v2),
/// `X-PAYMENT` (v1).
pub fn x402_payment_header(version: u32) -> &'static str {
    if version >= 2 {
        PAYMENT_SIGNATURE
    } else {
        X_PAYMENT
    }
}

/// The transaction an x402 settlement receipt names (`PAYMENT-RESPONSE` or
/// v1's `X-PAYMENT-RESPONSE`: base64 JSON with `transaction`).
pub fn x402_transaction(headers: &HeaderMap) -> Option<String> {
    let v = headers
        .get(PAYMENT_RESPONSE)
        .or_else(|| headers.get("x-payment-response"))?;
    let json = base64::engine::general_purpose::STANDARD
        .decode(v.as_bytes())
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&json).ok()?;
    v["transaction"].as_str().map(str::to_string)
}

#[cfg(test)]
mod tests;
