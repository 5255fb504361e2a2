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
use http::HeaderMap;

mod money;

pub use money::{Money, MoneyError};

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
        })
        .collect();
    Ok(Asked::X402 {
        version: u32::try_from(version).unwrap_or(u32::MAX),
        accepts,
    })
}

#[cfg(test)]
mod tests;
