//! Step 1, [`admit`]: whether a request may use the store at all, before it
//! is read.

use http::header::{self, HeaderName};
use http::HeaderMap;
use http::{request, Method};
use serde::Serialize;

use super::fields::has_directive;
use super::{CacheKey, CacheParams};

/// Why a request neither reads nor writes the store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BypassReason {
    /// `cache.enabled = false`.
    Disabled,
    /// Only GET is stored and replayed.
    Method,
    /// The request carries `Authorization`.
    Authorization,
    /// The request carries `Cookie`.
    Cookie,
    /// A `Range` or `If-Range` request: partial content is never stored.
    Range,
    /// The request says `Cache-Control: no-store`.
    NoStore,
    /// The URL cannot be keyed (not absolute http/https).
    InvalidUrl,
}

/// What to do with the store for a request, before reading it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Forward untouched; do not read or write the store. Audit `bypass`.
    Bypass(BypassReason),
    /// The client sent validators of its own: forward untouched, pass its
    /// 304 back (outcome `unchanged`, audit `bypass`). A 200 answer may still
    /// be stored under this key through [`storable`](super::storable).
    PassThrough(CacheKey),
    /// Read the store under this key, then call [`plan`](super::plan).
    Lookup(CacheKey),
}

/// Request fields that make a request conditional on the client's behalf.
pub(super) const CLIENT_VALIDATORS: [HeaderName; 4] = [
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_MATCH,
    header::IF_UNMODIFIED_SINCE,
];

/// Decides whether a request may use the store at all. `absolute_url` is the
/// target in absolute form (`https://host/path?q` also for intercepted HTTPS).
pub fn admit(req: &request::Parts, absolute_url: &str, params: &CacheParams) -> Admission {
    if let Some(reason) = bypass_reason(req, params) {
        return Admission::Bypass(reason);
    }
    let key = match CacheKey::new(&req.method, absolute_url) {
        Ok(key) => key,
        Err(_) => return Admission::Bypass(BypassReason::InvalidUrl),
    };
    admitted(req, key)
}

/// [`admit`] for a request whose origin is known in normalised form: the
/// key is [`CacheKey::under_root`] of `root` and the request URI's path and
/// query, the one [`admit`] would make of the whole URL.
pub fn admit_under(req: &request::Parts, root: &str, params: &CacheParams) -> Admission {
    let carried = Carried::of(&req.headers);
    if let Some(reason) = bypass_by(req, params, &carried) {
        return Admission::Bypass(reason);
    }
    let key = CacheKey::under_root(&req.method, root, req.uri.path(), req.uri.query());
    admitted_by(&carried, key)
}

fn admitted(req: &request::Parts, key: CacheKey) -> Admission {
    admitted_by(&Carried::of(&req.headers), key)
}

fn admitted_by(carried: &Carried, key: CacheKey) -> Admission {
    if carried.validators {
        return Admission::PassThrough(key);
    }
    Admission::Lookup(key)
}

/// Which of the fields admission reads a request carries, from one pass
/// over its names: asked one by one, each name was hashed and looked up
/// (eight lookups, about 750 instructions, where a request has a handful
/// of fields to compare).
#[derive(Default)]
struct Carried {
    authorization: bool,
    cookie: bool,
    range: bool,
    cache_control: bool,
    validators: bool,
}

impl Carried {
    fn of(h: &HeaderMap) -> Carried {
        let mut c = Carried::default();
        for name in h.keys() {
            if name == header::AUTHORIZATION {
                c.authorization = true;
            } else if name == header::COOKIE {
                c.cookie = true;
            } else if name == header::RANGE || name == header::IF_RANGE {
                c.range = true;
            } else if name == header::CACHE_CONTROL {
                c.cache_control = true;
            } else if CLIENT_VALIDATORS.contains(name) {
                c.validators = true;
            }
        }
        c
    }
}

pub(super) fn bypass_reason(req: &request::Parts, params: &CacheParams) -> Option<BypassReason> {
    bypass_by(req, params, &Carried::of(&req.headers))
}

fn bypass_by(req: &request::Parts, params: &CacheParams, c: &Carried) -> Option<BypassReason> {
    if !params.enabled {
        Some(BypassReason::Disabled)
    } else if req.method != Method::GET {
        Some(BypassReason::Method)
    } else if c.authorization {
        Some(BypassReason::Authorization)
    } else if c.cookie {
        Some(BypassReason::Cookie)
    } else if c.range {
        Some(BypassReason::Range)
    } else if c.cache_control && has_directive(&req.headers, header::CACHE_CONTROL, "no-store") {
        Some(BypassReason::NoStore)
    } else {
        None
    }
}
