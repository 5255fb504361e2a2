//! URLs as the proxy meets them, written once: a reference joined to its
//! base (RFC 3986 §5.2), the default port of http and https, an origin
//! written with that port left out, and the robots.txt path test. Every
//! copy of these rules elsewhere had drifted (a case-sensitive scheme, a
//! `?q` joined to the directory, a query counted as part of the path).

/// The default port of `http`.
pub const HTTP_PORT: u16 = 80;
/// The default port of `https`.
pub const HTTPS_PORT: u16 = 443;

/// The path of robots.txt (RFC 9309 sec. 2.3).
pub const ROBOTS_TXT: &str = "/robots.txt";

/// The schemes the proxy carries, with their default ports.
const SCHEMES: [(&str, u16); 2] = [("http", HTTP_PORT), ("https", HTTPS_PORT)];

/// `scheme` lower-cased (RFC 3986 §3.1: schemes are case-insensitive) with
/// its default port, when it is one the proxy carries.
pub fn known_scheme(scheme: &str) -> Option<(&'static str, u16)> {
    SCHEMES
        .into_iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(scheme))
}

/// The default port of `scheme` (case-insensitive), for the two schemes
/// the proxy carries.
pub fn default_port(scheme: &str) -> Option<u16> {
    known_scheme(scheme).map(|(_, port)| port)
}

/// Appends `scheme://host[:port]`: the host lower-cased, the port left
/// out when it is absent or `scheme`'s default, as a cache key, a
/// robots.txt scope and `@authority` all write an origin (RFC 3986 §6.2.3).
/// `scheme` is written as given, so callers pass it lower-case.
pub fn push_origin(out: &mut String, scheme: &str, host: &str, port: Option<u16>) {
    out.push_str(scheme);
    out.push_str("://");
    out.extend(host.chars().map(|c| c.to_ascii_lowercase()));
    if let Some(port) = port.filter(|&p| Some(p) != default_port(scheme)) {
        out.push(':');
        out.push_str(itoa::Buffer::new().format(port));
    }
}

/// `authority` (`host[:port]`) without `scheme`'s default port.
pub fn strip_default_port<'a>(scheme: &str, authority: &'a str) -> &'a str {
    let Some((host, port)) = authority.rsplit_once(':') else {
        return authority;
    };
    // `[::1]` alone has colons but no port.
    if host.is_empty() || port.contains(']') {
        return authority;
    }
    match port.parse::<u16>() {
        Ok(p) if Some(p) == default_port(scheme) => host,
        _ => authority,
    }
}

/// `scheme://authority` of an absolute URL (the whole of it when it has no
/// path, query or fragment). Two normalised URLs are of one origin when
/// these are equal.
pub fn origin(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let end = url[after_scheme..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| after_scheme + i);
    &url[..end]
}

/// Whether a request's path (a query after it ignored) is robots.txt, the
/// one resource whose fetch is never refused, held for itself or charged.
pub fn is_robots_txt(path_and_query: impl AsRef<[u8]>) -> bool {
    let path = path_and_query.as_ref();
    let end = path
        .iter()
        .position(|&b| b == b'?' || b == b'#')
        .unwrap_or(path.len());
    &path[..end] == ROBOTS_TXT.as_bytes()
}

/// `reference` resolved against the absolute URL `base` by RFC 3986 §5.2
/// (strict: a reference with a scheme is absolute, `http:g` included), the
/// result's scheme lower-cased (§6.2.2.1). `None` when `base` has no scheme.
pub fn join(base: &str, reference: &str) -> Option<String> {
    let b = Parts::of(base);
    let r = Parts::of(reference);
    let base_scheme = b.scheme?;
    let (scheme, authority, path, query) = if let Some(scheme) = r.scheme {
        (scheme, r.authority, remove_dot_segments(r.path), r.query)
    } else if r.authority.is_some() {
        (
            base_scheme,
            r.authority,
            remove_dot_segments(r.path),
            r.query,
        )
    } else if r.path.is_empty() {
        (
            base_scheme,
            b.authority,
            b.path.to_string(),
            r.query.or(b.query),
        )
    } else if r.path.starts_with('/') {
        (
            base_scheme,
            b.authority,
            remove_dot_segments(r.path),
            r.query,
        )
    } else {
        let merged = merge(&b, r.path);
        (
            base_scheme,
            b.authority,
            remove_dot_segments(&merged),
            r.query,
        )
    };
    // §5.3, component recomposition.
    let mut out = scheme.to_ascii_lowercase();
    out.push(':');
    if let Some(a) = authority {
        out.push_str("//");
        out.push_str(a);
    }
    out.push_str(&path);
    for (mark, part) in [('?', query), ('#', r.fragment)] {
        if let Some(part) = part {
            out.push(mark);
            out.push_str(part);
        }
    }
    Some(out)
}

/// [`join`] without the fragment: the URL a request for the reference
/// goes to (a fragment is never sent).
pub fn join_target(base: &str, reference: &str) -> Option<String> {
    let mut url = join(base, reference)?;
    if let Some(i) = url.find('#') {
        url.truncate(i);
    }
    Some(url)
}

/// A URI reference's five components (RFC 3986 Appendix B); an absent
/// component is `None`, an empty one `Some("")`.
struct Parts<'a> {
    scheme: Option<&'a str>,
    authority: Option<&'a str>,
    path: &'a str,
    query: Option<&'a str>,
    fragment: Option<&'a str>,
}

impl<'a> Parts<'a> {
    fn of(s: &'a str) -> Parts<'a> {
        let (s, fragment) = match s.split_once('#') {
            Some((s, f)) => (s, Some(f)),
            None => (s, None),
        };
        let (s, query) = match s.split_once('?') {
            Some((s, q)) => (s, Some(q)),
            None => (s, None),
        };
        let (scheme, s) = match s.split_once(':') {
            Some((scheme, rest)) if is_scheme(scheme) => (Some(scheme), rest),
            _ => (None, s),
        };
        let (authority, path) = match s.strip_prefix("//") {
            Some(rest) => {
                let end = rest.find('/').unwrap_or(rest.len());
                (Some(&rest[..end]), &rest[end..])
            }
            None => (None, s),
        };
        Parts {
            scheme,
            authority,
            path,
            query,
            fragment,
        }
    }
}

/// `ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )` (§3.1). A first segment
/// with a colon that is not a scheme is a path (`./a:b` is how one is
/// written, §4.2).
fn is_scheme(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// §5.2.3: a relative path below the base's directory.
fn merge(base: &Parts<'_>, path: &str) -> String {
    if base.authority.is_some() && base.path.is_empty() {
        return format!("/{path}");
    }
    let dir = &base.path[..base.path.rfind('/').map_or(0, |i| i + 1)];
    format!("{dir}{path}")
}

/// §5.2.4: `.` and `..` segments taken out of a path.
fn remove_dot_segments(path: &str) -> String {
    let mut input = path;
    let mut out = String::with_capacity(path.len());
    while !input.is_empty() {
        if let Some(rest) = input
            .strip_prefix("../")
            .or_else(|| input.strip_prefix("./"))
        {
            input = rest;
        } else if input.starts_with("/./") {
            input = &input[2..];
        } else if input == "/." {
            input = "/";
        } else if input.starts_with("/../") || input == "/.." {
            input = if input == "/.." { "/" } else { &input[3..] };
            out.truncate(out.rfind('/').unwrap_or(0));
        } else if input == "." || input == ".." {
            input = "";
        } else {
            // The first segment, with its leading "/" if any.
            let start = usize::from(input.starts_with('/'));
            let end = input[start..].find('/').map_or(input.len(), |i| start + i);
            out.push_str(&input[..end]);
            input = &input[end..];
        }
    }
    out
}

#[cfg(test)]
mod tests;
