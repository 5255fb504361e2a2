//! `[cache]`: the parameters of the conditional-request store, their
//! defaults and their checks.

use http_cache_semantics::CacheOptions;
use serde::{Deserialize, Serialize};

use crate::ParamError;

/// `Mannerly-Decision`-independent cache parameters (`[cache]` in the config).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheParams {
    /// Remember responses and revalidate them. Off: every request bypasses.
    pub enabled: bool,
    /// Largest body stored, in bytes (default 8 MiB); larger ones pass through.
    pub max_body: u64,
    /// Total size of the store, in bytes (default 1 GiB); least recently used
    /// entries are evicted to stay under it.
    pub max_size: u64,
    /// Answer fresh entries (RFC 9111 §4.2) without asking the origin. Off by
    /// default: a crawler wants the current page, so it always revalidates.
    pub serve_fresh: bool,
    /// Evaluate responses as a shared cache (`private` is never stored,
    /// `s-maxage` counts). Leave on: one proxy serves many clients.
    pub shared: bool,
    /// Bytes of recently revalidated entries kept decoded in memory
    /// (default 64 MiB), so that revalidating a page crawled again reads no
    /// disk; a page is held from its second revalidation on. 0: none.
    pub memory_size: u64,
    /// When the store's writes are forced to disk.
    pub sync: CacheSync,
    /// Where a page not held in memory is read from disk.
    pub reads: CacheReads,
}

/// `cache.reads`: which thread reads a stored page that is not held in
/// memory (a page's first revalidation, or any page of a re-crawl).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheReads {
    /// The thread serving the request reads it, as nginx reads files by
    /// default. The default: a read the OS answers from its page cache
    /// costs less than handing it to another thread and back (re-crawl
    /// benchmark: 72 against 109 us of CPU per request, p99 4.8 against
    /// 12.9 ms). While a read waits for the disk, the other connections of
    /// that serving thread wait too.
    #[default]
    Inline,
    /// A thread of the blocking pool reads it, and the serving thread goes
    /// on meanwhile: for a store on a slow or network disk.
    Pool,
}

/// `cache.sync`: when the store's writes are forced to disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheSync {
    /// Writes queued while the previous commit ran are committed together
    /// and forced to disk (`fsync`) before their audit lines say `stored`.
    Batch,
    /// Commits are not forced one by one; a forced commit follows within a
    /// tenth of a second, or once half a MiB of pages waits. A crash (of
    /// the process or the machine) may lose the pages stored in that time,
    /// never the store's consistency; the audit line says `stored` once
    /// committed (the next request finds the page). Host records (pauses,
    /// breakers, ceilings) are forced anyway.
    /// The default: a page lost in a crash is only fetched again, and an
    /// `fsync` per commit made every new page wait for the disk's slowest
    /// moments (p99 30-160 ms against 4 ms on the benchmark's disk).
    #[default]
    None,
}

impl Default for CacheParams {
    fn default() -> Self {
        CacheParams {
            enabled: true,
            max_body: 8 * 1024 * 1024,
            max_size: 1024 * 1024 * 1024,
            serve_fresh: false,
            shared: true,
            memory_size: 64 * 1024 * 1024,
            sync: CacheSync::None,
            reads: CacheReads::Inline,
        }
    }
}

impl CacheParams {
    /// Checks the parameters, naming the key at fault.
    pub fn validate(self) -> Result<Self, ParamError> {
        if self.max_body == 0 {
            return Err(ParamError::new("cache.max_body", "must be greater than 0"));
        }
        if self.max_size < self.max_body {
            return Err(ParamError::new(
                "cache.max_size",
                format!(
                    "{} is below cache.max_body ({}): nothing could be stored",
                    self.max_size, self.max_body
                ),
            ));
        }
        Ok(self)
    }

    pub(super) fn options(&self) -> CacheOptions {
        CacheOptions {
            shared: self.shared,
            ..CacheOptions::default()
        }
    }
}
