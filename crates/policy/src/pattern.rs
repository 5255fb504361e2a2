//! Path patterns of `Allow`/`Disallow` (and Content-Signal paths, and
//! TDMRep's `location`s, which borrow the syntax): percent-encoding
//! normalisation and `*` / `$` matching, RFC 9309 sec. 2.2.2 and 2.2.3.

use std::borrow::Cow;

use crate::hex::digit;

/// A pattern normalised once at parse time.
///
/// `norm` holds the pattern in canonical percent-encoding without a trailing `$`;
/// `*` bytes in it are wildcards. A literal `*` or `$` is always kept escaped
/// (`%2A`, `%24`) on both sides, so it can never be confused with the syntax.
#[derive(Debug, Clone)]
pub(crate) struct Pattern {
    norm: Box<[u8]>,
    anchored: bool,
    /// Bytes before the first `*`: what the index can compare directly.
    literal: usize,
    /// Octets of the canonical pattern (including `*` and a final `$`): the
    /// "most specific match" measure of RFC 9309 sec. 2.2.2.
    specificity: usize,
}

impl Pattern {
    pub(crate) fn new(raw: &str) -> Pattern {
        let bytes = raw.as_bytes();
        let (body, anchored) = match bytes.split_last() {
            Some((b'$', body)) => (body, true),
            _ => (bytes, false),
        };
        let mut norm = Vec::with_capacity(body.len() + 8);
        normalise_into(body, true, &mut norm);
        let literal = norm.iter().position(|&b| b == b'*').unwrap_or(norm.len());
        let specificity = norm.len() + usize::from(anchored);
        Pattern {
            norm: norm.into_boxed_slice(),
            anchored,
            literal,
            specificity,
        }
    }

    pub(crate) fn specificity(&self) -> usize {
        self.specificity
    }

    /// The part of the pattern before its first wildcard.
    pub(crate) fn literal_prefix(&self) -> &[u8] {
        &self.norm[..self.literal]
    }

    /// Whether the pattern matches a normalised path (from [`normalise_path`]).
    pub(crate) fn matches(&self, path: &[u8]) -> bool {
        path.starts_with(self.literal_prefix()) && self.matches_after_prefix(path)
    }

    /// Same as [`Pattern::matches`] for a caller that has already checked
    /// that `path` starts with [`Pattern::literal_prefix`].
    pub(crate) fn matches_after_prefix(&self, path: &[u8]) -> bool {
        let rest_pattern = &self.norm[self.literal..];
        let rest_path = &path[self.literal.min(path.len())..];
        if rest_pattern.is_empty() {
            return !self.anchored || rest_path.is_empty();
        }
        wildcard_match(rest_pattern, rest_path, self.anchored)
    }
}

/// `pattern` starts with `*`. Leftmost placement of each middle segment is
/// enough: it leaves the most room for the rest, and `*` has no other syntax.
fn wildcard_match(pattern: &[u8], text: &[u8], anchored: bool) -> bool {
    let mut segments = pattern.split(|&b| b == b'*').skip(1).peekable();
    let mut pos = 0;
    while let Some(segment) = segments.next() {
        let last = segments.peek().is_none();
        if last && anchored {
            return text.len() - pos >= segment.len() && text.ends_with(segment);
        }
        match find(&text[pos..], segment) {
            Some(at) => pos += at + segment.len(),
            None => return false,
        }
    }
    // The pattern ended with `*` (or `*$`): anything may follow.
    true
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let Some((&first, rest)) = needle.split_first() else {
        return Some(0);
    };
    if haystack.len() < needle.len() {
        return None;
    }
    let last_start = haystack.len() - needle.len();
    let mut i = 0;
    while i <= last_start {
        match haystack[i..=last_start].iter().position(|&b| b == first) {
            None => return None,
            Some(off) => {
                i += off;
                if &haystack[i + 1..i + needle.len()] == rest {
                    return Some(i);
                }
                i += 1;
            }
        }
    }
    None
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn push_escaped(b: u8, out: &mut Vec<u8>) {
    out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xF)]]);
}

/// Whether a byte of a path can be compared as it is. Anything else needs
/// [`normalise_into`]: escapes to canonicalise, octets to escape, and the
/// two characters that are syntax in patterns.
fn is_plain(b: u8) -> bool {
    (0x21..0x7F).contains(&b) && !matches!(b, b'%' | b'*' | b'$')
}

/// Canonical percent-encoding, applied to rules and URLs alike so both sides
/// compare octet for octet: escapes of unreserved characters are decoded, the
/// hex of the others is upper-cased, octets outside printable ASCII (UTF-8 of
/// non-ASCII text, controls, space) are escaped, and a `%` that starts no escape
/// becomes `%25`. In a pattern `*` stays a wildcard and `$` (already stripped
/// when final) is literal; in a URL both are literal, hence escaped.
fn normalise_into(input: &[u8], pattern: bool, out: &mut Vec<u8>) {
    let mut i = 0;
    while i < input.len() {
        let b = input[i];
        if b == b'%' {
            let hi = input.get(i + 1).copied().and_then(digit);
            let lo = input.get(i + 2).copied().and_then(digit);
            if let (Some(hi), Some(lo)) = (hi, lo) {
                let decoded = hi << 4 | lo;
                if is_unreserved(decoded) {
                    out.push(decoded);
                } else {
                    push_escaped(decoded, out);
                }
                i += 3;
                continue;
            }
            push_escaped(b'%', out);
        } else if b == b'*' && pattern {
            out.push(b'*');
        } else if is_plain(b) {
            out.push(b);
        } else {
            push_escaped(b, out);
        }
        i += 1;
    }
}

/// The path+query of `url` in canonical form, borrowed when it already is.
///
/// Accepts a path (`/a/b?c`) or an absolute `scheme://authority` URL of any
/// scheme; the fragment is dropped and an empty path becomes `/`.
pub(crate) fn normalise_path(url: &str) -> Cow<'_, [u8]> {
    let target = path_and_query(url);
    let bytes = target.as_bytes();
    let needs_slash = !bytes.starts_with(b"/");
    if !needs_slash && bytes.iter().all(|&b| is_plain(b)) {
        return Cow::Borrowed(bytes);
    }
    let mut out = Vec::with_capacity(bytes.len() + 16);
    if needs_slash {
        out.push(b'/');
    }
    normalise_into(bytes, false, &mut out);
    Cow::Owned(out)
}

fn path_and_query(url: &str) -> &str {
    let target = match scheme_and_rest(url) {
        Some((_, rest)) => {
            let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            &rest[end..]
        }
        None => url,
    };
    match target.find('#') {
        Some(end) => &target[..end],
        None => target,
    }
}

/// `scheme` and what follows `scheme://`, if `input` starts that way
/// (scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ), RFC 3986 sec. 3.1).
pub(crate) fn scheme_and_rest(input: &str) -> Option<(&str, &str)> {
    // A scan of the scheme's characters, not a search for "://": `:` is not
    // one of them, so the first "://" can only be where the scan stops, and
    // the search's setup was a share of every robots check.
    let bytes = input.as_bytes();
    if !bytes.first()?.is_ascii_alphabetic() {
        return None;
    }
    let end = bytes
        .iter()
        .position(|&b| !(b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')))?;
    let rest = input[end..].strip_prefix("://")?;
    Some((&input[..end], rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(url: &str) -> String {
        String::from_utf8_lossy(&normalise_path(url)).into_owned()
    }

    #[test]
    fn the_scheme_scan_splits_where_the_first_separator_is() {
        // The definition the scan replaced: split at the first "://", then
        // judge what is before it.
        fn by_search(input: &str) -> Option<(&str, &str)> {
            let (scheme, rest) = input.split_once("://")?;
            let mut chars = scheme.chars();
            let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
            let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
            (first_ok && rest_ok).then_some((scheme, rest))
        }
        let inputs = [
            "http://example.com/a",
            "HTTPS://Example.com",
            "svn+ssh://h/x",
            "a.b-c://h",
            "1http://h",
            "://h",
            "",
            "http",
            "http:",
            "http:/",
            "http:/x://y",
            "/x?u=http://y/z",
            "ht tp://h",
            "http://a://b",
            "é://h",
            "hé://h",
            "h://",
        ];
        for input in inputs {
            assert_eq!(scheme_and_rest(input), by_search(input), "{input:?}");
        }
        assert_eq!(scheme_and_rest("http://a://b"), Some(("http", "a://b")));
        assert_eq!(scheme_and_rest("/x?u=http://y/z"), None);
    }

    #[test]
    fn url_forms_reduce_to_path_and_query() {
        assert_eq!(norm("http://example.com/a/b?c=d#frag"), "/a/b?c=d");
        assert_eq!(norm("HTTPS://Example.com"), "/");
        assert_eq!(norm("https://example.com?q=1"), "/?q=1");
        assert_eq!(norm(""), "/");
        assert_eq!(norm("/x?u=http://y/z"), "/x?u=http://y/z");
        assert_eq!(
            norm("http://foo.bar/foo/bar?qux=taz&baz=http://foo.bar?tar&par"),
            "/foo/bar?qux=taz&baz=http://foo.bar?tar&par"
        );
    }

    #[test]
    fn percent_encoding_is_canonical_on_both_sides() {
        assert_eq!(norm("/%7ejoe/%e3%83%84"), "/~joe/%E3%83%84");
        assert_eq!(norm("/ツ"), "/%E3%83%84");
        assert_eq!(norm("/a%2fb"), "/a%2Fb");
        assert_eq!(norm("/100%"), "/100%25");
        assert_eq!(norm("/a*b$"), "/a%2Ab%24");
        assert!(Pattern::new("/%62%61%7A").matches(b"/baz"));
        assert!(Pattern::new("/foo/ツ").matches(&normalise_path("/foo/%e3%83%84")));
        assert!(
            Pattern::new("/file-with-a-%2A.html").matches(&normalise_path("/file-with-a-*.html"))
        );
        assert!(Pattern::new("/price$5").matches(&normalise_path("/price$5")));
    }

    #[test]
    fn wildcards_and_anchor() {
        let p = Pattern::new("/*.php$");
        assert!(p.matches(b"/index.php"));
        assert!(p.matches(b"/a/b.php"));
        assert!(!p.matches(b"/index.php?x"));
        assert!(!p.matches(b"/index.php5"));
        let p = Pattern::new("/fish*.php");
        assert!(p.matches(b"/fish.php"));
        assert!(p.matches(b"/fishheads/catfish.php?parameters"));
        assert!(!p.matches(b"/Fish.PHP"));
        let p = Pattern::new("/a*b*c$");
        assert!(p.matches(b"/abcbc"));
        assert!(p.matches(b"/a-b-c"));
        assert!(!p.matches(b"/a-b-c-"));
        assert!(Pattern::new("/x$").matches(b"/x"));
        assert!(!Pattern::new("/x$").matches(b"/xy"));
        assert!(Pattern::new("*").matches(b"/"));
        assert!(Pattern::new("/*$").matches(b"/anything"));
        assert!(!Pattern::new("/ab*ab$").matches(b"/ab"));
        assert!(Pattern::new("/ab*ab$").matches(b"/abab"));
    }

    #[test]
    fn specificity_counts_octets_of_the_canonical_pattern() {
        assert_eq!(Pattern::new("/x/page.").specificity(), 8);
        assert_eq!(Pattern::new("/*.html").specificity(), 7);
        assert_eq!(Pattern::new("/a$").specificity(), 3);
        assert_eq!(Pattern::new("/ツ").specificity(), 10);
    }
}
