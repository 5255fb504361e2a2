//! Hex: the lower-case digits of the log's chain values, keys and
//! signatures and of the store's variant and page keys, and the value of a
//! digit of a percent-encoded URL or robots.txt path. A module of its own
//! so that `audit`, `conditional` and `pattern` need not import each other.

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

/// The value of one hex digit, either case (percent-encoding allows
/// both).
pub(crate) fn digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{digit, hex};

    #[test]
    fn every_byte_is_two_lower_case_digits() {
        let all: Vec<u8> = (0..=255).collect();
        let want: String = all.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex(&all), want);
        assert_eq!(hex(&[]), "");
    }

    #[test]
    fn a_digit_is_read_in_either_case_and_nothing_else_is() {
        for b in 0..=255u8 {
            let want = (b as char).to_digit(16).map(|d| d as u8);
            assert_eq!(digit(b), want, "{b:#04x}");
        }
    }
}
