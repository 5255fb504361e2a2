//! The price held for a request's next send and the field that offers it.
//! Apart from `payment.rs` because the pipeline carries it and puts it on
//! the outgoing request itself.

use http::{HeaderMap, HeaderName, HeaderValue};
use mannerly_policy::answer::pay::{self, Scheme};

use crate::payments::Held;

/// A request on its way to be paid for.
pub(crate) struct Paying {
    pub(super) held: Held,
    /// The field that carries the offer or the payment.
    pub(super) field: HeaderName,
    pub(super) value: HeaderValue,
    pub(super) scheme: Scheme,
}

impl Paying {
    /// The request is on its way to the site: its hold now outlives an
    /// abandoning client.
    pub(crate) fn sent(&mut self) {
        self.held.sent();
    }

    /// The Pay Per Crawl price field, which the Web Bot Auth signature
    /// must cover.
    pub(crate) fn signed_field(&self) -> Option<&str> {
        (self.scheme == Scheme::PayPerCrawl).then(|| self.field.as_str())
    }
}

/// Takes the client's paying fields off, and puts ours on.
pub(crate) fn put_offer(headers: &mut HeaderMap, paying: Option<&Paying>) {
    pay::strip_paying_fields(headers);
    if let Some(p) = paying {
        headers.insert(p.field.clone(), p.value.clone());
    }
}
