//! A Signature Agent Card (draft-meunier-webbotauth-registry-04): what the
//! crawler declares about itself, with the rate expectations taken from the
//! budget this proxy actually enforces, so the card cannot promise less
//! than the proxy does.

use serde_json::{json, Value};

use super::jwks_url;
use crate::budget::BudgetParams;
use crate::robots::Purpose;

/// Where the card is served, beside the key directory.
pub const CARD_PATH: &str = "/.well-known/signature-agent-card";

/// The card as JSON. `agent_url` is `identity.signature_agent` (expanded as
/// [`jwks_url`] does: the card's `jwks_uri` is the `Signature-Agent` value);
/// `product_token` is the robots.txt token (`crawler.agent`; empty when the
/// proxy takes it from each client's User-Agent).
pub fn card_json(
    agent_url: &str,
    product_token: &str,
    purposes: &[Purpose],
    budget: &BudgetParams,
) -> String {
    let jwks = jwks_url(agent_url).unwrap_or_else(|_| agent_url.to_string());
    let origin = origin_of(&jwks);
    let mut wba = serde_json::Map::new();
    if !product_token.is_empty() {
        wba.insert("rfc9309-product-token".into(), json!(product_token));
        wba.insert(
            "expected-user-agent".into(),
            json!(format!("{product_token}/*")),
        );
    }
    wba.insert(
        "rfc9309-compliance".into(),
        json!([
            "User-Agent",
            "Allow",
            "Disallow",
            "Crawl-delay",
            "Content-Signal",
            "Content-Usage"
        ]),
    );
    wba.insert("trigger".into(), json!("crawler"));
    if !purposes.is_empty() {
        let p: Vec<&str> = purposes.iter().map(|p| p.as_str()).collect();
        wba.insert("purpose".into(), json!(p.join(", ")));
    }
    wba.insert(
        "rate-control".into(),
        json!("429 or 503 with Retry-After (pause, rate halved, ceiling at 80%), RateLimit/X-RateLimit headers, robots.txt Crawl-delay"),
    );
    wba.insert(
        "rate-expectation".into(),
        json!(format!(
            "max={}rps;start={}rps;burst={};concurrency={};per=host",
            budget.max_rate, budget.start_rate, budget.burst, budget.concurrency
        )),
    );
    let mut card: Value = json!({
        "client_id": format!("{origin}{CARD_PATH}"),
        "client_uri": origin,
        "jwks_uri": jwks,
        "web_bot_auth": Value::Object(wba),
    });
    if !product_token.is_empty() {
        card["client_name"] = json!(product_token);
    }
    // A tree of strings and numbers always serialises.
    serde_json::to_string_pretty(&card).unwrap_or_else(|_| String::from("{}"))
}

/// `https://host[:port]` of a checked https URL.
fn origin_of(url: &str) -> &str {
    let rest = url.strip_prefix("https://").unwrap_or(url);
    let end = rest
        .find('/')
        .map_or(url.len(), |i| url.len() - rest.len() + i);
    &url[..end]
}
