//! Step 0b, the crawler's User-Agent (`[crawler] user_agent`): a client's
//! is kept, given the crawler's product, rewritten or refused, as
//! `mannerly_policy::identity::UaPolicy` says; robots.txt is then read for
//! the User-Agent that is sent, and its fetch carries it too.

use http::header::USER_AGENT;
use http::{HeaderMap, HeaderValue};
use mannerly_policy::identity::UaVerdict;

use super::{request, Exchange, Step};
use crate::answer::failure;

impl Exchange {
    pub(super) fn user_agent(&mut self, headers: &mut HeaderMap) -> Step<()> {
        let Some(policy) = self.live.crawler.ua_policy() else {
            return Ok(());
        };
        let client = headers.get(USER_AGENT).and_then(|v| v.to_str().ok());
        match policy.judge(client) {
            UaVerdict::Keep => Ok(()),
            UaVerdict::Set { value, what } => {
                // Printable ASCII by construction: checked at start, and a
                // client's value came from a header already.
                if let Ok(v) = HeaderValue::from_str(&value) {
                    headers.insert(USER_AGENT, v);
                    self.rec.agent = Some(request::agent(&self.live, headers));
                    self.rec.user_agent = Some(what);
                }
                Ok(())
            }
            UaVerdict::Refuse(why) => self.enforced(Some(failure::user_agent_refused(why))),
        }
    }
}
