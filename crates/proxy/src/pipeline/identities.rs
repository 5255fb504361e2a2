//! Who a request speaks for: the crawler's tokens and the purposes each
//! declares. Read by robots.txt's verdict (`request.rs`), by usage
//! preferences (`prefs.rs`) and by visit windows, so it sits apart from
//! all three.

use std::borrow::Cow;

use mannerly_policy::robots::agents::{speaking_for, Agent};
use mannerly_policy::robots::Purpose;

use crate::config::Config;

/// The identities a request speaks for: `crawler.agents` as the client's
/// token selects them, else the one token decisions are made for with
/// `crawler.purposes`.
#[derive(Clone, Copy)]
pub(crate) struct Identities<'a> {
    one: Option<(&'a str, &'a [Purpose])>,
    agents: &'a [Agent],
}

impl<'a> Identities<'a> {
    /// For a request whose token (see [`super::request::agent`]) is `agent`.
    pub(crate) fn of(live: &'a Config, agent: &'a str) -> Identities<'a> {
        let c = &live.crawler;
        if c.agents.is_empty() {
            return Identities {
                one: Some((agent, &c.purposes)),
                agents: &[],
            };
        }
        Identities {
            one: None,
            agents: speaking_for(&c.agents, agent),
        }
    }

    /// Each token with its purposes.
    pub(crate) fn iter(self) -> impl Iterator<Item = (&'a str, &'a [Purpose])> {
        let agents = self.agents.iter();
        let agents = agents.map(|a| (a.token.as_str(), a.purposes.as_slice()));
        self.one.into_iter().chain(agents)
    }

    pub(crate) fn tokens(self) -> impl Iterator<Item = &'a str> {
        self.iter().map(|(t, _)| t)
    }

    /// Every purpose the request is for, each once.
    pub(crate) fn purposes(self) -> Cow<'a, [Purpose]> {
        match (self.one, self.agents) {
            (Some((_, p)), _) => Cow::Borrowed(p),
            (None, [one]) => Cow::Borrowed(&one.purposes),
            _ => {
                let mut all: Vec<Purpose> = Vec::new();
                for p in self.iter().flat_map(|(_, p)| p) {
                    if !all.contains(p) {
                        all.push(*p);
                    }
                }
                Cow::Owned(all)
            }
        }
    }

    /// Whether the tokens are the operator's `crawler.agents`: then the
    /// answer names the one that bound it.
    pub(crate) fn named(self) -> bool {
        self.one.is_none()
    }
}
