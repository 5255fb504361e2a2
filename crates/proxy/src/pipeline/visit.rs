//! Visit times in the request path: a site's robots.txt `Visit-time`
//! windows (for the identities the request speaks for) and the operator's
//! `budget.quiet_hours` for its host. The rule is
//! `mannerly_policy::visit::judge`; this step holds a request until the
//! host opens when that is within its hold, else answers when it opens.
//! Quiet hours hold a robots.txt (or tdmrep.json) fetch as well: it is a
//! request to the host like any other.

use mannerly_policy::robots::Robots;
use mannerly_policy::visit::{self, Stated, Visit};

use super::identities::Identities;
use super::Exchange;
use crate::answer::{failure, Stop};

impl Exchange {
    /// Step 1a: `None` to go on (at once, or after a wait the line
    /// records), or the answer that says when the host opens.
    pub(super) async fn visit(&mut self, robots: &Robots) -> Option<Stop> {
        let ids = Identities::of(&self.live, self.rec.agent.as_deref().unwrap_or(""));
        let windows = robots.visit_times(ids.tokens());
        self.until_open(&windows).await
    }

    /// Before a site file is fetched: the operator's quiet hours hold the
    /// fetch as they would hold the page (the site's own windows are in the
    /// file, not known yet). Observe mode sends it; the page's own step
    /// records what would have been.
    pub(super) async fn quiet_before_fetch(&mut self) -> Option<Stop> {
        if !self.enforce {
            return None;
        }
        self.until_open(&[]).await
    }

    /// Holds until the host opens by `windows` and the quiet hours, when
    /// that is within the request's hold; else the answer saying when.
    async fn until_open(&mut self, windows: &[Vec<Stated>]) -> Option<Stop> {
        let quiet = self.quiet_hours();
        if windows.is_empty() && quiet.is_empty() {
            return None;
        }
        let (opens_in, why) = match visit::judge(windows, &quiet, self.shared.clock.wall()) {
            Visit::Open => return None,
            Visit::Closed { opens_in, why } => (opens_in, why),
        };
        let now = self.shared.clock.now();
        let opens = now + opens_in;
        if !self.enforce || opens > self.deadline {
            return Some(failure::outside_window(&why, opens_in));
        }
        tokio::time::sleep_until(opens).await;
        self.waited += opens_in;
        self.rec.waited(self.waited);
        self.rec.reason = Some(format!("held {} s: {why}", opens_in.as_secs()));
        None
    }

    /// `budget.quiet_hours` that cover the request's host.
    fn quiet_hours(&self) -> Vec<Stated> {
        let host = &self.target.host;
        self.live
            .budget
            .quiet_hours
            .iter()
            .enumerate()
            .filter(|(_, q)| q.covers(host))
            .filter_map(|(i, q)| {
                Some(Stated {
                    window: q.window()?,
                    source: q.source(i),
                })
            })
            .collect()
    }
}
