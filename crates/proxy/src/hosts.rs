//! What the proxy keeps per site: the host's budget (rate, pause,
//! concurrency) and the origin's robots.txt. Both are I/O halves of rules in
//! `mannerly_policy`; the state lives in `mannerly_state`.

pub(crate) mod budget;
pub(crate) mod robots;
