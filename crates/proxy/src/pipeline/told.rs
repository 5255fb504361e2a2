//! What every answer tells the client of the host's budget, so that a
//! crawler's scheduler can plan around it: the RateLimit fields for the
//! group's budget as it stands, and the `wait` preference the client chose
//! (RFC 7240) or its default.
//!
//! An origin's own RateLimit fields stay as it sent them, and ours follow
//! as a list member of their own (`"host"`): the draft's intermediaries
//! may not make the origin's policy look more permissive, and a client
//! that honours the strictest member honours both. Ours are the stricter
//! in practice: the budget paces under any limit the origin announces.

use std::time::Duration;

use http::header::{HeaderName, HeaderValue};
use http::Response;
use mannerly_policy::budget::{Refusal, Told, FIELD_NAMES};

use super::Exchange;
use crate::answer::{failure, Stop};
use crate::body::ProxyBody;

/// RFC 7240 §3.
const PREFERENCE_APPLIED: HeaderName = HeaderName::from_static("preference-applied");
/// The RateLimit fields, checked once (made per answer, each name's
/// characters were checked every time).
const POLICY_FIELD: HeaderName = HeaderName::from_static(FIELD_NAMES.policy);
const LIMIT_FIELD: HeaderName = HeaderName::from_static(FIELD_NAMES.limit);

mod wait;
pub(super) use wait::{preferred, Wait, WaitBy};

impl Exchange {
    /// The hold a request gets: the budget's, or shorter when it prefers;
    /// the line says who chose a shorter one.
    pub(super) fn hold(&mut self, max_hold: Duration) -> Duration {
        let Some(w) = self.wait else {
            return max_hold;
        };
        let chosen = Duration::from_secs(w.secs);
        if chosen < max_hold {
            self.rec.wait_s = Some(w.secs);
            self.rec.wait_by = Some(w.by.as_str());
        }
        chosen.min(max_hold)
    }

    /// A budget refusal the budget's own hold would have waited out was
    /// the client's choice not to wait: answered so (the failure table's
    /// row), not as the host's refusal.
    pub(super) fn chose_not_to_wait(&self, stop: Stop, r: &Refusal) -> Stop {
        let max_hold = self.shared.budgets.max_hold(&self.target.host);
        let Some(w) = self.wait else { return stop };
        // A preference no shorter than the hold changed nothing.
        let shortened = Duration::from_secs(w.secs) < max_hold;
        if shortened && !matches!(r, Refusal::Distressed { .. }) && r.retry_after() <= max_hold {
            return failure::not_waited(stop, w.secs, w.by.as_str());
        }
        stop
    }

    /// Adds what the answer tells of the host's budget and of the client's
    /// preference.
    pub(super) fn tell(&self, resp: &mut Response<ProxyBody>) {
        let looked_up;
        let key = match &self.group {
            Some(k) => k,
            None => {
                looked_up = self.shared.budgets.group(&self.target.host).key;
                &looked_up
            }
        };
        let h = resp.headers_mut();
        if let Some(view) = self.shared.budgets.view(key) {
            let told = Told::of(&view);
            // Appended: the origin's members, if any, stay first.
            h.append(
                POLICY_FIELD,
                crate::answer::header_owned(told.policy_item()),
            );
            h.append(LIMIT_FIELD, crate::answer::header_owned(told.limit_item()));
        }
        if let Some(Wait {
            secs,
            by: WaitBy::Client,
        }) = self.wait
        {
            let v = HeaderValue::try_from(format!("wait={secs}"));
            if let Ok(v) = v {
                h.insert(PREFERENCE_APPLIED, v);
            }
        }
    }
}
