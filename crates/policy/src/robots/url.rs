//! What a URL given to the matcher means: a path (`/a?b`), or any
//! `scheme://authority/path` (RFC 9309 sec. 2.3 applies to any URI scheme
//! with an authority, not only http and https). Anything else is refused,
//! never guessed at: `ftp:/x` or `example.com/x` read as paths would be
//! checked against the wrong rules.

use std::borrow::Cow;

use crate::pattern::scheme_and_rest;

/// A URL split into what robots.txt matching needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitUrl<'a> {
    /// The scheme, as written (`ftp`), or `None` for a bare path.
    pub scheme: Option<&'a str>,
    /// The authority (`user@host:port`), or `None` for a bare path.
    pub authority: Option<&'a str>,
    /// Path and query, without the fragment; `/` when the URL has no path.
    pub path_and_query: Cow<'a, str>,
}

/// Why a string is no URL the matcher can answer for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// Neither a path starting with `/` nor `scheme://…`.
    #[error("{input:?} is neither a path starting with / nor a scheme://authority URL")]
    NotAUrl {
        /// What was given.
        input: String,
    },
    /// `scheme://` with nothing before the path.
    #[error("{input:?} has no authority (host) after ://")]
    NoAuthority {
        /// What was given.
        input: String,
    },
    /// Whitespace or control characters, which no URL holds.
    #[error("{input:?} contains whitespace or control characters")]
    BadCharacter {
        /// What was given.
        input: String,
    },
}

/// Splits `input` into scheme, authority and path+query, or says why not.
pub fn split_url(input: &str) -> Result<SplitUrl<'_>, UrlError> {
    if input.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(UrlError::BadCharacter {
            input: input.to_string(),
        });
    }
    if input.starts_with('/') && !input.starts_with("//") {
        return Ok(SplitUrl {
            scheme: None,
            authority: None,
            path_and_query: Cow::Borrowed(without_fragment(input)),
        });
    }
    let Some((scheme, rest)) = scheme_and_rest(input) else {
        return Err(UrlError::NotAUrl {
            input: input.to_string(),
        });
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if authority.is_empty() {
        return Err(UrlError::NoAuthority {
            input: input.to_string(),
        });
    }
    let tail = without_fragment(tail);
    Ok(SplitUrl {
        scheme: Some(scheme),
        authority: Some(authority),
        path_and_query: if tail.starts_with('/') {
            Cow::Borrowed(tail)
        } else {
            Cow::Owned(format!("/{tail}"))
        },
    })
}

fn without_fragment(s: &str) -> &str {
    s.split_once('#').map_or(s, |(before, _)| before)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_scheme_with_an_authority() {
        let u = split_url("ftp://example.net/foo.html").ok();
        assert_eq!(
            u,
            Some(SplitUrl {
                scheme: Some("ftp"),
                authority: Some("example.net"),
                path_and_query: "/foo.html".into()
            })
        );
        let u = split_url("HTTPS://user@example.org:8443?q=1#top").ok();
        assert_eq!(u.map(|u| u.path_and_query), Some("/?q=1".into()));
        assert_eq!(
            split_url("coap+tcp://[::1]:5683/a")
                .ok()
                .map(|u| u.authority),
            Some(Some("[::1]:5683"))
        );
        assert_eq!(
            split_url("/a/b?c#d").ok().map(|u| u.path_and_query),
            Some("/a/b?c".into())
        );
    }

    #[test]
    fn anything_else_is_an_error_not_a_path() {
        for bad in [
            "example.com/foo",
            "ftp:/foo",
            "mailto:a@b.c",
            "1http://x/",
            "//example.com/x",
            "",
            "foo",
        ] {
            assert!(
                matches!(split_url(bad), Err(UrlError::NotAUrl { .. })),
                "{bad:?}"
            );
        }
        assert!(matches!(
            split_url("ftp:///x"),
            Err(UrlError::NoAuthority { .. })
        ));
        assert!(matches!(
            split_url("http://a b/"),
            Err(UrlError::BadCharacter { .. })
        ));
    }
}
