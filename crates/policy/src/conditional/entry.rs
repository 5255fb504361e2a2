//! What is remembered about a stored response, apart from its body.

use std::sync::OnceLock;
use std::time::SystemTime;

use http::{HeaderMap, StatusCode};
use http_cache_semantics::CachePolicy;
use serde::{Deserialize, Serialize};

use super::key::CacheKey;
use super::memo::{NotModifiedMemo, Plan};
use crate::prefs::page::{scan_meta, MetaScan};

/// Everything about a stored response except its body: the key it answers,
/// its status and headers exactly as received (hop-by-hop fields removed),
/// its validators, and the RFC 9111 policy state, serialised so that
/// freshness and revalidation are exact after a restart.
///
/// Built only by [`storable`](super::storable) and
/// [`merge_not_modified`](super::merge_not_modified); the store keeps it as
/// postcard (JSON in records written before) next to the body.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CacheEntryMeta {
    pub(crate) key: CacheKey,
    pub(crate) variant: String,
    pub(crate) vary: Vec<String>,
    #[serde(with = "status_serde")]
    pub(crate) status: StatusCode,
    #[serde(with = "headers_serde")]
    pub(crate) headers: HeaderMap,
    pub(crate) etag: Option<String>,
    pub(crate) last_modified: Option<String>,
    pub(crate) stored_at: SystemTime,
    pub(crate) policy: CachePolicy,
    /// The library's plan for a revalidation of this entry, asked once (see
    /// `plan`); never stored, and empty again in a refreshed entry.
    #[serde(skip)]
    pub(crate) revalidation: OnceLock<Plan>,
    /// The library's merge of a 304 that refreshed nothing but per-answer
    /// fields (see `merge_not_modified`); never stored, empty again in a
    /// refreshed entry.
    #[serde(skip)]
    pub(crate) not_modified: OnceLock<NotModifiedMemo>,
    /// The `<meta>` tags of the body's first bytes, and how many bytes
    /// were read for them (see [`CacheEntryMeta::body_meta`]); never
    /// stored, empty again in a refreshed entry.
    #[serde(skip)]
    pub(crate) body_meta: OnceLock<(usize, MetaScan)>,
}

impl CacheEntryMeta {
    /// The `<meta>` tags in the first `limit` bytes of `body`, this entry's
    /// body ([`scan_meta`]): a page served from the store again and again
    /// holds the same bytes, so they are read once per entry (again only
    /// if `limit` changes).
    pub fn body_meta(&self, body: &[u8], limit: usize) -> MetaScan {
        if let Some((_, scan)) = self.body_meta.get().filter(|(read, _)| *read == limit) {
            return scan.clone();
        }
        let seen = &body[..body.len().min(limit)];
        let scan = scan_meta(seen, seen.len() == body.len());
        let _ = self.body_meta.set((limit, scan.clone()));
        scan
    }

    /// The primary key (method + normalised URL).
    pub fn key(&self) -> &CacheKey {
        &self.key
    }

    /// The secondary key this entry is stored under (see
    /// [`variant_key`](super::variant_key)).
    pub fn variant(&self) -> &str {
        &self.variant
    }

    /// The header names this response's `Vary` nominates (lower-case, sorted).
    pub fn vary(&self) -> &[String] {
        &self.vary
    }

    /// The stored status (200 in almost every case).
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The stored response headers, as received (hop-by-hop fields removed,
    /// `Content-Encoding` and `Content-Length` untouched: the body is stored
    /// exactly as received).
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The `ETag`, if the origin sent one.
    pub fn etag(&self) -> Option<&str> {
        self.etag.as_deref()
    }

    /// The `Last-Modified`, if the origin sent one.
    pub fn last_modified(&self) -> Option<&str> {
        self.last_modified.as_deref()
    }

    /// When the response was stored or last revalidated (the `now` passed in).
    pub fn stored_at(&self) -> SystemTime {
        self.stored_at
    }

    /// The `Content-Length` the origin declared, if any; a store uses it to
    /// refuse a body that arrived shorter or longer than announced.
    pub fn declared_length(&self) -> Option<u64> {
        declared_length(&self.headers)
    }
}

pub(crate) fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// Header values are bytes; most are text, so text is kept readable in the
/// JSON and anything else (obs-text) falls back to a byte array. In the
/// store's binary encoding every value is bytes.
mod headers_serde {
    use http::header::{HeaderName, HeaderValue};
    use http::HeaderMap;
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Value {
        Text(String),
        Bytes(Vec<u8>),
    }

    /// [`Value`] borrowed from the map: the same JSON, with no copy of
    /// each value made only to be written out.
    #[derive(Serialize)]
    #[serde(untagged)]
    enum ValueRef<'a> {
        Text(&'a str),
        Bytes(&'a [u8]),
    }

    pub(super) fn serialize<S: Serializer>(map: &HeaderMap, s: S) -> Result<S::Ok, S::Error> {
        if !s.is_human_readable() {
            // A binary format tells no text from bytes by looking (an
            // untagged enum needs that): every value is bytes there.
            let pairs: Vec<(&str, &[u8])> = map
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_bytes()))
                .collect();
            return pairs.serialize(s);
        }
        let pairs: Vec<(&str, ValueRef<'_>)> = map
            .iter()
            .map(|(name, value)| {
                let value = match value.to_str() {
                    Ok(text) => ValueRef::Text(text),
                    Err(_) => ValueRef::Bytes(value.as_bytes()),
                };
                (name.as_str(), value)
            })
            .collect();
        pairs.serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<HeaderMap, D::Error> {
        if !d.is_human_readable() {
            let pairs: Vec<(&'de str, &'de [u8])> = Vec::deserialize(d)?;
            let mut map = HeaderMap::with_capacity(pairs.len());
            for (name, value) in pairs {
                let name = HeaderName::from_bytes(name.as_bytes()).map_err(D::Error::custom)?;
                map.append(
                    name,
                    HeaderValue::from_bytes(value).map_err(D::Error::custom)?,
                );
            }
            return Ok(map);
        }
        let pairs: Vec<(String, Value)> = Vec::deserialize(d)?;
        let mut map = HeaderMap::with_capacity(pairs.len());
        for (name, value) in pairs {
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(D::Error::custom)?;
            let value = match value {
                Value::Text(text) => HeaderValue::from_str(&text),
                Value::Bytes(bytes) => HeaderValue::from_bytes(&bytes),
            }
            .map_err(D::Error::custom)?;
            map.append(name, value);
        }
        Ok(map)
    }
}

mod status_serde {
    use http::StatusCode;
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(status: &StatusCode, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u16(status.as_u16())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<StatusCode, D::Error> {
        StatusCode::from_u16(u16::deserialize(d)?).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod body_meta_tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::conditional::test_heads::{get, response, URL};
    use crate::conditional::{admit, storable, Admission, CacheParams};

    /// The memo gives what a fresh read gives, for the limit it is asked
    /// with: a changed limit reads again.
    #[test]
    fn the_body_is_read_once_per_limit_and_as_scan_meta_reads_it() {
        let params = CacheParams::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let req = get(&[]);
        let Admission::Lookup(key) = admit(&req, URL, &params) else {
            panic!("a plain GET looks up");
        };
        let head = [("content-type", "text/html"), ("etag", "\"a\"")];
        let meta = storable(&req, &key, &response(200, &head), &params, t0).expect("storable");
        let body = b"<html><head><meta name=\"robots\" content=\"noindex\"></head><body>x</body>";
        for limit in [4096, 4096, 20, 4096] {
            let seen = &body[..body.len().min(limit)];
            let fresh = scan_meta(seen, seen.len() == body.len());
            assert_eq!(meta.body_meta(body, limit), fresh, "limit {limit}");
        }
        assert!(!meta.body_meta(body, 4096).tags.is_empty());
    }
}
