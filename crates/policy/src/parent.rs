//! Chaining to a parent proxy (a corporate egress proxy or a proxy
//! provider): the parent's URL, which targets skip it (`NO_PROXY` rules),
//! and whose answer a response is — the target's, or the parent's own.
//!
//! Everything else (robots.txt, budgets, validators, signatures, the audit)
//! stays keyed on the target; nothing here knows the parent's address.

use std::fmt;

use http::{HeaderMap, HeaderName};

use crate::parse_host_ip;

/// Why a parent proxy setting cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParentError {
    /// `upstream.proxy` is not `http://[user:pass@]host[:port]` or `https://…`.
    #[error("{0}")]
    Url(String),
    /// An `upstream.no_proxy` entry is neither a name, a `.suffix`, an IP,
    /// a CIDR nor `*`.
    #[error("{entry:?}: {why}")]
    NoProxy {
        /// The entry as written.
        entry: String,
        /// What is wrong with it.
        why: String,
    },
}

/// `upstream.proxy`, parsed. Its `Debug` and `Display` never show the
/// password.
#[derive(Clone, PartialEq, Eq)]
pub struct ParentUrl {
    /// TLS to the parent itself (`https://`).
    pub tls: bool,
    /// The parent's host name or IP (IPv6 without brackets).
    pub host: String,
    /// The parent's port (default 3128 for `http://`, 443 for `https://`).
    pub port: u16,
    /// Percent-decoded user name, if any.
    pub user: Option<String>,
    /// Percent-decoded password, if any.
    pub password: Option<String>,
}

impl ParentUrl {
    /// Parses `http://[user[:pass]@]host[:port][/]` or `https://…`.
    pub fn parse(url: &str) -> Result<ParentUrl, ParentError> {
        let bad = |why: &str| ParentError::Url(why.to_string());
        let (tls, rest) = if let Some(r) = strip_prefix_ci(url, "http://") {
            (false, r)
        } else if let Some(r) = strip_prefix_ci(url, "https://") {
            (true, r)
        } else {
            return Err(bad("must start with http:// or https://"));
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#']) {
            return Err(bad("a proxy URL has no path: http://[user:pass@]host:port"));
        }
        let (userinfo, hostport) = match rest.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, rest),
        };
        let (user, password) = match userinfo {
            None => (None, None),
            Some(u) => {
                let (name, pass) = match u.split_once(':') {
                    Some((n, p)) => (n, Some(p)),
                    None => (u, None),
                };
                let name = percent_decode(name).ok_or_else(|| bad("bad %-escape in the user"))?;
                let pass = pass
                    .map(|p| percent_decode(p).ok_or_else(|| bad("bad %-escape in the password")))
                    .transpose()?;
                (Some(name), pass)
            }
        };
        let (host, port) = split_host_port(hostport)
            .ok_or_else(|| bad("expected host[:port] after the scheme"))?;
        let port = port.unwrap_or(if tls { crate::url::HTTPS_PORT } else { 3128 });
        Ok(ParentUrl {
            tls,
            host: host.to_ascii_lowercase(),
            port,
            user,
            password,
        })
    }

    /// The `Proxy-Authorization` value (`Basic …`) when credentials are set.
    pub fn basic_auth(&self) -> Option<String> {
        use base64::Engine as _;
        let user = self.user.as_deref()?;
        let pair = format!("{user}:{}", self.password.as_deref().unwrap_or(""));
        Some(format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(pair)
        ))
    }

    /// `host:port` as written in a CONNECT line or a Host header.
    pub fn authority(&self) -> String {
        authority(&self.host, self.port)
    }
}

impl fmt::Display for ParentUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        let creds = match (&self.user, &self.password) {
            (Some(u), Some(_)) => format!("{u}:***@"),
            (Some(u), None) => format!("{u}@"),
            _ => String::new(),
        };
        write!(f, "{scheme}://{creds}{}", self.authority())
    }
}

impl fmt::Debug for ParentUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ParentUrl({self})")
    }
}

/// `upstream.no_proxy`: the targets reached directly, with the usual
/// `NO_PROXY` matching (curl, Go): `*` is every target; a name matches
/// itself and every name under it (`example.org` and `.example.org` alike);
/// an IP or CIDR matches targets written as IP addresses; `name:port`
/// matches that port only.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NoProxy {
    all: bool,
    names: Vec<(String, Option<u16>)>,
    nets: Vec<(crate::Cidr, Option<u16>)>,
}

impl NoProxy {
    /// Reads the entries; an empty list sends every target via the parent.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<NoProxy, ParentError> {
        let mut np = NoProxy::default();
        for raw in entries {
            let entry = raw.as_ref().trim();
            let bad = |why: &str| ParentError::NoProxy {
                entry: entry.to_string(),
                why: why.to_string(),
            };
            if entry.is_empty() {
                continue;
            }
            if entry == "*" {
                np.all = true;
                continue;
            }
            if let Some((net, bits)) = entry.split_once('/') {
                let ip = parse_host_ip(net).ok_or_else(|| bad("a CIDR is ip/bits"))?;
                let max = if ip.is_ipv4() { 32 } else { 128 };
                let bits = bits
                    .parse::<u8>()
                    .ok()
                    .filter(|b| *b <= max)
                    .ok_or_else(|| bad("a CIDR's prefix length is 0-32 (IPv4) or 0-128 (IPv6)"))?;
                np.nets.push((crate::Cidr::new(ip, bits), None));
                continue;
            }
            let (host, port) = split_host_port(entry)
                .ok_or_else(|| bad("expected a name, .suffix, IP or CIDR"))?;
            if let Some(ip) = parse_host_ip(host) {
                np.nets.push((crate::Cidr::new(ip, 128), port));
                continue;
            }
            let name = host.trim_start_matches("*.").trim_start_matches('.');
            let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
            if name.is_empty() || name.contains('*') {
                return Err(bad("expected a name, .suffix, IP or CIDR"));
            }
            np.names.push((name, port));
        }
        Ok(np)
    }

    /// Whether `host:port` is reached directly, not via the parent.
    pub fn matches(&self, host: &str, port: u16) -> bool {
        if self.all {
            return true;
        }
        let port_ok = |p: &Option<u16>| p.is_none_or(|p| p == port);
        if let Some(ip) = parse_host_ip(host) {
            return self
                .nets
                .iter()
                .any(|(net, p)| port_ok(p) && net.contains(ip));
        }
        let host = host.to_ascii_lowercase();
        let host = host.strip_suffix('.').unwrap_or(&host);
        self.names.iter().any(|(name, p)| {
            port_ok(p)
                && (host == name
                    || (host.len() > name.len()
                        && host.ends_with(name.as_str())
                        && host.as_bytes()[host.len() - name.len() - 1] == b'.'))
        })
    }
}

/// Whose answer a response that came through the parent is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParentVerdict {
    /// The target's: the budget learns from `status`, which differs from
    /// the HTTP status when the provider carries it in `upstream.status_header`.
    Target {
        /// The target's status.
        status: u16,
        /// Set when the status came from the status header.
        from_header: bool,
    },
    /// The parent's own refusal or failure; the target never answered, so
    /// its budget learns nothing.
    Parent {
        /// Plain words naming the parent's status and its reason.
        why: String,
    },
}

/// Judges a response that came through the parent.
///
/// - 407 is always the parent's (it is about the proxy credentials).
/// - With `status_header` set: its value, when present, is the target's
///   status; absent on an error status, the provider answered on its own.
/// - A parent marks its own error pages: squid with `X-Squid-Error`, and
///   RFC 9209 proxies with a `Proxy-Status` that names an `error`.
///   An unmarked status is the target's, passed on by the parent.
pub fn judge_parent_answer(
    status: u16,
    headers: &HeaderMap,
    status_header: Option<&HeaderName>,
) -> ParentVerdict {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if status == 407 {
        return ParentVerdict::Parent {
            why: "the parent proxy refused our credentials (407 Proxy Authentication Required); check the user and password in upstream.proxy".into(),
        };
    }
    if let Some(name) = status_header {
        let carried = headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u16>().ok())
            .filter(|s| (100..=999).contains(s));
        match carried {
            Some(s) => {
                return ParentVerdict::Target {
                    status: s,
                    from_header: true,
                }
            }
            None if status >= 400 => {
                return ParentVerdict::Parent {
                    why: format!(
                        "the parent proxy answered {status} without a target status in {name}"
                    ),
                }
            }
            None => {}
        }
    }
    if status >= 400 {
        if let Some(err) = text("x-squid-error") {
            return ParentVerdict::Parent {
                why: format!("the parent proxy answered {status} ({err})"),
            };
        }
        if let Some(ps) = text("proxy-status").filter(|v| v.contains("error=")) {
            return ParentVerdict::Parent {
                why: format!("the parent proxy answered {status} (Proxy-Status: {ps})"),
            };
        }
    }
    ParentVerdict::Target {
        status,
        from_header: false,
    }
}

/// The reason phrase of a parent's answer to CONNECT, in words.
pub fn connect_refused_words(status: u16, reason: &str) -> String {
    match status {
        407 => "the parent proxy refused our credentials for CONNECT (407 Proxy Authentication Required); check the user and password in upstream.proxy".into(),
        _ => format!("the parent proxy refused CONNECT: {status} {}", reason.trim()),
    }
}

/// `host:port` as written in a CONNECT line or a Host header: an IPv6
/// address gets its brackets (unless it has them already).
pub fn authority(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `host`, `host:port`, `[v6]`, `[v6]:port`, or a bare IPv6 address.
fn split_host_port(s: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p.parse().ok()?),
            None if after.is_empty() => None,
            None => return None,
        };
        return (!host.is_empty()).then_some((host, port));
    }
    if s.matches(':').count() > 1 {
        return s.parse::<std::net::Ipv6Addr>().ok().map(|_| (s, None));
    }
    let (host, port) = match s.split_once(':') {
        Some((h, p)) => (h, Some(p.parse().ok()?)),
        None => (s, None),
    };
    let valid = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'*'));
    valid.then_some((host, port))
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_urls_parse_and_never_show_the_password() {
        let p = ParentUrl::parse("http://crawl%40corp:s3cr%3At@Egress.Corp:8080/").unwrap();
        assert!(!p.tls);
        assert_eq!((p.host.as_str(), p.port), ("egress.corp", 8080));
        assert_eq!(p.user.as_deref(), Some("crawl@corp"));
        assert_eq!(p.password.as_deref(), Some("s3cr:t"));
        assert_eq!(p.to_string(), "http://crawl@corp:***@egress.corp:8080");
        assert!(!format!("{p:?}").contains("s3cr"));
        // base64("crawl@corp:s3cr:t")
        assert_eq!(
            p.basic_auth().as_deref(),
            Some("Basic Y3Jhd2xAY29ycDpzM2NyOnQ=")
        );
        let p = ParentUrl::parse("https://[::1]").unwrap();
        assert!(p.tls);
        assert_eq!((p.host.as_str(), p.port), ("::1", 443));
        assert_eq!(p.authority(), "[::1]:443");
        assert_eq!(p.basic_auth(), None);
        assert_eq!(ParentUrl::parse("http://proxy").unwrap().port, 3128);
        for bad in [
            "proxy:3128",
            "socks5://proxy:1080",
            "http://",
            "http://proxy:x",
            "http://proxy/path",
            "http://u:%zz@proxy",
        ] {
            assert!(ParentUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn no_proxy_matches_like_curl_and_go() {
        let np = NoProxy::parse(&[
            "internal.example",
            ".corp",
            "10.0.0.0/8",
            "192.168.1.7",
            "api.test:8443",
            "[::1]",
        ])
        .unwrap();
        for (host, port) in [
            ("internal.example", 80),
            ("a.internal.example", 443),
            ("INTERNAL.example.", 80),
            ("corp", 80),
            ("x.y.corp", 80),
            ("10.1.2.3", 80),
            ("192.168.1.7", 443),
            ("api.test", 8443),
            ("::1", 80),
        ] {
            assert!(
                np.matches(host, port),
                "{host}:{port} should skip the parent"
            );
        }
        for (host, port) in [
            ("notinternal.example", 80),
            ("example", 80),
            ("corp.example", 80),
            ("11.0.0.1", 80),
            ("192.168.1.8", 80),
            ("api.test", 443),
            ("::2", 80),
        ] {
            assert!(
                !np.matches(host, port),
                "{host}:{port} should use the parent"
            );
        }
        assert!(NoProxy::parse(&["*"])
            .unwrap()
            .matches("anything.example", 1));
        assert!(!NoProxy::default().matches("anything.example", 1));
        for bad in ["10.0.0.0/33", "a b", "http://x", "*.", "fe80::/129"] {
            assert!(NoProxy::parse(&[bad]).is_err(), "{bad}");
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn whose_answer_it_is() {
        let sh = HeaderName::from_static("original_status");
        let target = |status, from_header| ParentVerdict::Target {
            status,
            from_header,
        };
        // A provider carrying the target's 429 in a 200.
        let h = headers(&[("original_status", "429"), ("cb_status", "706")]);
        assert_eq!(judge_parent_answer(200, &h, Some(&sh)), target(429, true));
        // No header on a success: the HTTP status is the target's.
        assert_eq!(
            judge_parent_answer(200, &headers(&[]), Some(&sh)),
            target(200, false)
        );
        // No header on an error: the provider's own.
        assert!(matches!(
            judge_parent_answer(520, &headers(&[]), Some(&sh)),
            ParentVerdict::Parent { .. }
        ));
        // 407 whatever else.
        assert!(matches!(
            judge_parent_answer(407, &h, Some(&sh)),
            ParentVerdict::Parent { .. }
        ));
        // squid's and RFC 9209 error pages.
        let squid = headers(&[("x-squid-error", "ERR_CONNECT_FAIL 111")]);
        match judge_parent_answer(503, &squid, None) {
            ParentVerdict::Parent { why } => assert!(why.contains("ERR_CONNECT_FAIL"), "{why}"),
            other => panic!("{other:?}"),
        }
        let ps = headers(&[("proxy-status", "egress; error=connection_refused")]);
        assert!(matches!(
            judge_parent_answer(502, &ps, None),
            ParentVerdict::Parent { .. }
        ));
        // An origin's own 502 or 429, passed on.
        assert_eq!(
            judge_parent_answer(502, &headers(&[]), None),
            target(502, false)
        );
        assert_eq!(
            judge_parent_answer(429, &headers(&[]), None),
            target(429, false)
        );
        // A garbled status header is no status.
        let junk = headers(&[("original_status", "soon")]);
        assert_eq!(
            judge_parent_answer(200, &junk, Some(&sh)),
            target(200, false)
        );
    }
}
