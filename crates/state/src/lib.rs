//! Where mannerly keeps state between requests: host budgets and stored responses, behind traits so a shared backend can replace the in-process one; no policy rules live here.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod background;
pub mod charges;
pub mod hosts;
mod link;
pub mod responses;
pub mod robots;
pub mod wake;

pub use link::{tagged, Link, CLUSTER_SCHEME};
