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

/// The hasher of the maps a request looks in, by host or by URL:
/// foldhash (hashbrown's default), seeded at random per map. std's SipHash
/// took 110 to 370 instructions a lookup here, a dozen lookups a request;
/// the keys are the crawler's own hosts and URLs, and a random seed keeps
/// their order unguessable from outside as SipHash's does.
pub type FastHash = foldhash::fast::RandomState;

/// A concurrent map hashed with [`FastHash`].
pub type FastMap<K, V> = dashmap::DashMap<K, V, FastHash>;
