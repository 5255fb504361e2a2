//! The crawl's identities: one product token per purpose, as an operator
//! who crawls as `ExampleBot` for search and `ExampleBot-AI` for training
//! writes them (`crawler.agents`), so that each purpose is judged by the
//! robots.txt group of its own token.
//!
//! A request speaks for the identity whose token its client's User-Agent
//! names; a request that names none speaks for all of them, and goes only
//! where every one of them may go (a crawler that cannot say what a page is
//! for does not guess in its own favour).

use serde::Deserialize;

use super::{Robots, Verdict};
use crate::prefs::Purpose;
use crate::token::is_token;
pub use crate::token::{is_namespaced, NAMESPACE_PREFIX};
use crate::ParamError;

/// One identity of the crawl (`[[crawler.agents]]`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct Agent {
    /// Its robots.txt product token (`ExampleBot-AI`).
    pub token: String,
    /// What it crawls for: its pages are judged for these purposes only.
    pub purposes: Vec<Purpose>,
}

impl Agent {
    /// An identity: `token` crawling for `purposes`.
    pub fn new(token: &str, purposes: &[Purpose]) -> Agent {
        Agent {
            token: token.to_string(),
            purposes: purposes.to_vec(),
        }
    }
}

/// The identities a request speaks for: the one whose token `client` (the
/// first product token of its User-Agent) is, else every one.
pub fn speaking_for<'a>(agents: &'a [Agent], client: &str) -> &'a [Agent] {
    match agents
        .iter()
        .position(|a| a.token.eq_ignore_ascii_case(client))
    {
        Some(i) => &agents[i..=i],
        None => agents,
    }
}

/// Checks `crawler.agent`, `crawler.purposes` and `crawler.agents`
/// together, naming the key at fault.
pub fn validate(agent: &str, purposes: &[Purpose], agents: &[Agent]) -> Result<(), ParamError> {
    if !agent.is_empty() {
        token_ok(agent).map_err(|why| ParamError::new("crawler.agent", why))?;
    }
    if agents.is_empty() {
        return Ok(());
    }
    if !agent.is_empty() {
        return Err(ParamError::new(
            "crawler.agent",
            "must be empty when crawler.agents names the tokens",
        ));
    }
    if !purposes.is_empty() {
        return Err(ParamError::new(
            "crawler.purposes",
            "must be empty when crawler.agents is set: each agent lists its own purposes",
        ));
    }
    for (i, a) in agents.iter().enumerate() {
        let key = |k: &str| format!("crawler.agents[{i}].{k}");
        token_ok(&a.token).map_err(|why| ParamError::new(key("token"), why))?;
        if agents[..i]
            .iter()
            .any(|b| b.token.eq_ignore_ascii_case(&a.token))
        {
            return Err(ParamError::new(key("token"), "named twice"));
        }
        if a.purposes.is_empty() {
            return Err(ParamError::new(
                key("purposes"),
                "name at least one purpose (search, ai-input, ai-train)",
            ));
        }
    }
    Ok(())
}

/// A product token as RFC 9309 §2.2.1 has it (`[a-zA-Z_-]+`), and no
/// namespaced selector.
fn token_ok(token: &str) -> Result<(), String> {
    if !is_token(token) {
        return Err(format!(
            "{token:?} is no product token (letters, '-' and '_' only)"
        ));
    }
    if is_namespaced(token) {
        return Err(format!(
            "{token:?} is a namespaced selector ({NAMESPACE_PREFIX}…), not a product token"
        ));
    }
    Ok(())
}

// === impl Robots ===

impl Robots {
    /// The verdict for a request that speaks for several tokens: the first
    /// that is refused, else the first's; with the token that bound it.
    pub fn check_each<'a, 't>(
        &'a self,
        tokens: impl IntoIterator<Item = &'t str>,
        url: &str,
    ) -> Option<(&'t str, Verdict<'a>)> {
        let mut first = None;
        for token in tokens {
            let verdict = self.check(token, url);
            if !verdict.allowed {
                return Some((token, verdict));
            }
            first.get_or_insert((token, verdict));
        }
        first
    }

    /// The largest `Crawl-delay` of the groups of `tokens`: a host is paced
    /// for the slowest identity that reaches it.
    pub fn crawl_delay_of<'t>(&self, tokens: impl IntoIterator<Item = &'t str>) -> Option<f64> {
        tokens
            .into_iter()
            .filter_map(|t| self.crawl_delay(t))
            .fold(None, |acc: Option<f64>, d| {
                Some(acc.map_or(d, |a| a.max(d)))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(a: &[Agent]) -> Vec<&str> {
        a.iter().map(|a| a.token.as_str()).collect()
    }

    fn agents() -> Vec<Agent> {
        vec![
            Agent::new("ExampleBot", &[Purpose::Search]),
            Agent::new("ExampleBot-AI", &[Purpose::AiTrain]),
        ]
    }

    const FILE: &str = "User-agent: ExampleBot\nDisallow: /search-only-no/\nCrawl-delay: 2\n\n\
        User-agent: ExampleBot-AI\nUser-agent: __ns_ai\nDisallow: /articles/\nCrawl-delay: 5\n\n\
        User-agent: *\nDisallow: /\n";

    #[test]
    fn each_purpose_is_judged_by_its_own_tokens_group() {
        let robots = Robots::parse(FILE.as_bytes());
        let all = agents();
        let search = speaking_for(&all, "examplebot");
        assert_eq!(search.len(), 1);
        let (token, v) = robots.check_each(tokens(search), "/articles/1").unwrap();
        assert_eq!((token, v.allowed), ("ExampleBot", true));
        let ai = speaking_for(&all, "ExampleBot-AI");
        let (token, v) = robots.check_each(tokens(ai), "/articles/1").unwrap();
        assert_eq!(
            (token, v.allowed, v.group),
            ("ExampleBot-AI", false, Some("ExampleBot-AI"))
        );
        assert_eq!(v.rule.map(|r| r.line), Some(7));
        // A client naming neither speaks for both: the refusal binds.
        let both = speaking_for(&all, "curl");
        assert_eq!(both.len(), 2);
        let (token, v) = robots.check_each(tokens(both), "/articles/1").unwrap();
        assert_eq!((token, v.allowed), ("ExampleBot-AI", false));
        let (token, v) = robots.check_each(tokens(both), "/about").unwrap();
        assert_eq!((token, v.allowed), ("ExampleBot", true));
        assert_eq!(robots.crawl_delay_of(tokens(both)), Some(5.0));
        assert_eq!(robots.crawl_delay_of(tokens(search)), Some(2.0));
        assert!(robots.check_each([], "/x").is_none());
    }

    #[test]
    fn a_namespaced_selector_is_never_a_crawlers_group() {
        let robots = Robots::parse(FILE.as_bytes());
        // `__ns_ai` opened nothing of its own: a client calling itself so
        // gets the `*` group, and ExampleBot-AI's group still holds.
        let v = robots.check("__ns_ai", "/about");
        assert_eq!((v.allowed, v.group), (false, Some("*")));
        assert_eq!(super::super::product_token("__ns_ai/1.0"), "");
        let only_ns = Robots::parse(b"User-agent: __NS_x\nDisallow: /\n");
        assert!(only_ns.is_allowed("__NS_x", "/a"));
        assert!(is_namespaced("__NS_label") && !is_namespaced("_ns_x") && !is_namespaced("__n"));
    }

    #[test]
    fn the_agents_are_validated_with_the_keys_they_replace() {
        assert_eq!(validate("", &[], &agents()), Ok(()));
        assert_eq!(validate("MyBot", &[Purpose::Search], &[]), Ok(()));
        let key = |r: Result<(), ParamError>| r.unwrap_err().key;
        assert_eq!(key(validate("MyBot", &[], &agents())), "crawler.agent");
        assert_eq!(
            key(validate("", &[Purpose::Search], &agents())),
            "crawler.purposes"
        );
        assert_eq!(key(validate("My Bot", &[], &[])), "crawler.agent");
        assert_eq!(key(validate("__ns_ai", &[], &[])), "crawler.agent");
        let mut twice = agents();
        twice[1].token = "examplebot".into();
        assert_eq!(key(validate("", &[], &twice)), "crawler.agents[1].token");
        let mut none = agents();
        none[0].purposes.clear();
        assert_eq!(key(validate("", &[], &none)), "crawler.agents[0].purposes");
        let mut bad = agents();
        bad[1].token = "Example/Bot".into();
        assert_eq!(key(validate("", &[], &bad)), "crawler.agents[1].token");
    }
}
