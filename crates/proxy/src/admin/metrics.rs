//! `/metrics`: counters fed by the audit records (so they equal the audit
//! lines by construction) and gauges read from the host store at scrape
//! time, rendered in the Prometheus text format by
//! `metrics-exporter-prometheus` (its own HTTP listener is not used).
//!
//! The recorder is this proxy's own, not the process-global one, so two
//! proxies in one process (tests) never mix their figures.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use mannerly_policy::budget::Distress;
use mannerly_policy::robots_cache::fetch_failed;
use mannerly_policy::{AuditRecord, Outcome};
use metrics::{Counter, Gauge, Histogram, Key, Label, Level, Metadata, Recorder};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

/// Every outcome, in the order of [`index`].
pub(crate) const OUTCOMES: [Outcome; 23] = [
    Outcome::Fetched,
    Outcome::Revalidated,
    Outcome::Unchanged,
    Outcome::Disallowed,
    Outcome::RobotsUnavailable,
    Outcome::SignalRefused,
    Outcome::Throttled,
    Outcome::Paused,
    Outcome::BreakerOpen,
    Outcome::QueueFull,
    Outcome::Blocked,
    Outcome::Error,
    Outcome::RobotsFetched,
    Outcome::Tunneled,
    Outcome::OperatorReset,
    Outcome::Denied,
    Outcome::PaymentRequired,
    Outcome::Paced,
    Outcome::TdmrepFetched,
    Outcome::PaymentRefused,
    Outcome::PaymentFailed,
    Outcome::Distressed,
    Outcome::Collapsed,
];

/// Position of an outcome in [`OUTCOMES`]; exhaustive, so a new outcome
/// cannot be forgotten here.
fn index(o: Outcome) -> usize {
    match o {
        Outcome::Fetched => 0,
        Outcome::Revalidated => 1,
        Outcome::Unchanged => 2,
        Outcome::Disallowed => 3,
        Outcome::RobotsUnavailable => 4,
        Outcome::SignalRefused => 5,
        Outcome::Throttled => 6,
        Outcome::Paused => 7,
        Outcome::BreakerOpen => 8,
        Outcome::QueueFull => 9,
        Outcome::Blocked => 10,
        Outcome::Error => 11,
        Outcome::RobotsFetched => 12,
        Outcome::Tunneled => 13,
        Outcome::OperatorReset => 14,
        Outcome::Denied => 15,
        Outcome::PaymentRequired => 16,
        Outcome::Paced => 17,
        Outcome::TdmrepFetched => 18,
        Outcome::PaymentRefused => 19,
        Outcome::PaymentFailed => 20,
        Outcome::Distressed => 21,
        Outcome::Collapsed => 22,
    }
}

/// Seconds; from "no wait" to the longest hold a config allows.
const WAIT_BUCKETS: &[f64] = &[
    0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// What the Redis backend has done since start.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct RedisCounts {
    pub round_trips: u64,
    pub conflicts: u64,
    pub degraded_ops: u64,
    pub contended_ops: u64,
    /// Waiters woken by another proxy's released slot.
    pub woken_by_message: u64,
    /// Whether those releases are heard now.
    pub wakes_live: bool,
    /// Waiters woken by another proxy's early end of a pause (a reset).
    pub woken_by_reset: u64,
    /// Waits for another proxy's robots.txt copy woken by its message.
    pub robots_woken_by_message: u64,
    /// Requests asleep now until another proxy's robots.txt copy comes.
    pub robots_asleep: u64,
    /// Messages delivered to this proxy on the channels it listens on.
    pub messages_heard: u64,
    /// Host and origin channels this proxy listens on now.
    pub channels_heard: u64,
}

/// Scrape-time figures the caller reads from the store and elsewhere.
#[derive(Debug, Default)]
pub(crate) struct Gauges {
    pub hosts_tracked: u64,
    pub hosts_paused: u64,
    pub hosts_breaker_open: u64,
    pub queued: u64,
    /// Requests asleep now until their host's turn.
    pub asleep: u64,
    pub in_flight: u64,
    pub store_errors: u64,
    pub store: mannerly_state::responses::StoreStats,
    pub audit_lines: u64,
    pub audit_write_errors: u64,
    /// Bytes saved by asking for compression on identity-only clients' behalf.
    pub compression_saved: u64,
    pub backend_degraded: bool,
    /// Budgets dropped to stay within `budget.max_hosts`.
    pub budget_evicted: mannerly_state::hosts::Evicted,
    /// The Redis backend's counters, when budgets are shared.
    pub redis: Option<RedisCounts>,
    /// For hosts in `admin.host_labels`: (host, rate, ceiling, paused seconds).
    pub labelled: Vec<(String, f64, f64, f64)>,
}

pub(crate) struct Metrics {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    decisions: Vec<Counter>,
    /// Plain copies of the decision counts, for the dashboard's totals.
    totals: [AtomicU64; OUTCOMES.len()],
    status: [Counter; 5],
    wait: Histogram,
    latency: Histogram,
    robots_fetches: Counter,
    robots_failures: Counter,
    distress: Vec<Counter>,
    cache_stored: Counter,
    cache_revalidated: Counter,
    cache_saved_bytes: Counter,
    per_host: HashMap<String, Vec<Counter>>,
    /// What was paid, per host.
    spend: super::spend::Spend,
    /// Observations since the histograms' samples were last folded in.
    since_upkeep: AtomicU64,
}

/// The Prometheus recorder keeps every histogram sample until an upkeep (or
/// a scrape) folds it into the buckets, and without a scraper nothing did:
/// about 18 bytes a request, for ever (heaptrack: the leak was all
/// `AtomicBucket` blocks). An upkeep every this many observations bounds it.
const UPKEEP_EVERY: u64 = 4096;

fn meta() -> Metadata<'static> {
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()))
}

/// The `# HELP` text of each family that has one; the rest are left bare.
const HELP: &[(&str, &str)] = &[
    (
        "mannerly_payment_spent",
        "Paid to the host since start (crawler-charged, x402 amounts), by currency.",
    ),
    (
        "mannerly_payment_spent_all",
        "Paid to all hosts since start, by currency.",
    ),
    (
        "mannerly_payment_pages_bought_total",
        "Pages the host charged for.",
    ),
    (
        "mannerly_payment_pages_saved_total",
        "Bought pages revalidated (304) or served stored instead of bought again.",
    ),
    (
        "mannerly_decisions_total",
        "Decisions by outcome; equals the audit lines of each outcome.",
    ),
    (
        "mannerly_upstream_responses_total",
        "Responses from origins by status class (robots.txt fetches included).",
    ),
    (
        "mannerly_robots_fetches_total",
        "robots.txt fetches made by the proxy.",
    ),
    (
        "mannerly_distress_events_total",
        "What origins showed without a 429, by event: timeouts, resets, 502/503/504 without Retry-After, runs of 500s, slow answers.",
    ),
    (
        "mannerly_robots_fetch_failures_total",
        "robots.txt fetches that left the origin unavailable (429, 5xx, network, redirects).",
    ),
    (
        "mannerly_cache_stored_total",
        "Responses written to the store.",
    ),
    (
        "mannerly_cache_revalidated_total",
        "304s to our validators answered with the stored page.",
    ),
    (
        "mannerly_cache_saved_bytes_total",
        "Body bytes clients got without the origin sending them.",
    ),
    ("mannerly_store_errors_total", "Response store failures."),
    (
        "mannerly_store_entries",
        "Pages (variants) in the response store.",
    ),
    (
        "mannerly_store_bytes",
        "Bytes the stored pages count against cache.max_size.",
    ),
    (
        "mannerly_store_resident_bytes",
        "Bytes of stored pages held decoded in memory (cache.memory_size).",
    ),
    (
        "mannerly_store_commits_total",
        "Store write transactions; under load one carries many pages.",
    ),
    (
        "mannerly_store_read_commits_total",
        "Store commits of read ticks alone (recency kept across a restart), once reads pause; not in mannerly_store_commits_total.",
    ),
    (
        "mannerly_store_forced_commits_total",
        "Store commits forced to disk; with cache.sync = \"none\" one follows within 0.1 s of the first unforced one, or once 512 KiB of pages were committed unforced.",
    ),
    (
        "mannerly_store_evicted_total",
        "Pages evicted to stay under cache.max_size.",
    ),
    (
        "mannerly_budget_evicted_total",
        "Budgets dropped to stay within budget.max_hosts, by what they held: idle (nothing to remember) or learned (a lowered ceiling or rate; with Redis, a copy read again).",
    ),
    ("mannerly_audit_lines_total", "Audit lines written."),
    (
        "mannerly_compression_saved_bytes_total",
        "Bytes the origins did not send because the proxy asked for gzip or br for clients that take identity only.",
    ),
    (
        "mannerly_audit_write_errors_total",
        "Audit log write failures (after one, no more lines are written).",
    ),
];

/// A recorder with the wait and latency buckets set.
fn recorder() -> PrometheusRecorder {
    // Only fails on an empty bucket list; the lists above are not.
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full("mannerly_wait_seconds".into()), WAIT_BUCKETS)
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full("mannerly_upstream_latency_seconds".into()),
                LATENCY_BUCKETS,
            )
        })
        .unwrap_or_else(|_| PrometheusBuilder::new())
        .build_recorder()
}

fn describe(r: &PrometheusRecorder) {
    // Gauges too go through `describe_counter`: the exporter keeps one help
    // text per name whatever its kind.
    for (name, help) in HELP {
        r.describe_counter((*name).into(), None, (*help).into());
    }
}

fn counter(r: &PrometheusRecorder, name: &'static str, labels: Vec<Label>) -> Counter {
    r.register_counter(&Key::from_parts(name, labels), &meta())
}

/// One counter of `name` per outcome, in the order of [`OUTCOMES`], each
/// with `labels` before its `outcome` label.
fn by_outcome(r: &PrometheusRecorder, name: &'static str, labels: &[Label]) -> Vec<Counter> {
    OUTCOMES
        .iter()
        .map(|o| {
            let mut l = labels.to_vec();
            l.push(Label::new("outcome", o.as_str()));
            counter(r, name, l)
        })
        .collect()
}

/// Upstream responses by status class, `1xx` first.
fn by_status_class(r: &PrometheusRecorder) -> [Counter; 5] {
    ["1xx", "2xx", "3xx", "4xx", "5xx"].map(|c| {
        counter(
            r,
            "mannerly_upstream_responses_total",
            vec![Label::new("class", c)],
        )
    })
}

/// Decisions by outcome for each host in `admin.host_labels`, keyed by the
/// normalised host that audit records carry.
fn by_host(r: &PrometheusRecorder, host_labels: &[String]) -> HashMap<String, Vec<Counter>> {
    host_labels
        .iter()
        .map(|h| {
            let host = mannerly_policy::budget::host_key(h).into_owned();
            let counters = by_outcome(
                r,
                "mannerly_host_decisions_total",
                &[Label::new("host", host.clone())],
            );
            (host, counters)
        })
        .collect()
}

fn histogram(r: &PrometheusRecorder, name: &'static str) -> Histogram {
    r.register_histogram(&Key::from_name(name), &meta())
}

impl Metrics {
    pub(super) fn new(host_labels: &[String]) -> Metrics {
        let recorder = recorder();
        describe(&recorder);
        let r = &recorder;
        Metrics {
            decisions: by_outcome(r, "mannerly_decisions_total", &[]),
            totals: std::array::from_fn(|_| AtomicU64::new(0)),
            status: by_status_class(r),
            per_host: by_host(r, host_labels),
            wait: histogram(r, "mannerly_wait_seconds"),
            latency: histogram(r, "mannerly_upstream_latency_seconds"),
            robots_fetches: counter(r, "mannerly_robots_fetches_total", vec![]),
            robots_failures: counter(r, "mannerly_robots_fetch_failures_total", vec![]),
            distress: Distress::ALL
                .iter()
                .map(|d| {
                    let event = vec![Label::new("event", d.as_str())];
                    counter(r, "mannerly_distress_events_total", event)
                })
                .collect(),
            cache_stored: counter(r, "mannerly_cache_stored_total", vec![]),
            cache_revalidated: counter(r, "mannerly_cache_revalidated_total", vec![]),
            cache_saved_bytes: counter(r, "mannerly_cache_saved_bytes_total", vec![]),
            since_upkeep: AtomicU64::new(0),
            spend: super::spend::Spend::default(),
            handle: recorder.handle(),
            recorder,
        }
    }

    /// Counts one audit record.
    pub(super) fn observe(&self, rec: &AuditRecord) {
        let Some(outcome) = rec.outcome else { return };
        let i = index(outcome);
        self.decisions[i].increment(1);
        self.totals[i].fetch_add(1, Ordering::Relaxed);
        // A label names a host or a budget group (a site, `group:NAME`).
        let group = rec.group.as_deref().filter(|g| *g != rec.host);
        let labelled = self.per_host.get(rec.host.as_str());
        for counters in labelled
            .into_iter()
            .chain(group.and_then(|g| self.per_host.get(g)))
        {
            counters[i].increment(1);
        }
        let upstream_status = match outcome {
            Outcome::Revalidated => Some(304),
            Outcome::Fetched
            | Outcome::Unchanged
            | Outcome::Throttled
            | Outcome::RobotsFetched
            | Outcome::TdmrepFetched => rec.status,
            // The throttle that opened the breaker was the origin's answer.
            Outcome::BreakerOpen if rec.sent.is_some() => rec.status,
            _ => None,
        };
        if let Some(s) = upstream_status.filter(|s| (100..600).contains(s)) {
            self.status[usize::from(s / 100 - 1)].increment(1);
        }
        if let Some(ms) = rec.waited_ms {
            self.wait.record(ms as f64 / 1000.0);
        }
        if let Some(ms) = rec.upstream_ms {
            self.latency.record(ms as f64 / 1000.0);
        }
        if self.since_upkeep.fetch_add(1, Ordering::Relaxed) + 1 >= UPKEEP_EVERY {
            self.since_upkeep.store(0, Ordering::Relaxed);
            self.handle.run_upkeep();
        }
        // A refusal names the distress that paused its host; only the
        // request that showed it counts.
        if let Some(event) = rec.distress.filter(|_| outcome != Outcome::Distressed) {
            if let Some(i) = Distress::ALL.iter().position(|d| d.as_str() == event) {
                self.distress[i].increment(1);
            }
        }
        if outcome == Outcome::RobotsFetched {
            self.robots_fetches.increment(1);
            if fetch_failed(rec.status, rec.reason.as_deref()) {
                self.robots_failures.increment(1);
            }
        }
        match rec.cache {
            Some("stored") => self.cache_stored.increment(1),
            Some("revalidated") => self.cache_revalidated.increment(1),
            _ => {}
        }
        if let Some(b) = rec.saved_bytes {
            self.cache_saved_bytes.increment(b);
        }
        self.spend.observe(rec);
    }

    /// Decision counts by outcome name, for the dashboard.
    pub(super) fn totals(&self) -> Vec<(&'static str, u64)> {
        OUTCOMES
            .iter()
            .zip(&self.totals)
            .map(|(o, n)| (o.as_str(), n.load(Ordering::Relaxed)))
            .collect()
    }

    /// The Prometheus text, with the gauges set to `g` first.
    pub(super) fn render(&self, g: &Gauges) -> String {
        let r = &self.recorder;
        let gauge = |name: &'static str, labels: Vec<Label>| -> Gauge {
            r.register_gauge(&Key::from_parts(name, labels), &meta())
        };
        let total = |name: &'static str, v: u64| {
            r.register_counter(&Key::from_name(name), &meta())
                .absolute(v)
        };
        gauge("mannerly_hosts_tracked", vec![]).set(g.hosts_tracked as f64);
        gauge("mannerly_hosts_paused", vec![]).set(g.hosts_paused as f64);
        gauge("mannerly_hosts_breaker_open", vec![]).set(g.hosts_breaker_open as f64);
        gauge("mannerly_queue_depth", vec![]).set(g.queued as f64);
        gauge("mannerly_in_flight", vec![]).set(g.in_flight as f64);
        gauge("mannerly_requests_asleep", vec![]).set(g.asleep as f64);
        gauge("mannerly_state_backend_degraded", vec![]).set(if g.backend_degraded {
            1.0
        } else {
            0.0
        });
        self.render_store(g);
        let evicted = |held: &'static str, v: u64| {
            let labels = vec![Label::new("held", held)];
            r.register_counter(
                &Key::from_parts("mannerly_budget_evicted_total", labels),
                &meta(),
            )
            .absolute(v)
        };
        evicted("idle", g.budget_evicted.idle);
        evicted("learned", g.budget_evicted.learned);
        if let Some(r) = &g.redis {
            total("mannerly_state_redis_round_trips_total", r.round_trips);
            total("mannerly_state_redis_conflicts_total", r.conflicts);
            total("mannerly_state_redis_degraded_ops_total", r.degraded_ops);
            total("mannerly_state_redis_contended_ops_total", r.contended_ops);
            total(
                "mannerly_state_redis_woken_by_message_total",
                r.woken_by_message,
            );
            gauge("mannerly_state_redis_wakes_live", vec![]).set(f64::from(u8::from(r.wakes_live)));
            total(
                "mannerly_state_redis_woken_by_reset_total",
                r.woken_by_reset,
            );
            total(
                "mannerly_state_redis_robots_woken_by_message_total",
                r.robots_woken_by_message,
            );
            gauge("mannerly_state_redis_robots_asleep", vec![]).set(r.robots_asleep as f64);
            total(
                "mannerly_state_redis_messages_heard_total",
                r.messages_heard,
            );
            gauge("mannerly_state_redis_channels_heard", vec![]).set(r.channels_heard as f64);
        }
        total("mannerly_audit_lines_total", g.audit_lines);
        total("mannerly_audit_write_errors_total", g.audit_write_errors);
        total(
            "mannerly_compression_saved_bytes_total",
            g.compression_saved,
        );
        for (host, rate, ceiling, paused) in &g.labelled {
            let l = || vec![Label::new("host", host.clone())];
            gauge("mannerly_host_rate", l()).set(*rate);
            gauge("mannerly_host_ceiling", l()).set(*ceiling);
            gauge("mannerly_host_paused_seconds", l()).set(*paused);
        }
        self.render_spend();
        self.handle.render()
    }

    /// The response store's series.
    fn render_store(&self, g: &Gauges) {
        let r = &self.recorder;
        let gauge = |name: &'static str, v: u64| {
            r.register_gauge(&Key::from_name(name), &meta())
                .set(v as f64);
        };
        let total = |name: &'static str, v: u64| {
            r.register_counter(&Key::from_name(name), &meta())
                .absolute(v)
        };
        total("mannerly_store_errors_total", g.store_errors);
        gauge("mannerly_store_entries", g.store.entries);
        gauge("mannerly_store_bytes", g.store.bytes);
        gauge("mannerly_store_resident_bytes", g.store.resident_bytes);
        total("mannerly_store_commits_total", g.store.commits);
        total("mannerly_store_read_commits_total", g.store.read_commits);
        total(
            "mannerly_store_forced_commits_total",
            g.store.forced_commits,
        );
        total("mannerly_store_evicted_total", g.store.evicted);
    }

    /// What was paid, per host and in all, by currency.
    fn render_spend(&self) {
        let r = &self.recorder;
        let gauge = |name: &'static str, labels: Vec<Label>| -> Gauge {
            r.register_gauge(&Key::from_parts(name, labels), &meta())
        };
        let total = |name: &'static str, v: u64| {
            r.register_counter(&Key::from_name(name), &meta())
                .absolute(v)
        };
        let mut all: std::collections::BTreeMap<String, mannerly_policy::payment::Money> =
            Default::default();
        let (mut bought, mut saved) = (0, 0);
        for (host, h) in self.spend.hosts() {
            let host_label = || Label::new("host", host.clone());
            for (currency, m) in &h.spent {
                let l = vec![host_label(), Label::new("currency", currency.clone())];
                gauge("mannerly_payment_spent", l).set(super::spend::as_gauge(m));
                let sum = all
                    .entry(currency.clone())
                    .or_insert_with(|| mannerly_policy::payment::Money::zero(currency));
                *sum = sum.checked_add(m).unwrap_or_else(|_| sum.clone());
            }
            let key = |name| Key::from_parts(name, vec![host_label()]);
            let counter = |name| r.register_counter(&key(name), &meta());
            counter("mannerly_payment_pages_bought_total").absolute(h.bought);
            counter("mannerly_payment_pages_saved_total").absolute(h.saved);
            bought += h.bought;
            saved += h.saved;
        }
        for (currency, m) in &all {
            let l = vec![Label::new("currency", currency.clone())];
            gauge("mannerly_payment_spent_all", l).set(super::spend::as_gauge(m));
        }
        total("mannerly_payment_bought_all_total", bought);
        total("mannerly_payment_saved_all_total", saved);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use mannerly_policy::{AuditRecord, Outcome};

    use super::{Gauges, Metrics, UPKEEP_EVERY};
    use crate::hosts::robots::{fetch_record, report};
    use mannerly_policy::prefs::TdmFile;
    use mannerly_policy::robots::Robots;
    use mannerly_policy::robots_cache::FetchResult;

    /// A robots.txt fetch counts as failed when it left the rules unknown,
    /// whatever its status: a 200 whose body never arrived failed, a 404
    /// (no rules) did not.
    #[test]
    fn a_robots_fetch_counts_as_failed_when_it_left_the_rules_unknown() {
        let m = Metrics::new(&[]);
        for (status, result) in [
            (Some(200), FetchResult::Body(b"User-agent: *\n".to_vec())),
            (Some(404), FetchResult::Status(404)),
            (Some(200), FetchResult::Failed("body cut short".into())),
            (Some(503), FetchResult::Status(503)),
        ] {
            let report = report("http://a.test/robots.txt", status, result);
            m.observe(&fetch_record::<Robots>(Box::default(), &report));
        }
        // A tdmrep.json fetch is a decision of its own, not a robots.txt fetch.
        let url = "http://a.test/.well-known/tdmrep.json";
        let tdm = report(url, Some(503), FetchResult::Status(503));
        m.observe(&fetch_record::<TdmFile>(Box::default(), &tdm));
        let text = m.render(&Gauges::default());
        assert!(
            text.contains(r#"mannerly_decisions_total{outcome="tdmrep_fetched"} 1"#),
            "{text}"
        );
        assert!(text.contains("mannerly_robots_fetches_total 4"), "{text}");
        assert!(
            text.contains("mannerly_robots_fetch_failures_total 2"),
            "{text}"
        );
    }

    /// Charges are summed exactly per host; a saved charge is a page not
    /// bought twice.
    #[test]
    fn spend_is_shown_per_host_and_in_all() {
        let m = Metrics::new(&[]);
        let line = |host: &str, charged: Option<&str>, saved: Option<&str>| AuditRecord {
            host: host.into(),
            outcome: Some(Outcome::Fetched),
            charged: charged.map(String::from),
            saved_charge: saved.map(String::from),
            ..AuditRecord::default()
        };
        for _ in 0..3 {
            m.observe(&line("a.test", Some("USD 0.1"), None));
        }
        m.observe(&line("b.test", Some("USD 0.2"), None));
        m.observe(&line("a.test", None, Some("USD 0.1")));
        m.observe(&line("c.test", None, None));
        let text = m.render(&Gauges::default());
        for want in [
            "mannerly_payment_spent{host=\"a.test\",currency=\"USD\"} 0.3",
            "mannerly_payment_spent{host=\"b.test\",currency=\"USD\"} 0.2",
            "mannerly_payment_spent_all{currency=\"USD\"} 0.5",
            "mannerly_payment_pages_bought_total{host=\"a.test\"} 3",
            "mannerly_payment_pages_saved_total{host=\"a.test\"} 1",
            "mannerly_payment_bought_all_total 4",
            "mannerly_payment_saved_all_total 1",
        ] {
            assert!(text.contains(want), "{want} in {text}");
        }
        assert!(!text.contains("c.test"), "{text}");
    }

    /// Without a scrape, histogram samples are folded in every
    /// `UPKEEP_EVERY` observations instead of piling up; none is lost.
    #[test]
    fn histogram_samples_do_not_pile_up_without_a_scrape() {
        let m = Metrics::new(&[]);
        let n = 3 * UPKEEP_EVERY + 7;
        for _ in 0..n {
            let rec = AuditRecord {
                outcome: Some(Outcome::Fetched),
                status: Some(200),
                waited_ms: Some(3),
                upstream_ms: Some(2),
                ..AuditRecord::default()
            };
            m.observe(&rec);
        }
        assert_eq!(m.since_upkeep.load(Ordering::Relaxed), 7);
        let text = m.render(&Gauges::default());
        assert!(
            text.contains(&format!("mannerly_wait_seconds_count {n}")),
            "{text}"
        );
        assert!(
            text.contains(&format!("mannerly_upstream_latency_seconds_count {n}")),
            "{text}"
        );
    }
}
