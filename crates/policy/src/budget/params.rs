//! Budget configuration: the `[budget]` table, its defaults and its checks.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{Cidr, ParamError};

/// The most 429s the breaker can be set to count: the throttle history per
/// host is a fixed ring of this many entries, to keep a host at 88 bytes.
pub const MAX_BREAKER_THRESHOLD: u32 = 5;

/// Budgets one proxy keeps in memory unless `budget.max_hosts` says
/// otherwise: as many as the robots.txt cache keeps entries.
pub const DEFAULT_MAX_HOSTS: usize = 100_000;

/// Highest rate a host may be given, in requests per second. Rates are kept
/// as whole micro-requests per second in a `u32`.
const MAX_RATE: f64 = 4000.0;
/// Longest pause, breaker or ceiling memory the compact clock of a host can
/// hold (see `host.rs`, which re-bases its clock every ~24 days and keeps
/// 8 days of history).
const MAX_LONG_SECS: f64 = 7.0 * 86_400.0;

macro_rules! budget_params {
    ($( $(#[$doc:meta])* $name:ident : $ty:ty = $default:expr, )*) => {
        /// The `[budget]` config table. Every number of the budget lives
        /// here, with the defaults documented on each field; a host may
        /// override any of them under `[budget.hosts."name"]`.
        ///
        /// Durations are seconds (`f64`) in keys ending `_secs`.
        #[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct BudgetParams {
            $( $(#[$doc])* pub $name: $ty, )*
            /// Per-host overrides, keyed by host name (no port; matched
            /// case-insensitively, exact name — not subdomains).
            pub hosts: BTreeMap<String, HostOverride>,
            /// Hours in which nothing is sent to some hosts (`visit`).
            pub quiet_hours: Vec<crate::visit::QuietHours>,
            /// What a budget is shared by: `site` (default), `host` or
            /// `ip` (see [`super::site`]).
            pub group_by: GroupBy,
            /// Groups the operator names, keyed by name: they come before
            /// `group_by`.
            pub groups: BTreeMap<String, NamedGroup>,
            /// Most budgets one proxy keeps in memory (hosts or groups);
            /// past it the least recently used idle ones are dropped (see
            /// the state crate's `bound.rs`). Not a per-host number.
            /// Default [`DEFAULT_MAX_HOSTS`].
            pub max_hosts: usize,
        }

        impl Default for BudgetParams {
            fn default() -> Self {
                BudgetParams {
                    $( $name: $default, )*
                    hosts: BTreeMap::new(),
                    group_by: GroupBy::default(),
                    groups: BTreeMap::new(),
                    quiet_hours: Vec::new(),
                    max_hosts: DEFAULT_MAX_HOSTS,
                }
            }
        }

        /// The budget parameters of one host: the global `[budget]` values
        /// with that host's overrides applied. See [`BudgetParams`] for the
        /// meaning of each field.
        #[derive(Clone, Copy, Debug, PartialEq, Serialize)]
        pub struct HostParams {
            $( $(#[$doc])* pub $name: $ty, )*
        }

        /// `[budget.hosts."name"]`: any budget number, for one host only.
        /// Absent keys take the global value.
        #[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct HostOverride {
            $( $(#[$doc])* pub $name: Option<$ty>, )*
        }

        impl BudgetParams {
            fn global(&self) -> HostParams {
                HostParams { $( $name: self.$name, )* }
            }
        }

        impl HostParams {
            fn overridden(mut self, o: &HostOverride) -> HostParams {
                $( if let Some(v) = o.$name { self.$name = v; } )*
                self
            }
        }
    };
}

budget_params! {
    /// Rate of a host never seen before, requests/s. Default 1.
    start_rate: f64 = 1.0,
    /// Highest rate a host ever gets, requests/s. Default 8.
    max_rate: f64 = 8.0,
    /// Lowest rate slow-downs go to, requests/s (a robots Crawl-delay may
    /// still go lower). Default 0.1.
    floor_rate: f64 = 0.1,
    /// Requests that may go back to back before spacing applies. Default 1.
    burst: u32 = 1,
    /// Requests in flight at once to a host. Default 2.
    concurrency: u32 = 2,
    /// Requests that may wait for a rate slot per host; one more is answered
    /// `queue_full`. Default 64.
    queue_limit: u32 = 64,
    /// Longest a request is held (rate queue, pause, concurrency, retries)
    /// before it is answered by the proxy itself. Default 30 s.
    max_hold_secs: f64 = 30.0,
    /// Longest pause a Retry-After can ask for; longer values are clamped.
    /// Default 3600 s.
    max_pause_secs: f64 = 3600.0,
    /// First pause after a 429 without a usable Retry-After; doubles with
    /// each further 429 before a success. Default 3 s.
    backoff_base_secs: f64 = 3.0,
    /// Largest exponential backoff pause. Default 300 s.
    backoff_max_secs: f64 = 300.0,
    /// Share of the backoff pause taken off at random: the pause is
    /// `backoff × (1 − backoff_jitter × jitter)`. Default 0.5.
    backoff_jitter: f64 = 0.5,
    /// The rate is multiplied by this on a 429. Default 0.5 (halved).
    throttle_rate_factor: f64 = 0.5,
    /// The ceiling becomes this share of the rate that drew a 429. Default 0.8.
    ceiling_factor: f64 = 0.8,
    /// When the sends the site accepted and refused show its limit (an
    /// allowance per window, `limit.rs`), the ceiling becomes this share
    /// of it instead. Default 0.9.
    learned_share: f64 = 0.9,
    /// The concurrency limit is multiplied by this on a 429 (rounded down,
    /// at least 1). Default 0.5.
    concurrency_factor: f64 = 0.5,
    /// The rate is multiplied by this on a 5xx that is not a throttle and
    /// on every distress event (timeout, reset, 502/503/504 without
    /// Retry-After, a run of 500s, a slow answer). Default 0.75.
    server_error_factor: f64 = 0.75,
    /// Distress events inside `distress_window_secs` that pause the host
    /// (a jittered exponential pause, counted by the breaker as a 429 is).
    /// Default 2.
    distress_threshold: u32 = 2,
    /// The window distress events are counted in. Default 60 s.
    distress_window_secs: f64 = 60.0,
    /// First pause after repeated distress; doubles with each further one
    /// before a success, reduced at random by `backoff_jitter`. Default 2 s.
    distress_backoff_base_secs: f64 = 2.0,
    /// Largest distress pause. Default 60 s.
    distress_backoff_max_secs: f64 = 60.0,
    /// 500s in a row that count as one distress event. Default 3.
    server_error_run: u32 = 3,
    /// A host whose fast average time to first byte climbs past this
    /// multiple of its baseline is slowed (rate and ceiling), as far as
    /// once a second; 0 turns latency off. Default 2.
    latency_factor: f64 = 2.0,
    /// Requests/s added to the rate by each successful response (additive
    /// recovery, never above the ceiling). Default 0.2.
    recovery_step: f64 = 0.2,
    /// Until a host's first 429, each success multiplies the rate by this
    /// when that climbs faster than `recovery_step` (slow start: the limit
    /// is found within a few requests instead of a few dozen); 1 turns it
    /// off. Default 1.2.
    slow_start_factor: f64 = 1.2,
    /// Successes in a row that give back one concurrency slot after a 429.
    /// Default 20.
    concurrency_recovery_successes: u32 = 20,
    /// Time for a lowered ceiling to climb back (linearly) to `max_rate`
    /// after the last 429. Default 21600 s (6 h).
    ceiling_relax_secs: f64 = 21_600.0,
    /// 429s inside `breaker_window_secs` that open the breaker (at most 5).
    /// Default 5.
    breaker_threshold: u32 = 5,
    /// The breaker's window: a 429 counts while younger than this. Default 60 s.
    breaker_window_secs: f64 = 60.0,
    /// How long an open breaker leaves the host alone. Default 300 s.
    breaker_open_secs: f64 = 300.0,
    /// Times the proxy may resend a throttled GET/HEAD/OPTIONS after its
    /// pause, within `max_hold_secs`. Default 2.
    retry_attempts: u32 = 2,
    /// Pace a host under the limit it announces in `RateLimit-Policy` /
    /// `RateLimit` or `X-RateLimit-*` response headers, and send nothing
    /// while it says nothing remains. Default true.
    announced_limits: bool = true,
    /// Share of an announced rate the host is paced at, leaving room for
    /// network jitter at the origin's window edges. Default 0.95.
    announced_share: f64 = 0.95,
}

// === impl BudgetParams ===

impl BudgetParams {
    /// Checks every value (global and per host) and normalises the host
    /// names of the overrides; the error names the offending key.
    pub fn validate(mut self) -> Result<Self, ParamError> {
        self.global().check("budget")?;
        if self.max_hosts == 0 {
            return Err(err("budget", "max_hosts", "must be at least 1"));
        }
        crate::visit::validate_quiet_hours(&self.quiet_hours)?;
        let mut hosts = BTreeMap::new();
        for (name, o) in std::mem::take(&mut self.hosts) {
            let key = super::host_key(&name).into_owned();
            let prefix = format!("budget.hosts.{name:?}");
            if key.is_empty() {
                return Err(err(&prefix, "", "host name is empty"));
            }
            self.global().overridden(&o).check(&prefix)?;
            if hosts.insert(key, o).is_some() {
                return Err(err(&prefix, "", "host is listed twice"));
            }
        }
        self.hosts = hosts;
        self.validate_groups()?;
        Ok(self)
    }

    /// Checks the numbers of an override laid over the global ones; the
    /// error's key starts with `prefix`.
    pub(crate) fn check_override(&self, o: &HostOverride, prefix: &str) -> Result<(), ParamError> {
        self.global().overridden(o).check(prefix)
    }

    /// The resolved parameters of a budget's key: a host (any case, port
    /// ignored), a site, an address or a named group (`group:NAME`).
    pub fn for_host(&self, host: &str) -> HostParams {
        let global = self.global();
        if self.hosts.is_empty() && self.groups.is_empty() {
            return global;
        }
        if let Some(o) = self.group_override(host) {
            return global.overridden(&o);
        }
        match self.hosts.get(super::host_key(host).as_ref()) {
            Some(o) => global.overridden(o),
            None => global,
        }
    }
}

/// A check's verdict: the faulty key under its table, and why.
type Checked = Result<(), (&'static str, &'static str)>;

fn err(prefix: &str, key: &str, reason: &str) -> ParamError {
    let key = if key.is_empty() {
        prefix.to_owned()
    } else {
        format!("{prefix}.{key}")
    };
    ParamError::new(key, reason)
}

// === impl HostParams ===

impl HostParams {
    fn check(&self, prefix: &str) -> Result<(), ParamError> {
        // Of several faulty keys, the first in this order is the one named.
        self.check_rates()
            .and_then(|()| self.check_queue())
            .and_then(|()| self.check_durations())
            .and_then(|()| self.check_slow_down())
            .and_then(|()| self.check_recovery())
            .and_then(|()| self.check_breaker_announced_retries())
            .and_then(|()| self.check_distress())
            .map_err(|(key, reason)| err(prefix, key, reason))
    }

    /// `start_rate`, `max_rate`, `floor_rate`: each a rate the compact host
    /// can hold, and in order.
    fn check_rates(&self) -> Checked {
        let rate_ok = |r: f64| r.is_finite() && r > 0.0 && r <= MAX_RATE;
        for (key, r) in [
            ("start_rate", self.start_rate),
            ("max_rate", self.max_rate),
            ("floor_rate", self.floor_rate),
        ] {
            if !rate_ok(r) {
                return Err((key, "must be a rate above 0 and at most 4000 requests/s"));
            }
        }
        if self.floor_rate > self.max_rate {
            return Err(("floor_rate", "must not be above max_rate"));
        }
        if self.start_rate < self.floor_rate || self.start_rate > self.max_rate {
            return Err(("start_rate", "must be between floor_rate and max_rate"));
        }
        Ok(())
    }

    /// `burst`, `concurrency`, `queue_limit`: how many requests go at once
    /// or wait.
    fn check_queue(&self) -> Checked {
        if !(1..=1000).contains(&self.burst) {
            return Err(("burst", "must be between 1 and 1000"));
        }
        if !(1..=10_000).contains(&self.concurrency) {
            return Err(("concurrency", "must be between 1 and 10000"));
        }
        if self.queue_limit > 100_000 {
            return Err(("queue_limit", "must be at most 100000"));
        }
        Ok(())
    }

    /// The `_secs` keys: within what a host's compact clock holds.
    fn check_durations(&self) -> Checked {
        if !secs_within(self.max_hold_secs, 3600.0) {
            return Err(("max_hold_secs", "must be between 0 and 3600 seconds"));
        }
        for (key, s) in [
            ("max_pause_secs", self.max_pause_secs),
            ("backoff_base_secs", self.backoff_base_secs),
            ("backoff_max_secs", self.backoff_max_secs),
            ("ceiling_relax_secs", self.ceiling_relax_secs),
            ("breaker_open_secs", self.breaker_open_secs),
            ("distress_window_secs", self.distress_window_secs),
            (
                "distress_backoff_base_secs",
                self.distress_backoff_base_secs,
            ),
            ("distress_backoff_max_secs", self.distress_backoff_max_secs),
        ] {
            if !secs_within(s, MAX_LONG_SECS) || s == 0.0 {
                return Err((key, "must be above 0 and at most 604800 seconds (7 days)"));
            }
        }
        if self.backoff_max_secs < self.backoff_base_secs {
            return Err(("backoff_max_secs", "must not be below backoff_base_secs"));
        }
        if self.distress_backoff_max_secs < self.distress_backoff_base_secs {
            return Err((
                "distress_backoff_max_secs",
                "must not be below distress_backoff_base_secs",
            ));
        }
        if !secs_within(self.breaker_window_secs, 86_400.0) || self.breaker_window_secs == 0.0 {
            return Err((
                "breaker_window_secs",
                "must be above 0 and at most 86400 seconds",
            ));
        }
        Ok(())
    }

    /// What a throttle does: the jitter of its backoff and the factors it
    /// multiplies by.
    fn check_slow_down(&self) -> Checked {
        if !secs_within(self.backoff_jitter, 1.0) {
            return Err(("backoff_jitter", "must be between 0 and 1"));
        }
        for (key, f) in [
            ("throttle_rate_factor", self.throttle_rate_factor),
            ("ceiling_factor", self.ceiling_factor),
            ("learned_share", self.learned_share),
            ("concurrency_factor", self.concurrency_factor),
            ("server_error_factor", self.server_error_factor),
        ] {
            if !(f.is_finite() && f > 0.0 && f <= 1.0) {
                return Err((key, "must be a factor in (0, 1]"));
            }
        }
        Ok(())
    }

    /// How a host climbs back after a throttle, or before its first one.
    fn check_recovery(&self) -> Checked {
        if !secs_within(self.recovery_step, MAX_RATE) {
            return Err(("recovery_step", "must be between 0 and 4000 requests/s"));
        }
        if !(self.slow_start_factor.is_finite() && (1.0..=10.0).contains(&self.slow_start_factor)) {
            return Err(("slow_start_factor", "must be a factor between 1 and 10"));
        }
        if !(1..=u32::from(u16::MAX)).contains(&self.concurrency_recovery_successes) {
            return Err((
                "concurrency_recovery_successes",
                "must be between 1 and 65535",
            ));
        }
        Ok(())
    }

    /// `breaker_threshold` (the history ring's size bounds it),
    /// `announced_share` and `retry_attempts`.
    fn check_breaker_announced_retries(&self) -> Checked {
        if !(1..=MAX_BREAKER_THRESHOLD).contains(&self.breaker_threshold) {
            return Err(("breaker_threshold", "must be between 1 and 5"));
        }
        if !(self.announced_share.is_finite()
            && self.announced_share > 0.0
            && self.announced_share <= 1.0)
        {
            return Err(("announced_share", "must be a factor in (0, 1]"));
        }
        if self.retry_attempts > 10 {
            return Err(("retry_attempts", "must be at most 10"));
        }
        Ok(())
    }

    /// What counts as distress: how many events pause, how many 500s make
    /// one, how slow an answer must be.
    fn check_distress(&self) -> Checked {
        if !(1..=100).contains(&self.distress_threshold) {
            return Err(("distress_threshold", "must be between 1 and 100"));
        }
        if !(1..=100).contains(&self.server_error_run) {
            return Err(("server_error_run", "must be between 1 and 100"));
        }
        if !(self.latency_factor == 0.0
            || (self.latency_factor.is_finite() && (1.1..=100.0).contains(&self.latency_factor)))
        {
            return Err(("latency_factor", "must be 0 (off) or between 1.1 and 100"));
        }
        Ok(())
    }

    /// Longest a request is held before the proxy answers it itself.
    pub fn max_hold(&self) -> Duration {
        secs(self.max_hold_secs)
    }

    /// Longest pause a Retry-After may impose.
    pub fn max_pause(&self) -> Duration {
        secs(self.max_pause_secs)
    }

    /// Whether the proxy should resend a request that drew a throttle:
    /// only GET, HEAD and OPTIONS, at most `retry_attempts` times, and only
    /// when the pause ends within what is left of the hold.
    pub fn may_retry(
        &self,
        method: &http::Method,
        attempts_so_far: u32,
        pause: Duration,
        hold_left: Duration,
    ) -> bool {
        self.no_retry(method, attempts_so_far, pause, hold_left)
            .is_none()
    }

    /// Why a throttled request is not sent again ([`HostParams::may_retry`]
    /// in words, for the audit line), or `None` when it is.
    pub fn no_retry(
        &self,
        method: &http::Method,
        attempts_so_far: u32,
        pause: Duration,
        hold_left: Duration,
    ) -> Option<&'static str> {
        let idempotent_read = *method == http::Method::GET
            || *method == http::Method::HEAD
            || *method == http::Method::OPTIONS;
        if !idempotent_read {
            Some("only GET, HEAD and OPTIONS are sent again")
        } else if attempts_so_far >= self.retry_attempts {
            Some("sent again as often as budget.retry_attempts allows")
        } else if pause > hold_left {
            Some("the pause ends after the request's hold (budget.max_hold_secs)")
        } else {
            None
        }
    }

    // Internal units: micro-requests per second and milliseconds, so that
    // the budget arithmetic is exact and compact.

    pub(crate) fn start_u(&self) -> u32 {
        micro(self.start_rate)
    }
    pub(crate) fn max_u(&self) -> u32 {
        micro(self.max_rate)
    }
    pub(crate) fn floor_u(&self) -> u32 {
        micro(self.floor_rate).min(self.max_u())
    }
    pub(crate) fn step_u(&self) -> u32 {
        micro(self.recovery_step)
    }
    pub(crate) fn concurrency_u(&self) -> u16 {
        u16::try_from(self.concurrency).unwrap_or(u16::MAX).max(1)
    }
    pub(crate) fn backoff_base_ms(&self) -> u64 {
        millis(self.backoff_base_secs)
    }
    pub(crate) fn backoff_max_ms(&self) -> u64 {
        millis(self.backoff_max_secs)
    }
    pub(crate) fn max_pause_ms(&self) -> u64 {
        millis(self.max_pause_secs)
    }
    pub(crate) fn relax_ms(&self) -> u64 {
        millis(self.ceiling_relax_secs).max(1)
    }
    pub(crate) fn window_ms(&self) -> u64 {
        millis(self.breaker_window_secs)
    }
    pub(crate) fn distress_window_ms(&self) -> u64 {
        millis(self.distress_window_secs)
    }
    pub(crate) fn distress_base_ms(&self) -> u64 {
        millis(self.distress_backoff_base_secs)
    }
    pub(crate) fn distress_max_ms(&self) -> u64 {
        millis(self.distress_backoff_max_secs)
    }
    pub(crate) fn breaker_open_ms(&self) -> u64 {
        millis(self.breaker_open_secs)
    }
}

/// Requests/s to whole micro-requests/s (saturating; NaN → 0).
pub(crate) fn micro(rate: f64) -> u32 {
    (rate * 1e6).round().clamp(0.0, f64::from(u32::MAX)) as u32
}

/// Seconds to whole milliseconds (saturating; NaN → 0).
pub(crate) fn millis(secs: f64) -> u64 {
    (secs * 1000.0).round().clamp(0.0, 1e15) as u64
}

/// Whether `s` is a finite number between 0 and `max`.
fn secs_within(s: f64, max: f64) -> bool {
    s.is_finite() && s >= 0.0 && s <= max
}

fn secs(s: f64) -> Duration {
    Duration::from_millis(millis(s))
}

// The `[budget]` tables' own types live with them; which group a name
// falls in is `site.rs`'s, which reads these.

/// What a budget is shared by, when no named group claims the request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupBy {
    /// The registrable domain (eTLD+1 by the Public Suffix List, private
    /// section included).
    #[default]
    Site,
    /// The host name (one budget per name).
    Host,
    /// The address the name resolves to (the lowest, when several).
    Ip,
}

/// `[budget.groups.NAME]`: hosts and address blocks that share one budget,
/// with their own numbers.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct NamedGroup {
    /// Host names (`shop.example.com`) or every name under a domain
    /// (`*.example.com`, any depth, not the domain itself).
    pub hosts: Vec<String>,
    /// Address blocks (`192.0.2.0/24`, `2001:db8::/32`, one address): a
    /// name resolving into one belongs to the group.
    pub addresses: Vec<String>,
    /// The group's start rate, requests/s (default: `budget.start_rate`).
    pub start_rate: Option<f64>,
    /// The group's highest rate, requests/s (default: `budget.max_rate`).
    pub max_rate: Option<f64>,
    /// Requests in flight at once to the whole group (default:
    /// `budget.concurrency`).
    pub concurrency: Option<u32>,
    /// Requests that may go back to back (default: `budget.burst`).
    pub burst: Option<u32>,
    /// `addresses`, read (by `site.rs`, which checks and matches them).
    #[serde(skip)]
    pub(super) nets: Vec<Cidr>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_documented_numbers() {
        let p = BudgetParams::default().validate().unwrap();
        assert_eq!(
            (p.start_rate, p.max_rate, p.burst, p.concurrency),
            (1.0, 8.0, 1, 2)
        );
        assert_eq!(p.max_hold_secs, 30.0);
        assert_eq!(
            (
                p.breaker_threshold,
                p.breaker_window_secs,
                p.breaker_open_secs
            ),
            (5, 60.0, 300.0)
        );
    }

    #[test]
    fn nonsense_is_rejected_with_its_key() {
        let p = BudgetParams {
            start_rate: 0.0,
            ..Default::default()
        };
        assert_eq!(p.validate().unwrap_err().key, "budget.start_rate");
        let p = BudgetParams {
            ceiling_factor: 1.5,
            ..Default::default()
        };
        assert_eq!(p.validate().unwrap_err().key, "budget.ceiling_factor");
        let p = BudgetParams {
            breaker_threshold: 6,
            ..Default::default()
        };
        assert_eq!(p.validate().unwrap_err().key, "budget.breaker_threshold");
        let mut p = BudgetParams::default();
        p.hosts.insert(
            "Slow.Example".into(),
            HostOverride {
                burst: Some(0),
                ..Default::default()
            },
        );
        let e = p.validate().unwrap_err();
        assert_eq!(e.key, "budget.hosts.\"Slow.Example\".burst");
        let p = BudgetParams {
            slow_start_factor: 0.9,
            ..Default::default()
        };
        assert_eq!(p.validate().unwrap_err().key, "budget.slow_start_factor");
        assert!(e
            .to_string()
            .starts_with("budget.hosts.\"Slow.Example\".burst: "));
    }

    #[test]
    fn host_overrides_resolve_case_insensitively() {
        let mut p = BudgetParams::default();
        p.hosts.insert(
            "Slow.Example".into(),
            HostOverride {
                max_rate: Some(0.5),
                start_rate: Some(0.5),
                ..Default::default()
            },
        );
        let p = p.validate().unwrap();
        assert_eq!(p.for_host("slow.example:443").max_rate, 0.5);
        assert_eq!(p.for_host("slow.example").concurrency, 2);
        assert_eq!(p.for_host("other.example").max_rate, 8.0);
    }

    #[test]
    fn config_keys_deserialize_and_typos_are_errors() {
        let p: BudgetParams = serde_json::from_str(
            r#"{"max_rate": 4.0, "max_hold_secs": 10.0, "hosts": {"a.example": {"burst": 2}}}"#,
        )
        .unwrap();
        let p = p.validate().unwrap();
        assert_eq!((p.max_rate, p.start_rate), (4.0, 1.0));
        assert_eq!(p.for_host("a.example").burst, 2);
        assert_eq!(p.for_host("a.example").max_hold(), Duration::from_secs(10));
        let typo = serde_json::from_str::<BudgetParams>(r#"{"max_rate_": 4.0}"#);
        assert!(typo.unwrap_err().to_string().contains("max_rate_"));
        let typo = serde_json::from_str::<BudgetParams>(r#"{"hosts": {"a": {"brust": 2}}}"#);
        assert!(typo.is_err());
    }

    #[test]
    fn retry_only_reads_within_the_hold() {
        let p = BudgetParams::default().for_host("a");
        let s = Duration::from_secs;
        assert!(p.may_retry(&http::Method::GET, 0, s(5), s(30)));
        assert!(!p.may_retry(&http::Method::POST, 0, s(5), s(30)));
        assert!(!p.may_retry(&http::Method::GET, 2, s(5), s(30)));
        assert!(!p.may_retry(&http::Method::GET, 0, s(31), s(30)));
        assert_eq!(
            p.no_retry(&http::Method::GET, 2, s(5), s(30)),
            Some("sent again as often as budget.retry_attempts allows")
        );
        assert_eq!(p.no_retry(&http::Method::GET, 1, s(5), s(30)), None);
    }
}
