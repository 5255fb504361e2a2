//! "did you mean": the same key name in another table (`[proxy]
//! allow_private` is `upstream.allow_private`), else the nearest known key
//! by edit distance.

use toml::{Table, Value};

use super::schema::{dotted, leaves};

/// A suggestion for the unknown segment `path[at]`, given the keys that
/// exist at that level.
pub fn hint(schema: &Table, path: &[String], at: usize, siblings: &[String]) -> Option<String> {
    let word = path.get(at)?;
    // The same key name in another table first: an exact name put in the
    // wrong table (`[proxy] allow_private`) beats a fuzzy sibling
    // (`proxy.allow`).
    if at + 1 == path.len() {
        let elsewhere: Vec<String> = leaves(schema)
            .into_iter()
            .filter(|(p, v)| p.last() == Some(word) && !matches!(v, Value::Table(_)))
            .map(|(p, _)| dotted(&p))
            .collect();
        if let [one] = elsewhere.as_slice() {
            return Some(one.clone());
        }
    }
    let best = nearest(word, siblings.iter().map(String::as_str))?;
    let mut fixed = path[..=at].to_vec();
    fixed[at] = best.to_string();
    fixed.extend_from_slice(&path[at + 1..]);
    Some(dotted(&fixed))
}

/// The closest candidate within a distance that still looks like a typo.
pub fn nearest<'a>(word: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let word = word.to_ascii_lowercase();
    let limit = (word.chars().count() / 3).max(2);
    candidates
        .map(|c| {
            // `listen_addr` for `listen`: a known key with something added.
            let extended = c.len() >= 4 && (word.starts_with(c) || c.starts_with(&word));
            let d = strsim::damerau_levenshtein(&word, c);
            (if extended { d.min(limit) } else { d }, c)
        })
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_find_their_key() {
        let keys = ["listen", "connect_ports", "intercept"];
        assert_eq!(nearest("listne", keys.into_iter()), Some("listen"));
        assert_eq!(
            nearest("conect_port", keys.into_iter()),
            Some("connect_ports")
        );
        assert_eq!(nearest("colour", keys.into_iter()), None);
    }
}
