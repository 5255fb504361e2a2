//! What to do with a robots.txt fetch result, and when to fetch again
//! (RFC 9309 §2.3.1, §2.4): the sans-IO half of the proxy's robots cache.
//!
//! The same rules serve every file a site keeps at a fixed place to say
//! what it wants ([`SiteFile`]): robots.txt, and TDMRep's
//! `/.well-known/tdmrep.json`, which is fetched, cached and retried as
//! robots.txt is (2xx read, 4xx other than 429 no rules, 429/5xx/network
//! unknown for now, the last good copy used meanwhile).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::prefs::TdmFile;
use crate::robots::Robots;
use crate::{Outcome, ParamError};

mod head;

pub use head::{declared_age, Head, Validators, MAX_VALIDATOR, MIN_AGE};

/// A file a site keeps at a fixed path of its origin to say what it wants,
/// cached per origin by the rules of this module.
pub trait SiteFile: Send + Sync + 'static {
    /// Its path on the origin, after the origin's `/`.
    const PATH: &'static str;
    /// Its name in reasons (`robots.txt`).
    const NAME: &'static str;
    /// The outcome of the audit line of a fetch.
    const FETCHED: Outcome;
    /// What a 2xx body says.
    fn parse(body: &[u8]) -> Self;
    /// What a 4xx other than 429 says: nothing, everything allowed.
    fn none() -> Self;
    /// Why a 2xx body was read as saying less than it holds, for the
    /// fetch's audit line (robots.txt reads whatever it can: never).
    fn body_reason(_body: &[u8]) -> Option<String> {
        None
    }
}

impl SiteFile for Robots {
    const PATH: &'static str = "robots.txt";
    const NAME: &'static str = "robots.txt";
    const FETCHED: Outcome = Outcome::RobotsFetched;
    fn parse(body: &[u8]) -> Self {
        Robots::parse(body)
    }
    fn none() -> Self {
        Robots::allow_all()
    }
}

impl SiteFile for TdmFile {
    const PATH: &'static str = ".well-known/tdmrep.json";
    const NAME: &'static str = "tdmrep.json";
    const FETCHED: Outcome = Outcome::TdmrepFetched;
    fn parse(body: &[u8]) -> Self {
        TdmFile::parse(body)
    }
    fn none() -> Self {
        TdmFile::default()
    }
    fn body_reason(body: &[u8]) -> Option<String> {
        TdmFile::parse(body).problem().map(str::to_string)
    }
}

/// `[robots]`: fetching and caching robots.txt.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RobotsParams {
    /// Seconds a fetched robots.txt is used before it is fetched again (at most 24 h).
    pub max_age_secs: f64,
    /// First wait, in seconds, before fetching again after a failed fetch; doubles per failure.
    pub retry_min_secs: f64,
    /// Longest wait between fetch attempts after failures.
    pub retry_max_secs: f64,
    /// Redirects followed before the file counts as unavailable.
    pub max_redirects: u32,
    /// Seconds a whole fetch (all redirects, the body) may take.
    pub fetch_timeout_secs: f64,
    /// Origins whose robots.txt is kept in memory.
    pub max_entries: usize,
    /// Bytes of robots.txt bodies kept in memory over all origins (a body
    /// may be up to 500 KiB, so the entry count alone does not bound memory).
    pub max_bytes: u64,
}

impl Default for RobotsParams {
    fn default() -> Self {
        RobotsParams {
            max_age_secs: 86_400.0,
            retry_min_secs: 5.0,
            retry_max_secs: 600.0,
            max_redirects: 5,
            fetch_timeout_secs: 20.0,
            max_entries: 100_000,
            max_bytes: 64 * 1024 * 1024,
        }
    }
}

impl RobotsParams {
    /// Checks the values, naming the key at fault.
    pub fn validate(self) -> Result<Self, ParamError> {
        let secs = [
            ("max_age_secs", self.max_age_secs),
            ("retry_min_secs", self.retry_min_secs),
            ("retry_max_secs", self.retry_max_secs),
            ("fetch_timeout_secs", self.fetch_timeout_secs),
        ];
        for (key, v) in secs {
            if !(v.is_finite() && v > 0.0) {
                return Err(ParamError::new(
                    format!("robots.{key}"),
                    format!("must be a positive number of seconds, got {v}"),
                ));
            }
        }
        if self.max_age_secs > 86_400.0 {
            return Err(ParamError::new(
                "robots.max_age_secs",
                "RFC 9309 caps caching at 24 hours (86400)",
            ));
        }
        if self.retry_max_secs < self.retry_min_secs {
            return Err(ParamError::new(
                "robots.retry_max_secs",
                "must not be below retry_min_secs",
            ));
        }
        if self.max_entries == 0 {
            return Err(ParamError::new("robots.max_entries", "must be at least 1"));
        }
        if self.max_bytes < crate::robots::MAX_ROBOTS_BYTES as u64 {
            return Err(ParamError::new(
                "robots.max_bytes",
                "must hold at least one robots.txt (512000 bytes)",
            ));
        }
        Ok(self)
    }

    /// How long a fetched robots.txt is used.
    pub fn max_age(&self) -> Duration {
        Duration::from_secs_f64(self.max_age_secs)
    }

    /// How long the proxy fetching robots.txt for a whole cluster holds the
    /// cluster's lock: a fetch that runs into its timeout, and not more, so
    /// that a proxy that died mid-fetch does not hold the others up.
    pub fn cluster_lock(&self) -> Duration {
        Duration::from_secs_f64(self.fetch_timeout_secs + 1.0)
    }

    /// How long a cluster keeps a fetch's result for its other proxies: a
    /// usable answer (rules, or a 4xx's none) for twice its longest age, so
    /// that its validators outlive its freshness and the proxy that fetches
    /// next asks conditionally; a failure only until the first retry, so
    /// that the cluster tries again together.
    pub fn cluster_keep(&self, result: &FetchResult) -> Duration {
        if result.is_usable() {
            self.max_age() * 2
        } else {
            Duration::from_secs_f64(self.retry_min_secs)
        }
    }
}

// The cap is a parameter of this module, so the rule that applies it lives
// here: `head.rs` reads an answer and knows nothing of configuration.
impl Head {
    /// How long the copy is used at most under `params`.
    pub fn fresh_for(&self, params: &RobotsParams) -> Duration {
        let cap = params.max_age();
        self.declared_age.map_or(cap, |a| a.min(cap))
    }
}

/// How a fetch of robots.txt ended, as the proxy saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FetchResult {
    /// A 2xx with this body.
    Body(Vec<u8>),
    /// The final status (after redirects) was not 2xx.
    Status(u16),
    /// More redirects than allowed.
    TooManyRedirects,
    /// Timeout, refused connection, TLS failure, blocked address: the words why.
    Failed(String),
    /// A 304 to a fetch that carried the held copy's [`Validators`]: the
    /// copy still stands (RFC 9309 §2.4 allows RFC 9111 caching). A 304 to
    /// a fetch without validators is a `Status(304)`, which says nothing.
    NotModified,
}

impl FetchResult {
    /// A 4xx other than 429: the site has no robots.txt, so there are no
    /// rules and everything is allowed (RFC 9309 §2.3.1.3).
    pub fn means_no_rules(&self) -> bool {
        matches!(self, FetchResult::Status(s) if (400..500).contains(s) && *s != 429)
    }

    /// A body or a 4xx that means no rules: what [`classify`] accepts,
    /// without parsing the body.
    pub fn is_usable(&self) -> bool {
        matches!(self, FetchResult::Body(_) | FetchResult::NotModified) || self.means_no_rules()
    }
}

/// The rules in force for one origin.
#[derive(Debug)]
pub enum Rules<F = Robots> {
    /// Parsed rules (a 4xx gives an empty, allow-all file).
    Known(Arc<F>),
    /// The site's wishes cannot be known: everything is refused until `retry_in`.
    Unavailable {
        /// Plain words on what went wrong.
        reason: String,
        /// Time until the next fetch attempt.
        retry_in: Duration,
    },
}

impl<F> Clone for Rules<F> {
    fn clone(&self) -> Self {
        match self {
            Rules::Known(r) => Rules::Known(r.clone()),
            Rules::Unavailable { reason, retry_in } => Rules::Unavailable {
                reason: reason.clone(),
                retry_in: *retry_in,
            },
        }
    }
}

/// What the cache holds for one origin.
#[derive(Debug)]
pub struct RobotsEntry<F = Robots> {
    rules: Option<Arc<F>>,
    fetched_at: Instant,
    /// Last parsed copy, used while the file is unavailable (RFC 9309 §2.4).
    good: Option<Arc<F>>,
    failures: u32,
    retry_at: Instant,
    reason: String,
    /// Of `good`: its validators (when the 2xx that gave it had any) and
    /// the age its own head gave it.
    head: Head,
}

/// What the proxy should do for a request to an origin.
#[derive(Debug)]
pub enum Lookup<F = Robots> {
    /// Use these rules.
    Use(Rules<F>),
    /// Fetch robots.txt first (nothing cached, expired, or retry time reached).
    Fetch,
}

/// Classifies a robots.txt fetch: 2xx parse, 4xx other than 429 no rules,
/// anything else unavailable.
pub fn classify(result: &FetchResult) -> Result<Robots, String> {
    classify_as(result)
}

/// Classifies a fetch of any [`SiteFile`], as [`classify`] does robots.txt.
pub fn classify_as<F: SiteFile>(result: &FetchResult) -> Result<F, String> {
    let name = F::NAME;
    match result {
        FetchResult::Body(body) => Ok(F::parse(body)),
        r if r.means_no_rules() => Ok(F::none()),
        FetchResult::Status(s) => Err(format!("{name} answered {s}")),
        FetchResult::TooManyRedirects => Err(format!("{name} redirected too many times")),
        FetchResult::Failed(why) => Err(format!("{name} unreachable: {why}")),
        FetchResult::NotModified => Err(format!("{name} answered 304 but no copy is held")),
    }
}

/// The `reason` of a fetch's `robots_fetched` audit line: none for a body,
/// "no rules" for a 4xx that means none, else why the rules are unknown.
pub fn fetch_reason(result: &FetchResult) -> Option<String> {
    fetch_reason_of::<Robots>(result)
}

/// [`fetch_reason`] for any [`SiteFile`] (`tdmrep_fetched` lines: a body
/// that is not the file's format says so).
pub fn fetch_reason_of<F: SiteFile>(result: &FetchResult) -> Option<String> {
    match result {
        FetchResult::Body(body) => F::body_reason(body),
        // The copy held stands; the line's `cache` says so.
        FetchResult::NotModified => None,
        FetchResult::Status(s) if result.means_no_rules() => {
            Some(format!("status {s}: no rules, everything allowed"))
        }
        other => classify_as::<F>(other).err(),
    }
}

/// Whether a `robots_fetched` audit line, by its status and its reason (as
/// [`fetch_reason`] wrote it), records a fetch that left the origin's rules
/// unknown: no answer, 429, 5xx, a redirect chain that did not end, or a
/// 2xx whose body did not arrive.
pub fn fetch_failed(status: Option<u16>, reason: Option<&str>) -> bool {
    reason.is_some() && !status.is_some_and(|s| FetchResult::Status(s).means_no_rules())
}

impl<F: SiteFile> RobotsEntry<F> {
    /// The entry after a fetch that ended with `result` at `now`, given the
    /// entry it replaces (for the failure count and the last good copy).
    pub fn after_fetch(
        previous: Option<&RobotsEntry<F>>,
        result: &FetchResult,
        params: &RobotsParams,
        now: Instant,
    ) -> RobotsEntry<F> {
        let kept = previous.and_then(|p| Some((p.good.clone()?, p.head.clone())));
        if let (FetchResult::NotModified, Some((good, head))) = (result, kept) {
            // A 304 to our validators: the same rules, their age restarted.
            return RobotsEntry {
                rules: Some(good.clone()),
                fetched_at: now,
                good: Some(good),
                failures: 0,
                retry_at: now,
                reason: String::new(),
                head,
            };
        }
        match classify_as::<F>(result) {
            Ok(robots) => {
                let robots = Arc::new(robots);
                RobotsEntry {
                    rules: Some(robots.clone()),
                    fetched_at: now,
                    good: Some(robots),
                    failures: 0,
                    retry_at: now,
                    reason: String::new(),
                    head: Head::default(),
                }
            }
            Err(reason) => {
                let failures = previous.map_or(0, |p| p.failures).saturating_add(1);
                let backoff = params.retry_min_secs * 2f64.powi(failures.min(30) as i32 - 1);
                let wait = Duration::from_secs_f64(backoff.min(params.retry_max_secs));
                let good = previous.and_then(|p| p.good.clone());
                let head = previous.map(|p| p.head.clone()).unwrap_or_default();
                RobotsEntry {
                    rules: None,
                    fetched_at: now,
                    good,
                    failures,
                    retry_at: now + wait,
                    reason,
                    head,
                }
            }
        }
    }

    /// What applies at `now`.
    pub fn lookup(&self, params: &RobotsParams, now: Instant) -> Lookup<F> {
        match &self.rules {
            Some(r) if now.saturating_duration_since(self.fetched_at) < self.fresh_for(params) => {
                Lookup::Use(Rules::Known(r.clone()))
            }
            Some(_) => Lookup::Fetch,
            None if now >= self.retry_at => Lookup::Fetch,
            None => match &self.good {
                Some(g) => Lookup::Use(Rules::Known(g.clone())),
                None => Lookup::Use(Rules::Unavailable {
                    reason: self.reason.clone(),
                    retry_in: self.retry_at - now,
                }),
            },
        }
    }

    /// The rules this entry gives right after it was made (no refetch).
    pub fn rules_now(&self, now: Instant) -> Rules<F> {
        match (&self.rules, &self.good) {
            (Some(r), _) | (None, Some(r)) => Rules::Known(r.clone()),
            (None, None) => Rules::Unavailable {
                reason: self.reason.clone(),
                retry_in: self.retry_at.saturating_duration_since(now),
            },
        }
    }

    /// The entry with the head of the answer it was made from: a copy read
    /// from a body takes it whole; a 304 updates what it restates (RFC 9111
    /// §4.3.4); a failure changes nothing of the copy kept.
    pub fn with_head(mut self, result: &FetchResult, head: Head) -> Self {
        match result {
            FetchResult::Body(_) => self.head = head,
            FetchResult::NotModified => self.head = self.head.refreshed(&head),
            _ => {}
        }
        self
    }

    /// What the next fetch sends to ask whether the copy held still
    /// stands: `None` without a copy, or when its 2xx had no validators.
    pub fn validators(&self) -> Option<&Validators> {
        let v = &self.head.validators;
        (self.good.is_some() && !v.is_empty()).then_some(v)
    }

    /// The head of the copy held.
    pub fn head(&self) -> &Head {
        &self.head
    }

    /// How long a copy is used before it is fetched again: its head's own
    /// age within `robots.max_age_secs`.
    pub fn fresh_for(&self, params: &RobotsParams) -> Duration {
        self.head.fresh_for(params)
    }

    /// Consecutive failed fetches.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Whether the entry is still worth keeping at `now`.
    pub fn is_live(&self, params: &RobotsParams, now: Instant) -> bool {
        !matches!(self.lookup(params, now), Lookup::Fetch)
    }
}

#[cfg(test)]
// Tests start their hand-moved clock from one real instant.
#[allow(clippy::disallowed_methods)]
mod tests;
