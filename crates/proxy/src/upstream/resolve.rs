//! `upstream.resolve`: name resolution overrides, like curl's `--resolve`,
//! with wildcard names so that many names can point at one origin
//! (`"*.test:80" = "127.0.0.1:18080"`). An exact name wins over a
//! wildcard; of two wildcards the longer suffix wins.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;

use crate::config::resolve_key;
use crate::error::ConfigError;

/// The overrides of `upstream.resolve`, ready for lookups.
#[derive(Debug, Default)]
pub(crate) struct Overrides {
    exact: HashMap<(String, u16), SocketAddr>,
    /// `(".suffix", port, addr)`, longest suffix first.
    wildcards: Vec<(String, u16, SocketAddr)>,
}

impl Overrides {
    /// Reads the `"name:port" = "ip:port"` table; names are compared
    /// without regard to case.
    pub(crate) fn new(table: &BTreeMap<String, SocketAddr>) -> Result<Overrides, ConfigError> {
        let mut o = Overrides::default();
        for (key, addr) in table {
            let (name, port) = resolve_key(key)?;
            match name.strip_prefix('*') {
                Some(suffix) => o.wildcards.push((suffix.to_string(), port, *addr)),
                None => {
                    o.exact.insert((name, port), *addr);
                }
            }
        }
        o.wildcards.sort_by_key(|w| std::cmp::Reverse(w.0.len()));
        Ok(o)
    }

    /// The address `host:port` is pinned to, if any.
    pub(crate) fn get(&self, host: &str, port: u16) -> Option<SocketAddr> {
        let host = host.to_ascii_lowercase();
        let host = host.strip_suffix('.').unwrap_or(&host);
        if let Some(a) = self.exact.get(&(host.to_string(), port)) {
            return Some(*a);
        }
        self.wildcards
            .iter()
            .find(|(suffix, p, _)| {
                *p == port && host.len() > suffix.len() && host.ends_with(suffix.as_str())
            })
            .map(|(_, _, a)| *a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(pairs: &[(&str, &str)]) -> BTreeMap<String, SocketAddr> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
            .collect()
    }

    #[test]
    fn exact_names_win_over_wildcards_and_longer_suffixes_over_shorter() {
        let o = Overrides::new(&table(&[
            ("*.test:80", "127.0.0.1:1"),
            ("*.deep.test:80", "127.0.0.1:2"),
            ("exact.deep.test:80", "127.0.0.1:3"),
            ("Upper.Example:443", "127.0.0.1:4"),
        ]))
        .unwrap();
        let port = |h: &str, p| o.get(h, p).map(|a| a.port());
        assert_eq!(port("a.test", 80), Some(1));
        assert_eq!(port("b.a.test", 80), Some(1));
        assert_eq!(port("x.deep.test", 80), Some(2));
        assert_eq!(port("exact.deep.test", 80), Some(3));
        assert_eq!(port("EXACT.deep.test.", 80), Some(3));
        assert_eq!(port("upper.example", 443), Some(4));
        // The bare suffix, another port, another name: not pinned.
        assert_eq!(port("test", 80), None);
        assert_eq!(port("a.test", 443), None);
        assert_eq!(port("atest", 80), None);
    }

    #[test]
    fn malformed_keys_name_the_key() {
        for bad in [
            "*:80",
            "a.*.test:80",
            "**.test:80",
            "*.:80",
            "name",
            "name:x",
            ":80",
        ] {
            let err = Overrides::new(&table(&[(bad, "127.0.0.1:1")])).unwrap_err();
            assert!(
                err.to_string()
                    .contains(&format!("upstream.resolve.\"{bad}\"")),
                "{bad}: {err}"
            );
        }
    }
}
