//! The bytes of one stored response: metadata, body and a checksum over both.
//!
//! ```text
//! "MNR1" | meta length (u32 LE) | meta (JSON) | body | SHA-256 of all before
//! ```
//!
//! The database commits atomically, so a crash cannot tear a record; the
//! checksum catches everything else (a damaged disk, a bug, a hand edit).

use mannerly_policy::conditional::CacheEntryMeta;
use sha2::{Digest, Sha256};

use super::StoredResponse;

const MAGIC: &[u8; 4] = b"MNR1";
const SUM: usize = 32;

pub(crate) fn encode(meta: &CacheEntryMeta, body: &[u8]) -> Result<Vec<u8>, serde_json::Error> {
    let meta = serde_json::to_vec(meta)?;
    let meta_len = u32::try_from(meta.len()).map_err(serde::ser::Error::custom)?;
    let mut out = Vec::with_capacity(8 + meta.len() + body.len() + SUM);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&meta_len.to_le_bytes());
    out.extend_from_slice(&meta);
    out.extend_from_slice(body);
    let sum = Sha256::digest(&out);
    out.extend_from_slice(&sum);
    Ok(out)
}

/// `None` for anything that is not a whole, intact record.
pub(crate) fn decode(bytes: &[u8]) -> Option<StoredResponse> {
    let split = bytes.len().checked_sub(SUM)?;
    let (content, sum) = bytes.split_at(split);
    if Sha256::digest(content).as_slice() != sum {
        return None;
    }
    let rest = content.strip_prefix(MAGIC)?;
    let (len, rest) = rest.split_first_chunk::<4>()?;
    let meta_len = usize::try_from(u32::from_le_bytes(*len)).ok()?;
    if meta_len > rest.len() {
        return None;
    }
    let (meta, body) = rest.split_at(meta_len);
    let meta: CacheEntryMeta = serde_json::from_slice(meta).ok()?;
    Some(StoredResponse {
        meta,
        body: bytes::Bytes::copy_from_slice(body),
    })
}
