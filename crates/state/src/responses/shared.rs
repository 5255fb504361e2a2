//! The page store every proxy of a cluster shares, through Redis: the
//! second tier behind each proxy's own store. What one proxy stored, any
//! other finds here on its own miss, revalidates with the stored
//! validators and answers from.
//!
//! One key per URL, `{prefix}p:{sha256 of the cache key}`, holding the last
//! variant stored (the record format of the local stores, checksum
//! included); a request whose `Vary` fields select another variant misses.
//! Written only after the local store stored the page, so the same
//! storability rules and size limits apply, plus `max_body` here. Entries
//! carry a TTL and are otherwise left to Redis's `maxmemory-policy`.
//!
//! # Failure
//!
//! Every command has the shared timeout; a slow, absent or damaged answer
//! is a miss and a write that fails is dropped: the proxy carries on with
//! its own store alone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use mannerly_policy::conditional::http::HeaderMap;
use mannerly_policy::conditional::{variant_key, CacheEntryMeta, CacheKey};
use redis::AsyncCommands;
use sha2::{Digest, Sha256};

use super::{record, StoredResponse};
use crate::link::Link;

/// The shared page store. Cheap to clone.
#[derive(Clone)]
pub struct SharedPages {
    link: Link,
    prefix: String,
    timeout: Duration,
    max_body: u64,
    ttl: Duration,
    stats: std::sync::Arc<SharedPagesStats>,
}

/// Counters for the metrics and the benchmark.
#[derive(Debug, Default)]
pub struct SharedPagesStats {
    /// Lookups that found the page.
    pub hits: AtomicU64,
    /// Lookups that did not (absent, other variant, damaged, no answer).
    pub misses: AtomicU64,
    /// Pages written.
    pub writes: AtomicU64,
    /// Bytes written (records).
    pub bytes_written: AtomicU64,
    /// Commands that failed or timed out.
    pub failures: AtomicU64,
}

impl std::fmt::Debug for SharedPages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedPages")
            .field("prefix", &self.prefix)
            .field("max_body", &self.max_body)
            .finish_non_exhaustive()
    }
}

impl SharedPages {
    /// Pages under `prefix` on `link`: bodies up to `max_body` bytes kept
    /// for `ttl`; a command slower than `timeout` counts as a miss.
    pub fn new(
        link: Link,
        prefix: &str,
        timeout: Duration,
        max_body: u64,
        ttl: Duration,
    ) -> SharedPages {
        SharedPages {
            link,
            prefix: prefix.to_string(),
            timeout,
            max_body,
            ttl,
            stats: Default::default(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> &SharedPagesStats {
        &self.stats
    }

    /// The page stored for `key`, if its variant is the one
    /// `request_headers` select.
    pub async fn get(&self, key: &CacheKey, request_headers: &HeaderMap) -> Option<StoredResponse> {
        let mut conn = self.link.clone();
        let got =
            tokio::time::timeout(self.timeout, conn.get::<_, Option<Vec<u8>>>(self.key(key))).await;
        let found = match got {
            Ok(Ok(bytes)) => bytes.and_then(|b| record::decode(&b)),
            _ => {
                self.stats.failures.fetch_add(1, Ordering::Relaxed);
                None
            }
        };
        let found =
            found.filter(|r| r.meta.variant() == variant_key(key, r.meta.vary(), request_headers));
        let counter = match found {
            Some(_) => &self.stats.hits,
            None => &self.stats.misses,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Stores `body` under `meta` for every proxy (a body above `max_body`
    /// is not shared).
    pub async fn put(&self, meta: &CacheEntryMeta, body: &Bytes) {
        if body.len() as u64 > self.max_body {
            return;
        }
        let Ok(bytes) = record::encode(meta, body) else {
            return;
        };
        let len = bytes.len() as u64;
        let mut conn = self.link.clone();
        let ttl = u64::try_from(self.ttl.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let set = conn.pset_ex::<_, _, ()>(self.key(meta.key()), bytes, ttl);
        match tokio::time::timeout(self.timeout, set).await {
            Ok(Ok(())) => {
                self.stats.writes.fetch_add(1, Ordering::Relaxed);
                self.stats.bytes_written.fetch_add(len, Ordering::Relaxed);
            }
            _ => {
                self.stats.failures.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Forgets the page of `key` for every proxy.
    pub async fn remove(&self, key: &CacheKey) {
        let mut conn = self.link.clone();
        let del = conn.del::<_, ()>(self.key(key));
        if !matches!(tokio::time::timeout(self.timeout, del).await, Ok(Ok(()))) {
            self.stats.failures.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn key(&self, key: &CacheKey) -> String {
        page_key(&self.prefix, key)
    }
}

/// The Redis key of `key`'s page: other proxies of the fleet, and earlier
/// versions of this one, find the page under the same spelling.
fn page_key(prefix: &str, key: &CacheKey) -> String {
    let sum = Sha256::digest(key.as_str().as_bytes());
    format!("{prefix}p:{}", mannerly_policy::hex(&sum))
}

#[cfg(test)]
mod tests {
    use mannerly_policy::conditional::http::Method;

    use super::*;

    #[test]
    fn a_page_key_is_the_prefix_then_the_hex_of_the_cache_keys_hash() {
        let key = CacheKey::new(&Method::GET, "http://e.com/").unwrap();
        // SHA-256 of "GET http://e.com/" in lower-case hex, as the fleet's
        // stored keys spell it.
        assert_eq!(
            page_key("m:", &key),
            "m:p:a56ebb7adbf636747d15afe5e526903cccd8e0b4426e766404c4642a7202e1c6"
        );
    }
}
