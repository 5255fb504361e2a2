//! The bytes of one stored response: metadata, body and a checksum over both.
//!
//! ```text
//! "MNR3" | meta length (u32 LE) | meta (postcard) | body | CRC-32 of all before (u32 LE)
//! "MNR2" | meta length (u32 LE) | meta (postcard) | body | SHA-256 of all before
//! "MNR1" | meta length (u32 LE) | meta (JSON)     | body | SHA-256 of all before
//! ```
//!
//! Records are written as `MNR3`; `MNR2` and `MNR1` records, written
//! before, are still read. Decoding the JSON was the largest part of
//! reading a page from disk (its cache policy holds the request's and the
//! response's fields again): postcard reads the same fields without
//! parsing text.
//!
//! The database commits atomically, so a crash cannot tear a record; the
//! checksum catches everything else (a damaged disk, a bug, a hand edit).
//! None of those is an adversary, and an adversary would recompute an
//! unkeyed sum of either kind: a CRC-32 catches what SHA-256 did, at a
//! fraction of the cost of a sum taken on every write and read of a page.

use mannerly_policy::conditional::CacheEntryMeta;
use sha2::{Digest, Sha256};

use super::StoredResponse;

const MAGIC: &[u8; 4] = b"MNR3";
const MAGIC_SHA: &[u8; 4] = b"MNR2";
const MAGIC_JSON: &[u8; 4] = b"MNR1";

pub(crate) fn encode(meta: &CacheEntryMeta, body: &[u8]) -> Result<Vec<u8>, serde_json::Error> {
    let meta = postcard::to_allocvec(meta).map_err(serde::ser::Error::custom)?;
    frame(MAGIC, &meta, body)
}

/// The checksum a record ends with, over all before it.
#[derive(Clone, Copy)]
enum Sum {
    Crc32,
    Sha256,
}

impl Sum {
    /// Which sum a record of this kind carries; `None` for a kind never
    /// written.
    fn of_kind(magic: &[u8; 4]) -> Option<Sum> {
        match magic {
            MAGIC => Some(Sum::Crc32),
            MAGIC_SHA | MAGIC_JSON => Some(Sum::Sha256),
            _ => None,
        }
    }

    fn len(self) -> usize {
        match self {
            Sum::Crc32 => 4,
            Sum::Sha256 => 32,
        }
    }

    /// The sum of `content`, in the first [`Sum::len`] bytes.
    fn over(self, content: &[u8]) -> [u8; 32] {
        match self {
            Sum::Crc32 => {
                let mut out = [0; 32];
                out[..4].copy_from_slice(&crc32fast::hash(content).to_le_bytes());
                out
            }
            Sum::Sha256 => Sha256::digest(content).into(),
        }
    }
}

fn frame(magic: &[u8; 4], meta: &[u8], body: &[u8]) -> Result<Vec<u8>, serde_json::Error> {
    let meta_len = u32::try_from(meta.len()).map_err(serde::ser::Error::custom)?;
    // A kind never written (a test's) gets SHA-256, as the oldest did.
    let sum = Sum::of_kind(magic).unwrap_or(Sum::Sha256);
    let mut out = Vec::with_capacity(8 + meta.len() + body.len() + sum.len());
    out.extend_from_slice(magic);
    out.extend_from_slice(&meta_len.to_le_bytes());
    out.extend_from_slice(meta);
    out.extend_from_slice(body);
    let sum_bytes = sum.over(&out);
    out.extend_from_slice(&sum_bytes[..sum.len()]);
    Ok(out)
}

/// `None` for anything that is not a whole, intact record.
pub(crate) fn decode(bytes: &[u8]) -> Option<StoredResponse> {
    let (meta, body) = parse(bytes)?;
    Some(StoredResponse {
        meta,
        body: bytes::Bytes::copy_from_slice(&bytes[body]),
    })
}

/// As [`decode`], for a record assembled from pieces: the body is a slice
/// of `bytes`, not a copy of it.
pub(crate) fn decode_owned(bytes: Vec<u8>) -> Option<StoredResponse> {
    let (meta, body) = parse(&bytes)?;
    Some(StoredResponse {
        meta,
        body: bytes::Bytes::from(bytes).slice(body),
    })
}

/// A record's metadata, and where its body lies in `bytes`.
fn parse(bytes: &[u8]) -> Option<(CacheEntryMeta, std::ops::Range<usize>)> {
    let (magic, _) = bytes.split_first_chunk::<4>()?;
    let sum = Sum::of_kind(magic)?;
    let split = bytes.len().checked_sub(sum.len())?;
    let (content, stored) = bytes.split_at(split);
    if sum.over(content)[..sum.len()] != *stored {
        return None;
    }
    let (_, rest) = content.split_first_chunk::<4>()?;
    let (len, rest) = rest.split_first_chunk::<4>()?;
    let meta_len = usize::try_from(u32::from_le_bytes(*len)).ok()?;
    if meta_len > rest.len() {
        return None;
    }
    let meta = &rest[..meta_len];
    let meta: CacheEntryMeta = match magic {
        MAGIC | MAGIC_SHA => postcard::from_bytes(meta).ok()?,
        _ => serde_json::from_slice(meta).ok()?,
    };
    Some((meta, 8 + meta_len..split))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mannerly_policy::conditional::http::{request, response, HeaderValue, Request, Response};
    use mannerly_policy::conditional::{storable, CacheKey, CacheParams};
    use std::time::{Duration, SystemTime};

    /// With `obs_text`, one response field is bytes, not text: JSON lost
    /// such a value from the library's policy (it keeps text only), which
    /// the binary form keeps.
    fn meta(obs_text: bool) -> CacheEntryMeta {
        let req: request::Parts = Request::get("http://a.test/p?q=1")
            .header("accept-encoding", "gzip")
            .header("user-agent", "crawler/1")
            .body(())
            .unwrap()
            .into_parts()
            .0;
        let mut resp: response::Parts = Response::builder()
            .status(200)
            .header("etag", "\"v1\"")
            .header("last-modified", "Tue, 01 Dec 2026 10:00:00 GMT")
            .header("cache-control", "max-age=60, must-revalidate")
            .header("vary", "Accept-Encoding")
            .header("link", "</a.css>; rel=preload")
            .header("link", "</b.js>; rel=preload")
            .body(())
            .unwrap()
            .into_parts()
            .0;
        if obs_text {
            resp.headers
                .insert("x-name", HeaderValue::from_bytes(b"caf\xe9").unwrap());
        }
        let key = CacheKey::new(&req.method, "http://a.test/p?q=1").unwrap();
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_000_000);
        storable(&req, &key, &resp, &CacheParams::default(), at).unwrap()
    }

    fn same(a: &CacheEntryMeta, b: &CacheEntryMeta) {
        // JSON values compare maps whatever their order (the policy keeps
        // directives in a HashMap).
        assert_eq!(
            serde_json::to_value(a).unwrap(),
            serde_json::to_value(b).unwrap()
        );
        assert_eq!(a.headers(), b.headers());
    }

    #[test]
    fn a_record_gives_back_its_meta_and_body() {
        let m = meta(true);
        let bytes = encode(&m, b"page body").unwrap();
        assert!(bytes.starts_with(MAGIC));
        let back = decode(&bytes).expect("decodes");
        same(&back.meta, &m);
        assert_eq!(back.body.as_ref(), b"page body");
        assert_eq!(back.meta.headers().get_all("link").iter().count(), 2);
        assert_eq!(
            back.meta.headers().get("x-name").unwrap().as_bytes(),
            b"caf\xe9"
        );
    }

    #[test]
    fn a_record_written_with_a_sha256_sum_before_is_still_read() {
        let m = meta(true);
        let old = frame(MAGIC_SHA, &postcard::to_allocvec(&m).unwrap(), b"old body").unwrap();
        assert_eq!(
            old.len(),
            8 + postcard::to_allocvec(&m).unwrap().len() + 8 + 32
        );
        let back = decode(&old).expect("an MNR2 record decodes");
        same(&back.meta, &m);
        assert_eq!(back.body.as_ref(), b"old body");
    }

    #[test]
    fn a_record_written_as_json_before_is_still_read() {
        let m = meta(false);
        let old = frame(MAGIC_JSON, &serde_json::to_vec(&m).unwrap(), b"old body").unwrap();
        let back = decode(&old).expect("an MNR1 record decodes");
        same(&back.meta, &m);
        assert_eq!(back.body.as_ref(), b"old body");
    }

    #[test]
    fn a_damaged_or_unknown_record_is_none() {
        let good = encode(&meta(false), b"body").unwrap();
        // Every single-bit flip anywhere, the sum included, is caught.
        for at in 0..good.len() {
            for bit in 0..8 {
                let mut bytes = good.clone();
                bytes[at] ^= 1 << bit;
                assert!(decode(&bytes).is_none(), "bit {bit} of byte {at}");
            }
        }
        assert!(decode(&good[..good.len() - 1]).is_none(), "cut short");
        let mut old = frame(
            MAGIC_SHA,
            &postcard::to_allocvec(&meta(false)).unwrap(),
            b"b",
        )
        .unwrap();
        let mid = old.len() / 2;
        old[mid] ^= 1;
        assert!(decode(&old).is_none(), "an MNR2 record's checksum");
        let unknown = frame(b"MNR9", b"{}", b"body").unwrap();
        assert!(decode(&unknown).is_none(), "unknown magic");
        let torn = frame(MAGIC, b"\x01\x02", b"").unwrap();
        assert!(decode(&torn).is_none(), "meta that is not a meta");
    }
}
