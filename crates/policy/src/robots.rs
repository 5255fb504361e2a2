//! robots.txt (RFC 9309): parser and matcher, plus the `Crawl-delay`,
//! `Sitemap`, `Content-Signal` and `Content-Usage` extensions.
//!
//! [`Robots::parse`] does all the work once (groups merged per product token,
//! patterns normalised and indexed); [`Robots::check`] then answers with the
//! deciding rule and its line number without allocating unless the URL needs
//! percent-encoding normalisation.
//!
//! Choices where RFC 9309 leaves room or other parsers differ:
//! - only `key: value` lines count (a missing colon makes a line unknown), and
//!   keys are the RFC names without Google's typo tolerance;
//! - whitespace is space and tab only (RFC 9309 sec. 2.2): a no-break space,
//!   U+3000, vertical tab or form feed is part of the value, so
//!   `Allow: /private/`+NBSP allows nothing under `/private/`;
//! - a `User-agent` value is a product token (`[a-zA-Z_-]+`, an optional
//!   `/version` ignored) or `*`; any other value (`Foo Bar`) starts a group that
//!   no crawler matches;
//! - a group is its `User-agent` lines and the rules after them (sec. 2.2):
//!   only `Allow` and `Disallow` end the list of user-agents, so a
//!   `User-agent` line after one of them starts a new group. Every other
//!   record (`Crawl-delay`, `Content-Signal`, `Content-Usage`, `Sitemap`,
//!   unknown keys, comments, blank lines) leaves the list open and belongs to
//!   the group it stands in, i.e. to every agent of that group (Google's
//!   parser reads it the same way);
//! - the agent's groups apply, else the `*` groups; they never combine;
//! - of several `Crawl-delay` lines for one crawler, the largest counts;
//! - a namespaced selector (`User-agent: __ns_label`, draft-kelley-rep-
//!   namespaces-00) opens or joins a group as any user-agent line does, but
//!   is nobody's product token: no crawler's token matches it.

pub mod agents;
mod index;
mod parse;
mod preferences;
mod signal;
mod url;
mod usage;

use std::fmt;

use crate::pattern::{normalise_path, Pattern};
use crate::token::is_token_char;
use index::{IndexedRule, RuleIndex};

pub use crate::prefs::{Purpose, SignalUse};
pub use preferences::Preferences;
pub use signal::{ContentSignal, SignalRefusal};
pub use url::{split_url, SplitUrl, UrlError};
pub use usage::ContentUsage;

/// Only this much of a robots.txt is parsed (RFC 9309 sec. 2.5 asks for at
/// least 500 KiB).
pub const MAX_ROBOTS_BYTES: usize = 500 * 1024;

/// An `Allow` or `Disallow` rule as the site wrote it.
#[derive(Debug, Clone)]
pub struct Rule {
    /// `true` for `Allow`, `false` for `Disallow`.
    pub allow: bool,
    /// The path pattern as written (trimmed, comment removed).
    pub pattern: String,
    /// 1-based line number in the robots.txt.
    pub line: usize,
    compiled: Pattern,
}

impl IndexedRule for Rule {
    fn pattern(&self) -> &Pattern {
        &self.compiled
    }
    fn allow(&self) -> bool {
        self.allow
    }
}

impl fmt::Display for Rule {
    /// `Disallow: /private/`, the form an audit line quotes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = if self.allow { "Allow" } else { "Disallow" };
        write!(f, "{key}: {}", self.pattern)
    }
}

/// The answer to "may this agent fetch this URL?".
#[derive(Debug, Clone, Copy)]
pub struct Verdict<'a> {
    /// Whether the fetch is allowed.
    pub allowed: bool,
    /// The deciding rule; `None` when no rule matched (allowed), and for
    /// `/robots.txt` itself, which is always allowed.
    pub rule: Option<&'a Rule>,
    /// The product token of the group that applied, as written in the file,
    /// or `*`; `None` when no group applies to this agent.
    pub group: Option<&'a str>,
}

impl fmt::Display for Verdict<'_> {
    /// E.g. `disallowed by Disallow: /private/ (line 7, group *)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let word = if self.allowed {
            "allowed"
        } else {
            "disallowed"
        };
        match (self.rule, self.group) {
            (Some(rule), Some(group)) => {
                write!(f, "{word} by {rule} (line {}, group {group})", rule.line)
            }
            (Some(rule), None) => write!(f, "{word} by {rule} (line {})", rule.line),
            (None, Some(group)) => write!(f, "{word}: no rule matched (group {group})"),
            // Written whole: the verdict of every request to a host
            // without rules, where `write!` cost a tenth of the robots step.
            (None, None) if self.allowed => f.write_str("allowed: no rule applies"),
            (None, None) => f.write_str("disallowed: no rule applies"),
        }
    }
}

/// The merged rules of every group naming one product token (or `*`).
#[derive(Debug, Clone)]
struct Group {
    /// As first written in the file; `*` for the global group.
    token: String,
    index: RuleIndex,
    crawl_delay: Option<f64>,
    /// Indices into `Robots::statements`, in file order (global lines included).
    statements: Vec<u32>,
    /// `Visit-time` windows, with their lines.
    visit: Vec<crate::visit::Stated>,
    /// `Request-rate` as the least seconds between requests, with its line.
    request_rate: Option<(f64, String)>,
}

/// A usage-preference line, in either vocabulary.
#[derive(Debug, Clone)]
enum Statement {
    Signal(ContentSignal),
    Usage(ContentUsage),
}

/// A parsed robots.txt.
#[derive(Debug, Clone, Default)]
pub struct Robots {
    rules: Vec<Rule>,
    /// Specific groups; the `*` group is kept apart.
    groups: Vec<Group>,
    star: Option<Group>,
    statements: Vec<Statement>,
    /// Content-Signal / Content-Usage lines before the first group: they
    /// apply to everyone.
    global_statements: Vec<u32>,
    sitemaps: Vec<String>,
    /// Lines read but not understood, and why (`Visit-time`, `Request-rate`).
    ignored: Vec<String>,
}

// === impl Robots ===

impl Robots {
    /// No rules at all: what a 4xx (other than 429) robots.txt means.
    pub fn allow_all() -> Robots {
        Robots::default()
    }

    /// The group that applies to a product token: its own, else `*`.
    fn group(&self, agent: &str) -> Option<&Group> {
        if !agent.is_empty() {
            if let Some(group) = self
                .groups
                .iter()
                .find(|g| g.token.eq_ignore_ascii_case(agent))
            {
                return Some(group);
            }
        }
        self.star.as_ref()
    }

    /// May `agent` fetch `url`?
    ///
    /// `agent` is the crawler's product token (see [`product_token`]); `""`
    /// means none, so only `*` groups apply. `url` is a path+query (`/a/b?c`)
    /// or an absolute `http(s)://` URL.
    pub fn check(&self, agent: &str, url: &str) -> Verdict<'_> {
        let path = normalise_path(url);
        let group = self.group(agent);
        let token = group.map(|g| g.token.as_str());
        if crate::url::is_robots_txt(&path) {
            return Verdict {
                allowed: true,
                rule: None,
                group: token,
            };
        }
        let rule = group
            .and_then(|g| g.index.decide(&self.rules, &path))
            .and_then(|id| self.rules.get(id as usize));
        Verdict {
            allowed: match rule {
                Some(r) => r.allow,
                None => true,
            },
            rule,
            group: token,
        }
    }

    /// Shorthand for `check(agent, url).allowed`.
    pub fn is_allowed(&self, agent: &str, url: &str) -> bool {
        self.check(agent, url).allowed
    }

    /// `Crawl-delay` (seconds) of the group that applies to `agent`.
    pub fn crawl_delay(&self, agent: &str) -> Option<f64> {
        self.group(agent).and_then(|g| g.crawl_delay)
    }

    /// The `Visit-time` windows of the groups of `tokens`: each identity's
    /// site hours bind it, so a request for several is sent only when
    /// every one of them may visit.
    pub fn visit_times<'t>(
        &self,
        tokens: impl IntoIterator<Item = &'t str>,
    ) -> Vec<Vec<crate::visit::Stated>> {
        tokens
            .into_iter()
            .filter_map(|t| self.group(t))
            .filter(|g| !g.visit.is_empty())
            .map(|g| g.visit.clone())
            .collect()
    }

    /// The slowest `Request-rate` of the groups of `tokens`, as the least
    /// seconds between requests, with its line: it paces a host as
    /// `Crawl-delay` does.
    pub fn request_interval<'t>(
        &self,
        tokens: impl IntoIterator<Item = &'t str>,
    ) -> Option<(f64, &str)> {
        tokens
            .into_iter()
            .filter_map(|t| self.group(t)?.request_rate.as_ref())
            .fold(None, |acc: Option<(f64, &str)>, (i, src)| match acc {
                Some(a) if a.0 >= *i => Some(a),
                _ => Some((*i, src.as_str())),
            })
    }

    /// Lines read but not understood (a `Visit-time` that is no window, a
    /// `Request-rate` that is no rate), and why: they bind nothing.
    pub fn ignored(&self) -> &[String] {
        &self.ignored
    }

    /// Every `Sitemap` URL, in file order, wherever it stood.
    pub fn sitemaps(&self) -> &[String] {
        &self.sitemaps
    }

    /// Every rule of the file, in line order (for display and tooling).
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The usage-preference lines that apply to `agent`, in file order:
    /// those of its group (else of `*`) and those before the first group.
    fn statements(&self, agent: &str) -> impl Iterator<Item = &Statement> + '_ {
        let ids = match self.group(agent) {
            Some(group) => &group.statements,
            None => &self.global_statements,
        };
        ids.iter()
            .filter_map(|&id| self.statements.get(id as usize))
    }

    /// The `Content-Signal` lines that apply to `agent`, in file order: those
    /// of its group (else of `*`) and those before the first group.
    pub fn content_signals(&self, agent: &str) -> impl Iterator<Item = &ContentSignal> + '_ {
        self.statements(agent).filter_map(|s| match s {
            Statement::Signal(signal) => Some(signal),
            Statement::Usage(_) => None,
        })
    }

    /// The `Content-Usage` lines that apply to `agent`, in file order, scoped
    /// as [`Robots::content_signals`].
    pub fn content_usages(&self, agent: &str) -> impl Iterator<Item = &ContentUsage> + '_ {
        self.statements(agent).filter_map(|s| match s {
            Statement::Usage(usage) => Some(usage),
            Statement::Signal(_) => None,
        })
    }

    /// The first of `purposes` (in the order given) the site refuses for
    /// `url` in its `Content-Signal` or `Content-Usage` lines, with the line
    /// that said no; `None` if none is refused. See [`Robots::preferences`].
    pub fn signal_check(
        &self,
        agent: &str,
        url: &str,
        purposes: &[Purpose],
    ) -> Option<SignalRefusal<'_>> {
        self.preferences(agent, url).refused_purpose(purposes)
    }
}

/// The first product token of a `User-Agent` header value: `Mozilla/5.0 (…)`
/// gives `Mozilla`, `MyBot/1.2` gives `MyBot`; `""` if it starts with no token
/// character (`a-zA-Z_-`, RFC 9309 sec. 2.2.1).
pub fn product_token(user_agent: &str) -> &str {
    let s = user_agent.trim_start();
    let end = s.find(|c: char| !is_token_char(c)).unwrap_or(s.len());
    let token = &s[..end];
    // A namespaced selector names a class of crawlers; claimed as a token,
    // it would take a group written for others.
    if agents::is_namespaced(token) {
        return "";
    }
    token
}

#[cfg(test)]
mod tests;
