//! How to reach Redis and how to behave without it, and why a store could
//! not be set up.

use std::time::Duration;

/// How to reach Redis and how to behave without it.
#[derive(Clone, Debug)]
pub struct RedisSettings {
    /// `redis://host:port/db`.
    pub url: String,
    /// Prepended to every key, so that several crawls can share one Redis.
    pub key_prefix: String,
    /// How many proxies share the budgets; a proxy alone takes
    /// 1/`instances_hint` of a host's rate (at least 1).
    pub instances_hint: u32,
    /// A command that takes longer counts as Redis being out of reach.
    pub command_timeout: Duration,
    /// A concurrency lease outlives a proxy that died holding it this long.
    pub lease_ttl: Duration,
    /// An encoded budget nobody touched for this long is forgotten.
    pub budget_ttl: Duration,
    /// While degraded, Redis is tried again at most this often.
    pub probe_every: Duration,
}

impl RedisSettings {
    /// Settings for `url` with the defaults: prefix `mannerly:`, 4
    /// instances, 50 ms command timeout, 45 s leases, 7 h budgets, 1 s probe.
    pub fn new(url: impl Into<String>) -> RedisSettings {
        RedisSettings {
            url: url.into(),
            key_prefix: String::from("mannerly:"),
            instances_hint: 4,
            command_timeout: Duration::from_millis(50),
            lease_ttl: Duration::from_secs(45),
            budget_ttl: Duration::from_secs(7 * 3600),
            probe_every: Duration::from_secs(1),
        }
    }
}

/// Why a Redis store could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum RedisHostsError {
    /// The budget parameters are invalid.
    #[error(transparent)]
    Params(#[from] mannerly_policy::ParamError),
    /// The URL is not a Redis URL.
    #[error("state.redis_url: {0}")]
    Url(redis::RedisError),
}
