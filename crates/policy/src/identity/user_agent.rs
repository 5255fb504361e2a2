//! The crawler's User-Agent (cbcp-01 §2; the verified-bot programs ask the
//! same): a product token the site can name in robots.txt, with a URL
//! where a person learns who runs the crawler and how to reach them, as in
//! `ExampleBot/1.0 (+https://crawler.example.org/bot)`.
//!
//! The operator's value is checked once, at start; each client's
//! User-Agent is then kept, given the product (appended), refused, or, when
//! it claims to be a browser, rewritten to the product or refused.

use serde::{Deserialize, Serialize};

/// What happens to a client User-Agent without the operator's product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UaMode {
    /// The product is added at its end (`curl/8.5.0 ExampleBot/1.0 (+…)`).
    #[default]
    Append,
    /// The request is refused: the client must send the product itself.
    Require,
}

/// What happens to a client User-Agent that claims to be a browser.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BrowserUa {
    /// Replaced by the product alone: a crawler does not pass for a person.
    #[default]
    Rewrite,
    /// The request is refused.
    Refuse,
}

/// Why a configured User-Agent is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?}: {why} (expected like \"ExampleBot/1.0 (+https://crawler.example.org/bot)\")")]
pub struct UaError {
    /// What was configured.
    pub value: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// The operator's User-Agent, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UaPolicy {
    product: String,
    token: String,
    contact: String,
    mode: UaMode,
    browser: BrowserUa,
}

/// What to do with a client's User-Agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UaVerdict {
    /// It carries the product already.
    Keep,
    /// Send this one instead; the audit line says why.
    Set {
        /// The User-Agent to send.
        value: String,
        /// For the line: `appended` or `rewritten: …`.
        what: String,
    },
    /// Refuse the request, for this reason.
    Refuse(String),
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

impl UaPolicy {
    /// Checks `product`: a product token robots.txt can name (RFC 9309
    /// §2.2.1), an optional `/version` (an RFC 9110 token) and a comment holding an http(s) contact URL,
    /// `+` before it as crawlers write it.
    pub fn new(product: &str, mode: UaMode, browser: BrowserUa) -> Result<UaPolicy, UaError> {
        let bad = |why| UaError {
            value: product.to_string(),
            why,
        };
        if !product.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return Err(bad("only printable ASCII"));
        }
        let (first, rest) = product.split_once(' ').unwrap_or((product, ""));
        let (token, version) = first.split_once('/').unwrap_or((first, "x"));
        // RFC 9309 §2.2.1: what robots.txt can name.
        let robots_token = |b: u8| b.is_ascii_alphabetic() || b == b'_' || b == b'-';
        if token.is_empty() || !token.bytes().all(robots_token) {
            return Err(bad(
                "must start with a product token of letters, '_' and '-' (RFC 9309 §2.2.1)",
            ));
        }
        if version.is_empty() || !version.bytes().all(is_tchar) {
            return Err(bad("the product version after / is not a token"));
        }
        let comment = rest
            .trim()
            .strip_prefix('(')
            .and_then(|c| c.strip_suffix(')'))
            .ok_or(bad("needs a comment in parentheses with a contact URL"))?;
        let contact = comment
            .split([' ', ';'])
            .map(|w| w.trim_start_matches('+'))
            .find(|w| w.starts_with("https://") || w.starts_with("http://"))
            .ok_or(bad("the comment holds no http(s) contact URL"))?;
        let host = contact
            .parse::<http::Uri>()
            .ok()
            .and_then(|u| u.host().map(str::to_string))
            .filter(|h| !h.is_empty());
        if host.is_none() {
            return Err(bad("the contact URL does not parse"));
        }
        Ok(UaPolicy {
            product: product.to_string(),
            token: token.to_string(),
            contact: contact.to_string(),
            mode,
            browser,
        })
    }

    /// The whole product, as configured.
    pub fn product(&self) -> &str {
        &self.product
    }

    /// The product token: what a site names in robots.txt.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The contact URL of the comment.
    pub fn contact(&self) -> &str {
        &self.contact
    }

    /// What to do with a client's User-Agent (`None`: it sent none).
    pub fn judge(&self, client: Option<&str>) -> UaVerdict {
        let ua = client.map(str::trim).unwrap_or("");
        if self.carries_product(ua) {
            return UaVerdict::Keep;
        }
        if claims_browser(ua) {
            return match self.browser {
                BrowserUa::Rewrite => UaVerdict::Set {
                    value: self.product.clone(),
                    what: format!("rewritten: the client's User-Agent claimed a browser ({ua})"),
                },
                BrowserUa::Refuse => UaVerdict::Refuse(format!(
                    "the client's User-Agent claims a browser ({ua}); this crawler identifies as {}",
                    self.token
                )),
            };
        }
        match self.mode {
            UaMode::Append if ua.is_empty() => UaVerdict::Set {
                value: self.product.clone(),
                what: "appended".into(),
            },
            UaMode::Append => UaVerdict::Set {
                value: format!("{ua} {}", self.product),
                what: "appended".into(),
            },
            UaMode::Require => UaVerdict::Refuse(format!(
                "the client's User-Agent lacks the product token {}",
                self.token
            )),
        }
    }

    /// Whether `ua` names our product token as one of its products.
    fn carries_product(&self, ua: &str) -> bool {
        ua.split([' ', '(', ')', ';'])
            .filter_map(|w| w.split('/').next())
            .any(|t| t.eq_ignore_ascii_case(&self.token))
    }
}

/// Whether a User-Agent presents itself as a browser: every browser's
/// starts with `Mozilla/` (Opera's older ones with `Opera/`); a crawler
/// that does so and says `compatible; …Bot` still passes for one in logs
/// that read the first product only.
pub fn claims_browser(ua: &str) -> bool {
    ua.starts_with("Mozilla/") || ua.starts_with("Opera/")
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOT: &str = "ExampleBot/1.0 (+https://crawler.example.org/bot)";

    #[test]
    fn a_product_needs_a_token_and_a_contact_url_that_parse() {
        let p = UaPolicy::new(BOT, UaMode::Append, BrowserUa::Rewrite).unwrap();
        assert_eq!(p.token(), "ExampleBot");
        assert_eq!(p.contact(), "https://crawler.example.org/bot");
        let ok = UaPolicy::new(
            "Bot (compatible; +http://b.example/about)",
            UaMode::Append,
            BrowserUa::Rewrite,
        );
        assert_eq!(
            ok.map(|p| p.contact().to_string()).as_deref(),
            Ok("http://b.example/about")
        );
        for (bad, says) in [
            ("", "product token"),
            (
                "Example Bot/1.0 (+https://a.example)",
                "comment in parentheses",
            ),
            ("ExampleBot/1.0", "comment in parentheses"),
            ("ExampleBot/1.0 (contact me)", "no http(s) contact URL"),
            ("ExampleBot/1.0 (+https://)", "does not parse"),
            ("ExampleBot/ (+https://a.example)", "version"),
            ("Ex\u{e9}Bot/1 (+https://a.example)", "printable ASCII"),
            ("Ex@mple/1 (+https://a.example)", "product token"),
            ("Bot2/1 (+https://a.example)", "product token"),
        ] {
            let e = UaPolicy::new(bad, UaMode::Append, BrowserUa::Rewrite).unwrap_err();
            assert!(e.why.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn clients_are_kept_appended_rewritten_or_refused() {
        let append = UaPolicy::new(BOT, UaMode::Append, BrowserUa::Rewrite).unwrap();
        let require = UaPolicy::new(BOT, UaMode::Require, BrowserUa::Refuse).unwrap();
        let set = |v: &str, w: &str| UaVerdict::Set {
            value: v.into(),
            what: w.into(),
        };
        assert_eq!(
            append.judge(Some("examplebot/2.0 (+https://x.example)")),
            UaVerdict::Keep
        );
        assert_eq!(
            append.judge(Some("curl/8.5.0")),
            set(&format!("curl/8.5.0 {BOT}"), "appended")
        );
        assert_eq!(append.judge(None), set(BOT, "appended"));
        let chrome = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120 Safari/537.36";
        assert_eq!(
            append.judge(Some(chrome)),
            set(
                BOT,
                &format!("rewritten: the client's User-Agent claimed a browser ({chrome})")
            )
        );
        assert!(
            matches!(require.judge(Some(chrome)), UaVerdict::Refuse(w) if w.contains("claims a browser"))
        );
        assert!(
            matches!(require.judge(Some("curl/8.5.0")), UaVerdict::Refuse(w) if w.contains("lacks the product token ExampleBot"))
        );
        assert_eq!(require.judge(Some(BOT)), UaVerdict::Keep);
        // Our token inside a browser-like string is ours.
        assert_eq!(
            require.judge(Some(
                "Mozilla/5.0 (compatible; ExampleBot/1.0; +https://crawler.example.org/bot)"
            )),
            UaVerdict::Keep
        );
    }
}
