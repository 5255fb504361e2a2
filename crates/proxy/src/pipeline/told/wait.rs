//! How long a request prefers to be held: its `Prefer: wait=N`, else its
//! client's configured default. Apart from `told.rs` because the pipeline
//! reads it when a request begins, before any step.

use std::net::SocketAddr;

use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;
use mannerly_policy::budget::prefer_wait;

use crate::config::Config;

/// RFC 7240 §3.
const PREFER: HeaderName = HeaderName::from_static("prefer");

/// How long a request prefers to be held at most, and who chose it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Wait {
    pub secs: u64,
    pub by: WaitBy,
}

/// Who chose a [`Wait`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitBy {
    /// The request's `Prefer: wait=N`.
    Client,
    /// `proxy.prefer_wait` for the client (its user name or address, or `*`).
    Config,
}

impl WaitBy {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            WaitBy::Client => "client",
            WaitBy::Config => "config",
        }
    }
}

/// The request's own `wait` preference, else the configured default of
/// its client: by user name, then by address, then `*`.
pub(crate) fn preferred(
    live: &Config,
    headers: &HeaderMap,
    client: SocketAddr,
    user: Option<&str>,
) -> Option<Wait> {
    let asked = prefer_wait(headers.get_all(PREFER).iter().map(HeaderValue::as_bytes));
    if let Some(secs) = asked {
        let by = WaitBy::Client;
        return Some(Wait { secs, by });
    }
    let table = &live.proxy.prefer_wait;
    if table.is_empty() {
        // No default to look up: the client's address is not written out.
        return None;
    }
    let by_user = user.and_then(|u| table.get(u));
    let secs = by_user
        .or_else(|| table.get(&client.ip().to_string()))
        .or_else(|| table.get("*"))?;
    let by = WaitBy::Config;
    Some(Wait { secs: *secs, by })
}
