//! What our Web Bot Auth signature covers beyond its own two components.

use crate::identity::AskedSignature;

/// What a request's signature is asked to cover: what the origin asked
/// (`Accept-Signature`), if it did, and the Pay Per Crawl price field the
/// request carries, if any, so that the price cannot be changed on the way
/// without breaking the signature. `None`: the plain profile.
pub fn signed_as(
    asked: Option<&AskedSignature>,
    price_field: Option<&str>,
) -> Option<AskedSignature> {
    let Some(field) = price_field else {
        return asked.cloned();
    };
    let mut asked = asked.cloned().unwrap_or_default();
    if !asked.components.iter().any(|c| c == field) {
        asked.components.push(field.to_string());
    }
    Some(asked)
}
