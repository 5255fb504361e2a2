//! What a robots.txt answer's head says about reusing it: its validators
//! (for the conditional fetch once its age runs out) and its own
//! `Cache-Control` age (RFC 9309 §2.4 allows RFC 9111 caching, at most 24 h).

use std::time::Duration;

use http::header::{HeaderMap, AGE, CACHE_CONTROL, ETAG, LAST_MODIFIED};

/// The shortest age a copy is given whatever its head says: `no-store`,
/// `no-cache` or `max-age=0` on robots.txt would otherwise make every
/// request to the site fetch it again, which costs the site more than the
/// staleness of a minute costs anyone.
pub const MIN_AGE: Duration = Duration::from_secs(60);

/// A copy's head, as far as its reuse goes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Head {
    /// Sent with the next fetch.
    pub validators: Validators,
    /// How long the copy is fresh by its own `Cache-Control` (already
    /// floored at [`MIN_AGE`]; capped by `robots.max_age_secs` where it is
    /// used, so that a reload lowering the cap applies to copies held).
    /// `None`: the head says nothing, `robots.max_age_secs` applies.
    pub declared_age: Option<Duration>,
}

impl Head {
    /// The head of an answer's `headers`.
    pub fn read(headers: &HeaderMap) -> Head {
        let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
        Head {
            validators: Validators::read(text(ETAG), text(LAST_MODIFIED)),
            declared_age: declared_age(headers),
        }
    }

    /// The head after a 304 answered with `fresh`: what the 304 restates
    /// replaces what was held (RFC 9111 §4.3.4), the rest is kept.
    pub fn refreshed(&self, fresh: &Head) -> Head {
        let v = &fresh.validators;
        Head {
            validators: Validators {
                etag: v.etag.clone().or_else(|| self.validators.etag.clone()),
                last_modified: v
                    .last_modified
                    .clone()
                    .or_else(|| self.validators.last_modified.clone()),
            },
            declared_age: fresh.declared_age.or(self.declared_age),
        }
    }
}

/// The validators of a robots.txt copy (RFC 9110 §8.8), sent with the next
/// fetch once the copy's age has run out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Validators {
    /// `ETag`, as the origin wrote it (sent as `If-None-Match`).
    pub etag: Option<String>,
    /// `Last-Modified`, as the origin wrote it (sent as `If-Modified-Since`).
    pub last_modified: Option<String>,
}

impl Validators {
    /// The validators of a 2xx head; a value longer than [`MAX_VALIDATOR`]
    /// bytes is not kept (it would be sent back on every revalidation).
    pub fn read(etag: Option<&str>, last_modified: Option<&str>) -> Validators {
        let keep = |v: Option<&str>| {
            v.map(str::trim)
                .filter(|v| !v.is_empty() && v.len() <= MAX_VALIDATOR)
                .map(str::to_string)
        };
        Validators {
            etag: keep(etag),
            last_modified: keep(last_modified),
        }
    }

    /// Neither validator: a fetch is unconditional.
    pub fn is_empty(&self) -> bool {
        self.etag.is_none() && self.last_modified.is_none()
    }
}

/// The longest validator kept.
pub const MAX_VALIDATOR: usize = 1024;

/// The freshness `Cache-Control` gives an answer, less its `Age`:
/// `no-store` and `no-cache` give [`MIN_AGE`], as does a `max-age` that is
/// no number or is stated twice differently (RFC 9111 §4.2.1: such a
/// response is stale; stale is read here as "fetch again soon", not "at
/// once"). `s-maxage` is not read: this cache is the crawler's own.
pub fn declared_age(headers: &HeaderMap) -> Option<Duration> {
    let mut max_age: Option<Result<u64, ()>> = None;
    let mut uncacheable = false;
    let directives = headers
        .get_all(CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','));
    for d in directives {
        let (name, arg) = match d.split_once('=') {
            Some((n, a)) => (n.trim(), Some(a.trim().trim_matches('"'))),
            None => (d.trim(), None),
        };
        if name.eq_ignore_ascii_case("no-store") || name.eq_ignore_ascii_case("no-cache") {
            uncacheable = true;
        } else if name.eq_ignore_ascii_case("max-age") {
            let secs = arg.and_then(delta_seconds).ok_or(());
            max_age = match max_age {
                Some(seen) if seen != secs => Some(Err(())),
                _ => Some(secs),
            };
        }
    }
    if uncacheable {
        return Some(MIN_AGE);
    }
    let secs = match max_age? {
        Ok(secs) => secs,
        Err(()) => return Some(MIN_AGE),
    };
    let age = headers
        .get(AGE)
        .and_then(|v| v.to_str().ok())
        .and_then(delta_seconds)
        .unwrap_or(0);
    Some(Duration::from_secs(secs.saturating_sub(age)).max(MIN_AGE))
}

/// RFC 9111 §1.2.2: digits only; a value past what fits is as good as
/// "very long" (the cap cuts it to 24 h anyway).
fn delta_seconds(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.parse().unwrap_or(u64::MAX))
}
