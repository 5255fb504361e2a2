//! Lower-case hex: the log's chain values, keys and signatures, and the
//! store's variant and page keys. A module of its own so that both may use
//! it without importing each other.

/// The digits of lower-case hex.
pub(crate) const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    // Into bytes, then checked once: a `char` pushed at a time is encoded
    // and its room checked each (every audit line's chain is hex).
    let mut s = vec![0; bytes.len() * 2];
    for (pair, b) in s.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 15)];
    }
    String::from_utf8(s).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::hex;

    #[test]
    fn every_byte_is_two_lower_case_digits() {
        let all: Vec<u8> = (0..=255).collect();
        let want: String = all.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex(&all), want);
        assert_eq!(hex(&[]), "");
    }
}
