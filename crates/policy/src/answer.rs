//! What an origin's answer means, read from its head alone: what the host's
//! budget hears (status, `Retry-After`, `RateLimit` fields), what the
//! response store may do with it, what it asks of our signature
//! (`Accept-Signature`) and of our wallet (a 402's price, a site's
//! `crawler-error`), and so where the request goes next. No I/O: the proxy
//! sends, waits and records; every choice it makes on an answer is here.
//!
//! Beside it, the rules of paying ([`pay`]: the standing offer, a 402's
//! plan, what a charge counts) and of what a signature covers
//! ([`signed_as`]).

use std::time::SystemTime;

use http::header::RETRY_AFTER;
use http::{HeaderMap, StatusCode};

use crate::budget::Announced;
use crate::conditional;
use crate::identity::{self, Challenge};
use crate::payment;

pub mod pay;
mod sign;

pub use sign::signed_as;

/// Why a second `Accept-Signature` is passed on: one signed resend is all
/// a request gets.
pub const ASKED_AGAIN: &str = "Accept-Signature asked again after its one signed resend: passed on";

/// Why a throttled request whose body is gone is not sent again.
pub const BODY_GONE: &str = "the request's body cannot be sent again";

/// Why a 304 that is not for the stored page fails when the request cannot
/// be sent once more without validators.
pub const UNMATCHED_304: &str =
    "the origin's 304 does not match the stored page, and the request cannot be sent again";

/// Why a 101 fails: `Upgrade` is a hop-by-hop field never forwarded, so
/// none was asked for, and the origin is speaking something else.
pub const UNASKED_101: &str = "the origin switched protocols (101) without being asked to";

/// What is known of the request an answer came to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sent {
    /// The target's status as a proxy provider carried it
    /// (`upstream.status_header`), when one did.
    pub target_status: Option<u16>,
    /// Its body can be sent again (kept whole, or none).
    pub resendable: bool,
    /// It already carried a payment made for a 402: never a second.
    pub paid_again: bool,
    /// It carried our validators from the store.
    pub revalidating: bool,
    /// We sign requests (Web Bot Auth).
    pub signing: bool,
    /// It was already signed as an `Accept-Signature` asked.
    pub signed_as_asked: bool,
}

/// What an answer means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reading {
    /// What the host's budget learns from it.
    pub budget: ForBudget,
    /// Where the request goes next.
    pub route: Route,
}

/// What the host's budget learns from an answer, whatever else it means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForBudget {
    /// The target's status: a provider's carried one, else the answer's.
    /// The store's invalidation reads it too.
    pub status: u16,
    /// `Retry-After` as sent, when it is text.
    pub retry_after: Option<String>,
    /// A limit announced in `RateLimit` or `X-RateLimit-*` fields.
    pub announced: Option<Announced>,
}

/// Where a request goes after its answer, in the order the rules are read:
/// a site's payment error, then a 402, then everything else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// The site's `crawler-error` (`PaymentFailed`, …): passed on as it
    /// came, never sent again.
    PaymentFailed {
        /// The error code, as [`payment::crawler_error`] cleans it.
        code: String,
        /// The Pay Per Crawl price the answer names, as text, if it does.
        price: Option<String>,
    },
    /// A 402: paid and sent again when it may be (and the limits cover
    /// its price; see [`pay::plan`]), else passed on with its price.
    PaymentRequired {
        /// The request may be sent again with a payment: its body is
        /// there, and it was not paid for once already.
        may_pay: bool,
    },
    /// Any other answer.
    Learn(Learn),
}

/// Any answer that is not about paying.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Learn {
    /// What it asks of our signature, when we sign.
    pub challenge: Option<Challenge>,
    /// When the budget takes it for a throttle: why the request is not sent
    /// again whatever the host's retry rule says.
    pub throttle_veto: Option<&'static str>,
    /// When it is no throttle.
    pub then: Then,
}

/// What an answer that is no throttle leads to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Then {
    /// It asked for a signature we can give: sent again, signed as asked.
    SignAsAsked,
    /// The origin misbehaved: the client gets this status and reason.
    Fail(u16, &'static str),
    /// A 304 to our validators: the stored page.
    Revalidated {
        /// What a 304 that does not match the stored page leads to.
        unmatched: Unmatched,
    },
    /// The client's own 304, passed on as it is.
    Unchanged,
    /// A page passed on.
    Page {
        /// It is the target's own page, so the store may keep it (or drop
        /// what it had): not a provider's answer around a target's error.
        targets_page: bool,
    },
}

/// What the store does with a page passed on ([`Then::Page`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keep {
    /// Drop what is stored for the URL now.
    pub drop_stored: bool,
    /// Store the page, if the cache rules let it be stored.
    pub store: bool,
}

/// What the store does with a page that is the target's own or not
/// (`targets_page`), when the site allows only use without storing
/// (`immediate`, `use=immediate`) or not, and something `had_entry` for
/// its key: a page the site wants used at once is neither kept nor left
/// kept from before; a provider's answer around a target's error is not
/// the page.
pub fn keep(targets_page: bool, immediate: bool, had_entry: bool) -> Keep {
    Keep {
        drop_stored: immediate && had_entry,
        store: targets_page && !immediate,
    }
}

/// What a 304 to our validators that is not for the stored page leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unmatched {
    /// Sent once more, without validators.
    Refetch,
    /// Failed with this status and reason: the request cannot be sent again.
    Fail(u16, &'static str),
}

/// What the answer with `status` and `headers` means for a request `sent`
/// so; `wall` turns a `RateLimit` reset given as a Unix time into seconds.
pub fn read(status: StatusCode, headers: &HeaderMap, sent: &Sent, wall: SystemTime) -> Reading {
    let budget = ForBudget {
        status: sent.target_status.unwrap_or(status.as_u16()),
        retry_after: headers
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        announced: Announced::from_headers(headers, wall),
    };
    let route = if let Some(code) = payment::crawler_error(headers) {
        let price = headers
            .get("crawler-price")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        Route::PaymentFailed { code, price }
    } else if status == StatusCode::PAYMENT_REQUIRED {
        Route::PaymentRequired {
            may_pay: sent.resendable && !sent.paid_again,
        }
    } else {
        Route::Learn(learn(status, headers, sent))
    };
    Reading { budget, route }
}

/// The rules for an answer that is not about paying.
fn learn(status: StatusCode, headers: &HeaderMap, sent: &Sent) -> Learn {
    let challenge = sent.signing.then(|| {
        let field = headers.get("accept-signature").map(|v| v.as_bytes());
        identity::challenge(
            status.as_u16(),
            field,
            sent.resendable,
            sent.signed_as_asked,
        )
    });
    let challenge = challenge.flatten();
    let throttle_veto = match challenge {
        Some(Challenge::AskedAgain) => Some(ASKED_AGAIN),
        _ if !sent.resendable => Some(BODY_GONE),
        _ => None,
    };
    let then = match status {
        _ if matches!(challenge, Some(Challenge::Resend(_))) => Then::SignAsAsked,
        StatusCode::SWITCHING_PROTOCOLS => Then::Fail(502, UNASKED_101),
        StatusCode::NOT_MODIFIED if sent.revalidating => Then::Revalidated {
            unmatched: if sent.resendable {
                Unmatched::Refetch
            } else {
                Unmatched::Fail(502, UNMATCHED_304)
            },
        },
        StatusCode::NOT_MODIFIED => Then::Unchanged,
        _ => Then::Page {
            targets_page: conditional::is_targets_page(sent.target_status, status),
        },
    };
    Learn {
        challenge,
        throttle_veto,
        then,
    }
}

#[cfg(test)]
mod tests;
