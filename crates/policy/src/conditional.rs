//! Conditional requests: which responses may be stored and replayed, which
//! validators to send, and how a 304 refreshes a stored response. Sans-IO: the
//! store itself lives in `mannerly-state`, the bytes in the proxy.
//!
//! Freshness, storability, validator choice and the 304 selection rules are
//! [`http_cache_semantics`]'s (RFC 7234/9111); this module adds mannerly's
//! stricter rules (never store or replay with credentials or cookies, always
//! revalidate unless `serve_fresh`) and the plumbing.
//!
//! # How the proxy uses it, for one request
//!
//! 1. [`admit`] the request. `Bypass` → forward untouched, audit `cache: "bypass"`.
//!    `PassThrough` → the client sent its own validators: forward untouched;
//!    its 304 goes back as is (outcome `unchanged`); a 200 may still be stored
//!    (step 4). `Lookup(key)` → read the store (blocking: `spawn_blocking`).
//! 2. [`plan`] with what the store returned:
//!    * `Fetch` → forward as is (a miss);
//!    * `Revalidate { validators }` → add these headers to the upstream request;
//!    * `ServeStored { .. }` → answer from the store without asking the
//!      origin (only with `serve_fresh = true`), audit `hit`.
//! 3. Upstream answered 304 to our validators → [`merge_not_modified`]: send
//!    the client the stored status + refreshed headers + stored body
//!    (`Mannerly-Decision: revalidated`), and write the refreshed meta back
//!    (off the response path) when there is one: a 304 that changed only
//!    `Date`/`Age`/`Expires` gives none. `Err(NotModifiedMismatch)` → remove the entry
//!    and fetch once more without validators.
//! 4. Upstream answered anything else → stream it to the client while
//!    buffering up to `max_body` bytes; when the body completed, if
//!    [`storable`] says `Ok(meta)`, put `(meta, body)` in the store (replacing
//!    the old variant), off the response path. If it says `Err` and an entry
//!    was stored, remove it when [`invalidates_stored`] says so.
//!
//! 5. The origin answered an unsafe method (POST, PUT, DELETE, …) with
//!    2xx/3xx → remove the pages [`invalidated_by`] names before answering.
//!
//! Store errors at any step only cost the cache: forward as for a miss and
//! audit `cache: "error"`.

mod admission;
mod canonical;
mod entry;
mod fields;
mod invalidation;
mod key;
mod memo;
mod not_modified;
mod params;
mod planning;
mod storage;
#[cfg(test)]
mod test_heads;

use serde::{Deserialize, Serialize};

/// The `http` crate this API speaks, re-exported so callers (the state crate,
/// tests) name the very same `HeaderMap` and `Parts` types.
pub use http;

pub use admission::{admit, admit_under, Admission, BypassReason};
pub use entry::CacheEntryMeta;
pub use invalidation::invalidated_by;
pub use key::{
    is_variant, primary_key, variant_key, variant_prefix, vary_names, CacheKey, KeyError,
};
pub use memo::Plan;
pub use not_modified::{merge_not_modified, NotModifiedMismatch, Revalidated, WriteBack};
pub use params::{CacheParams, CacheReads, CacheSync};
pub use planning::plan;
pub use storage::{invalidates_stored, is_targets_page, storable, NoStore};

/// The audit line's `cache` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheOutcome {
    /// Looked up, nothing usable stored; the answer was not stored either.
    Miss,
    /// The origin's answer was stored (new or replacing an older one).
    Stored,
    /// Our validators drew a 304; the stored body was served.
    Revalidated,
    /// Served fresh from the store without asking the origin (`serve_fresh`).
    Hit,
    /// The store was not consulted (see [`BypassReason`]), or the client's own
    /// conditional request passed through.
    Bypass,
    /// The store failed (disk full, I/O, corrupt beyond repair); the request
    /// was served as a pass-through.
    Error,
}

impl CacheOutcome {
    /// The snake_case name used in audit lines.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheOutcome::Miss => "miss",
            CacheOutcome::Stored => "stored",
            CacheOutcome::Revalidated => "revalidated",
            CacheOutcome::Hit => "hit",
            CacheOutcome::Bypass => "bypass",
            CacheOutcome::Error => "error",
        }
    }
}

impl std::fmt::Display for CacheOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
