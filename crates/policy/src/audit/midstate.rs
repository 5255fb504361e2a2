//! A line's chain value recomputed without the chain value before it.
//!
//! `chain = SHA-256(previous chain ‖ content)`, and the previous chain, in
//! hex, is exactly one 64-byte SHA-256 block. The hash's state after that
//! block (its "midstate") is all a verifier needs to finish the hash over
//! the content, and it does not give the previous chain back (that would
//! be a preimage of SHA-256's compression function). Evidence for a site
//! carries it for each of the site's lines under a format-5 checkpoint,
//! whose line tree has the chain values as its leaves: the line is proven
//! without showing the chain value of the line before it, which may be
//! another host's last line, whose host entry it would let a guessed name
//! be tested against.

use sha2::digest::generic_array::GenericArray;

/// SHA-256's initial state (FIPS 180-4 §5.3.3).
const IV: [u32; 8] = [
    0x6a09_e667,
    0xbb67_ae85,
    0x3c6e_f372,
    0xa54f_f53a,
    0x510e_527f,
    0x9b05_688c,
    0x1f83_d9ab,
    0x5be0_cd19,
];

/// The state after the block that is `prev_chain` (64 hex characters),
/// as 32 bytes (the eight words big-endian); `None` for anything else.
pub(crate) fn chain_state(prev_chain: &str) -> Option<[u8; 32]> {
    let block: &[u8; 64] = prev_chain.as_bytes().try_into().ok()?;
    let mut state = IV;
    sha2::compress256(&mut state, &[*GenericArray::from_slice(block)]);
    Some(words_out(&state))
}

/// The chain value of `content` after the chain whose state is `state`
/// ([`chain_state`]): SHA-256 finished over the content, counting the
/// 64 bytes already in the state.
pub(crate) fn chain_from_state(state: &[u8; 32], content: &[u8]) -> [u8; 32] {
    let mut words = [0u32; 8];
    for (w, b) in words.iter_mut().zip(state.chunks_exact(4)) {
        *w = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    }
    let whole = content.len() / 64 * 64;
    for block in content[..whole].chunks_exact(64) {
        sha2::compress256(&mut words, &[*GenericArray::from_slice(block)]);
    }
    // The padding: 0x80, zeros, then the message's length in bits (the
    // 64-byte block of the state included) in the last 8 bytes.
    let rest = &content[whole..];
    let mut tail = [0u8; 128];
    tail[..rest.len()].copy_from_slice(rest);
    tail[rest.len()] = 0x80;
    let end = if rest.len() + 9 <= 64 { 64 } else { 128 };
    let bits = (64 + content.len() as u64) * 8;
    tail[end - 8..end].copy_from_slice(&bits.to_be_bytes());
    for block in tail[..end].chunks_exact(64) {
        sha2::compress256(&mut words, &[*GenericArray::from_slice(block)]);
    }
    words_out(&words)
}

fn words_out(words: &[u32; 8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (o, w) in out.chunks_exact_mut(4).zip(words) {
        o.copy_from_slice(&w.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::checkpoint::hex;
    use crate::audit::{digest, GENESIS};

    /// Finishing from the state is the chain `digest` makes, for content
    /// of every length around the block and padding edges.
    #[test]
    fn finishing_from_the_state_is_the_chain_value() {
        let prev = digest(GENESIS, "{\"a\":1}");
        let state = chain_state(&prev).unwrap();
        for len in 0..300 {
            let content: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            assert_eq!(
                hex(&chain_from_state(&state, &content)),
                digest(&prev, &content),
                "content of {len} bytes"
            );
        }
        assert_eq!(chain_state("short"), None);
    }
}
