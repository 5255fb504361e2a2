//! The two forms a Web Bot Auth signature is sent in, and which host gets
//! which.
//!
//! They differ in `Signature-Agent` and in how the signature covers it:
//!
//! - directory-03 (draft-meunier-http-message-signatures-directory-03, what
//!   Cloudflare's production verifier and its `web-bot-auth` npm package
//!   read): `Signature-Agent: "https://crawler.example"`, one String naming
//!   the origin whose `/.well-known/http-message-signatures-directory`
//!   lists the key, covered as the whole field, `"signature-agent"`.
//! - 01 (draft-ietf-webbotauth-httpsig-protocol-01): `Signature-Agent:
//!   sig1="https://…/directory"`, a Dictionary whose member (named like the
//!   signature) is the key directory's URL, covered as that member alone,
//!   `"signature-agent";key="sig1"`. Cloudflare's package signs and checks
//!   the whole field for that identifier too, so no signature of this form
//!   verifies there.

use serde::{Deserialize, Serialize};

/// The form of a request's signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Form {
    /// draft-meunier-http-message-signatures-directory-03: the origin as
    /// one String, the whole field covered.
    #[default]
    #[serde(rename = "directory-03")]
    Directory03,
    /// draft-ietf-webbotauth-httpsig-protocol-01: a keyed Dictionary
    /// member holding the directory URL, that member covered.
    #[serde(rename = "01")]
    Draft01,
}

impl Form {
    /// The name the configuration and the audit line use.
    pub fn as_str(self) -> &'static str {
        match self {
            Form::Directory03 => "directory-03",
            Form::Draft01 => "01",
        }
    }
}

/// The form every host gets, and the hosts that get another one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Forms {
    default: Form,
    /// Host patterns (`example.org`, `*.example.org`), lower case, no
    /// trailing dot, with their form.
    hosts: Vec<(String, Form)>,
}

impl Forms {
    /// `default` for every host but those `hosts` names (`example.org`
    /// that host, `*.example.org` its subdomains).
    pub fn new(default: Form, hosts: impl IntoIterator<Item = (String, Form)>) -> Forms {
        Forms {
            default,
            hosts: hosts
                .into_iter()
                .map(|(h, f)| (normalise(&h), f))
                .filter(|(h, _)| !h.is_empty())
                .collect(),
        }
    }

    /// One form for every host.
    pub fn only(form: Form) -> Forms {
        Forms::new(form, [])
    }

    /// The form for `host` (no port): a pattern naming the host itself
    /// wins over any `*.` pattern, and of those the longest wins.
    pub fn for_host(&self, host: &str) -> Form {
        let host = normalise(host);
        let exact = self.hosts.iter().find(|(p, _)| *p == host);
        let wildcard = || {
            self.hosts
                .iter()
                .filter(|(p, _)| p.starts_with("*.") && host_matches(p, &host))
                .max_by_key(|(p, _)| p.len())
        };
        exact
            .or_else(wildcard)
            .map_or(self.default, |(_, form)| *form)
    }

    /// Whether any host is signed in `form`.
    pub fn uses(&self, form: Form) -> bool {
        self.default == form || self.hosts.iter().any(|(_, f)| *f == form)
    }
}

fn normalise(host: &str) -> String {
    host.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// Whether `host` (lower case) is what `pattern` names: itself, or with
/// `*.parent` any subdomain of `parent` (not `parent` itself).
pub(crate) fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(parent) => host
            .strip_suffix(parent)
            .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
        None => pattern == host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_of_its_own_beats_a_wildcard_and_the_longest_wildcard_wins() {
        let forms = Forms::new(
            Form::Directory03,
            [
                ("*.example.org".to_string(), Form::Draft01),
                ("*.eu.example.org".to_string(), Form::Directory03),
                ("Old.EU.example.org.".to_string(), Form::Draft01),
            ],
        );
        assert_eq!(forms.for_host("other.test"), Form::Directory03);
        assert_eq!(forms.for_host("example.org"), Form::Directory03);
        assert_eq!(forms.for_host("www.example.org"), Form::Draft01);
        assert_eq!(forms.for_host("a.eu.example.org"), Form::Directory03);
        assert_eq!(forms.for_host("old.eu.example.org"), Form::Draft01);
        assert!(forms.uses(Form::Draft01) && forms.uses(Form::Directory03));
        assert!(!Forms::only(Form::Draft01).uses(Form::Directory03));
    }
}
