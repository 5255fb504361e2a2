//! The robots.txt cache: one entry per (scheme, host, port), filled by a
//! single fetch however many requests arrive for a cold origin, through the
//! same guarded upstream client as every request. What a fetch result means
//! is decided by `mannerly_policy::robots_cache`. The same cache, over
//! another [`SiteFile`], holds `/.well-known/tdmrep.json`: fetched, paced,
//! signed, retried and evicted exactly as robots.txt is.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::header::HeaderValue;
use mannerly_policy::budget::{Announced, Reaction, Refusal};
use mannerly_policy::conditional::CacheOutcome;
use mannerly_policy::robots::Robots;
use mannerly_policy::robots_cache::{
    fetch_reason_of, FetchResult, Head, Lookup, RobotsEntry, RobotsParams, Rules, SiteFile,
    Validators,
};
use mannerly_policy::AuditRecord;
use mannerly_state::robots::Fetched;
use mannerly_state::FastMap;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::answer::Stop;
use crate::clock::Clock;
use crate::hosts::budget::Budgets;
use crate::identity::Signer;
use crate::target::Target;
use crate::upstream::UpstreamClient;

mod cluster;
mod fetch;

pub(crate) use fetch::report;
use fetch::Pacing;
pub(crate) use fetch::{fetch, FetchReport};

struct Slot<F> {
    entry: std::sync::RwLock<Option<RobotsEntry<F>>>,
    /// `RobotsCache::epoch` when the slot was last used: eviction takes the
    /// least recently used first.
    used: AtomicU64,
    /// Body bytes of the entry, counted in `RobotsCache::bytes`.
    bytes: AtomicU64,
    // Held while fetching, so concurrent requests to a cold origin wait for
    // the one fetch instead of starting their own.
    fetching: Mutex<()>,
}

impl<F> Slot<F> {
    /// Marks the slot used at `epoch`, writing only when that changes it
    /// (a store on every request would bounce the line between threads).
    fn touch(&self, epoch: &AtomicU64) {
        let now = epoch.load(Ordering::Relaxed);
        if self.used.load(Ordering::Relaxed) != now {
            self.used.store(now, Ordering::Relaxed);
        }
    }
}

/// Why `rules` has no rules to give.
pub(crate) enum Unfetched {
    /// The host's budget would not hold the fetch (a policy refusal, which
    /// observe mode only records).
    Budget(Refusal),
    /// The fetch ended in the request's own answer ([`FetchReport::stop`]).
    Stopped(Stop),
}

/// robots.txt (or another [`SiteFile`]) per origin.
pub(crate) struct RobotsCache<F: SiteFile = Robots> {
    params: RobotsParams,
    clock: Clock,
    identity: Option<Arc<Signer>>,
    slots: FastMap<String, Arc<Slot<F>>>,
    /// Body bytes of every entry held (`robots.max_bytes`).
    bytes: AtomicU64,
    /// Moves on with every new slot. A slot used in the same epoch as
    /// another ties with it; a tick per request would make every request
    /// write one shared counter, where a hot origin's slot now changes only
    /// when a new origin came in since its last use.
    epoch: AtomicU64,
}

impl<F: SiteFile> RobotsCache<F> {
    pub(crate) fn new(params: RobotsParams, clock: Clock, identity: Option<Arc<Signer>>) -> Self {
        RobotsCache {
            params,
            clock,
            identity,
            slots: FastMap::default(),
            bytes: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
        }
    }

    /// The rules for `target`, fetching robots.txt first when needed.
    /// `on_fetch` is called for every fetch actually made (for its audit line).
    /// Each request of the fetch (redirects included) takes a turn of its
    /// host's budget like any request, so the page behind it waits its
    /// interval; a host that is paused longer than `deadline` allows gives
    /// the budget's refusal.
    pub(crate) async fn rules(
        &self,
        client: &UpstreamClient,
        budgets: &Arc<Budgets>,
        target: &Target,
        deadline: Instant,
        user_agent: Option<&HeaderValue>,
        on_fetch: impl FnMut(&FetchReport),
    ) -> Result<Rules<F>, Unfetched> {
        let slot = self.slot(target.root());
        if let Some(rules) = self.cached(&slot) {
            return Ok(rules);
        }
        // Boxed: the fetch's future is most of this one's size, and every
        // request's future of this step is moved whole into the next, so
        // unboxed it cost each cached answer a copy of the fetch's.
        let fetching = self.fetch_rules(
            slot, client, budgets, target, deadline, user_agent, on_fetch,
        );
        Box::pin(fetching).await
    }

    /// [`rules`](Self::rules) once the cache had no answer: one fetch per
    /// slot at a time, its result installed.
    ///
    /// A fetch the site throttled (429, or 503 with Retry-After) is made
    /// again after the pause, as a page would be (`budget.retry_attempts`,
    /// within the hold): a limiter that refused robots.txt for coming too
    /// soon says nothing of what the site allows, and read as unreachable
    /// it would refuse every page waiting on it. Only when the retries run
    /// out is the 429 installed (unreachable: complete disallow for now, as
    /// Google reads a 429 on robots.txt; a 5xx is never retried here).
    #[allow(clippy::too_many_arguments)]
    async fn fetch_rules(
        &self,
        slot: Arc<Slot<F>>,
        client: &UpstreamClient,
        budgets: &Arc<Budgets>,
        target: &Target,
        deadline: Instant,
        user_agent: Option<&HeaderValue>,
        on_fetch: impl FnMut(&FetchReport),
    ) -> Result<Rules<F>, Unfetched> {
        let key = target.root();
        let _fetching = slot.fetching.lock().await;
        // Another request may have fetched while this one waited.
        if let Some(rules) = self.cached(&slot) {
            return Ok(rules);
        }
        let url = format!("{key}{}", F::PATH);
        // robots.txt keeps the cluster key it always had, its origin.
        let shared_key = if F::PATH == Robots::PATH { key } else { &url };
        // With shared state one proxy of the cluster fetches; the others
        // take its copy.
        let now = self.clock.now_std();
        let claim = match cluster::claim(budgets, shared_key, &self.params, deadline, now).await {
            cluster::Next::Use(copy, at) => {
                return Ok(self.install_with(key, &slot, &copy.result, copy.head, at))
            }
            cluster::Next::Fetch(claim) => claim,
        };
        // The copy held, this proxy's fetch or the cluster's, is asked
        // about with its validators: a 304 keeps it.
        let asked = self.validators(&slot);
        let ask = (user_agent, asked.as_ref());
        let fetched = self.fetch_retried(client, budgets, target, deadline, &url, ask, on_fetch);
        let report = fetched.await?;
        let (rules, head) = self.install_fetched(key, &slot, &report);
        let fetched = Fetched {
            result: &report.result,
            head: &head,
            asked: asked.as_ref(),
        };
        cluster::publish(claim, shared_key, fetched, &self.params, self.clock.wall()).await;
        match report.stop {
            Some(stop) => Err(Unfetched::Stopped(stop)),
            None => Ok(rules),
        }
    }

    /// The fetch of `url`, made again after the pause each time the site
    /// throttles it, as long as `budget.retry_attempts` and the hold allow
    /// (see [`fetch_rules`](Self::fetch_rules)).
    #[allow(clippy::too_many_arguments)]
    async fn fetch_retried(
        &self,
        client: &UpstreamClient,
        budgets: &Arc<Budgets>,
        target: &Target,
        deadline: Instant,
        url: &str,
        ask: (Option<&HeaderValue>, Option<&Validators>),
        mut on_fetch: impl FnMut(&FetchReport),
    ) -> Result<FetchReport, Unfetched> {
        let mut attempts = 0;
        let mut throttled: Option<FetchReport> = None;
        loop {
            let permit = match (budgets.acquire(&target.host, deadline).await, throttled) {
                (Ok(permit), _) => permit,
                // The pause outlasted the hold after all (another 429 of
                // the host lengthened it): the 429 stands.
                (Err(_), Some(report)) => return Ok(report),
                (Err(refusal), None) => return Err(Unfetched::Budget(refusal)),
            };
            let mut pacing = Pacing {
                budgets,
                deadline,
                permit: Some(permit),
                refused: None,
            };
            let (report, pause) = self.fetch_timed(client, url, ask, &mut pacing).await;
            on_fetch(&report);
            if let Some(refusal) = pacing.refused {
                // A redirect the budget would not hold: the rules are unknown
                // for now, as when the first request is refused.
                return Err(Unfetched::Budget(refusal));
            }
            let hold_left = deadline.saturating_duration_since(self.clock.now());
            let again = pause.is_some_and(|pause| {
                report.stop.is_none()
                    && budgets.params(&target.host).may_retry(
                        &http::Method::GET,
                        attempts,
                        pause,
                        hold_left,
                    )
            });
            if !again {
                return Ok(report);
            }
            attempts += 1;
            throttled = Some(report);
        }
    }

    /// One fetch of `url` within `robots.fetch_timeout_secs`, its last
    /// turn given back with what the site answered; and the pause when
    /// the site throttled it.
    async fn fetch_timed(
        &self,
        client: &UpstreamClient,
        url: &str,
        (user_agent, validators): (Option<&HeaderValue>, Option<&Validators>),
        pacing: &mut Pacing<'_>,
    ) -> (FetchReport, Option<Duration>) {
        let timeout = Duration::from_secs_f64(self.params.fetch_timeout_secs);
        let sent = self.clock.wall();
        let fetching = fetch(
            client,
            url,
            user_agent,
            self.params.max_redirects,
            self.identity.as_deref().map(|s| (s, &self.clock)),
            Some(&mut *pacing),
            validators,
        );
        let mut report = match tokio::time::timeout(timeout, fetching).await {
            Ok(r) => r,
            Err(_) => {
                let why = format!("no complete answer within {timeout:?}");
                report(url, None, FetchResult::Failed(why))
            }
        };
        // A fetch the guard or the parent stopped never reached the site.
        if report.stop.is_none() {
            report.sent = Some(sent);
        }
        let pause = match (report.status, pacing.permit.take()) {
            (Some(status), Some(permit)) => {
                let announced = Announced::from_headers(&report.headers, self.clock.wall());
                let ra = report.retry_after.as_deref();
                match permit.respond(status, ra, announced.as_ref(), None).await {
                    Reaction::Throttled(t) => Some(t.pause),
                    _ => None,
                }
            }
            (_, permit) => {
                drop(permit);
                None
            }
        };
        (report, pause)
    }

    /// Installs this proxy's own fetch, with the head of its answer (its
    /// validators and own age) for the next one; gives the rules and the
    /// head the copy now has.
    fn install_fetched(&self, key: &str, slot: &Slot<F>, report: &FetchReport) -> (Rules<F>, Head) {
        let head = Head::read(&report.headers);
        let now = self.clock.now_std();
        let rules = self.install_with(key, slot, &report.result, head, now);
        let guard = slot.entry.read().unwrap_or_else(|p| p.into_inner());
        let head = guard.as_ref().map(|e| e.head().clone()).unwrap_or_default();
        (rules, head)
    }

    /// Puts the result of a fetch made at `fetched_at` (here, or by another
    /// proxy of the cluster) into the slot of `key`, counting its body
    /// against `robots.max_bytes`.
    fn install_with(
        &self,
        key: &str,
        slot: &Slot<F>,
        result: &FetchResult,
        head: Head,
        fetched_at: std::time::Instant,
    ) -> Rules<F> {
        let new = match result {
            FetchResult::Body(body) => body.len() as u64,
            _ => 0,
        };
        // Counted only while the slot is in the map (whose shard lock keeps
        // `evict` out meanwhile): a slot evicted while its fetch ran still
        // answers the requests that waited for it, but nothing would ever
        // subtract its bytes again.
        let over = match self.slots.get(key) {
            Some(listed) if std::ptr::eq(&**listed, slot) => {
                let old = slot.bytes.swap(new, Ordering::Relaxed);
                self.bytes.fetch_add(new, Ordering::Relaxed);
                self.bytes.fetch_sub(old, Ordering::Relaxed);
                self.bytes.load(Ordering::Relaxed) > self.params.max_bytes
            }
            _ => false,
        };
        if over {
            self.evict(Some(slot));
        }
        let now = self.clock.now_std();
        let mut guard = slot.entry.write().unwrap_or_else(|p| p.into_inner());
        let entry = RobotsEntry::after_fetch(guard.as_ref(), result, &self.params, fetched_at)
            .with_head(result, head);
        let rules = entry.rules_now(now);
        *guard = Some(entry);
        rules
    }

    /// What a fetch sends to revalidate the copy held in `slot`: a copy
    /// another proxy of the cluster fetched carries its validators too.
    fn validators(&self, slot: &Slot<F>) -> Option<Validators> {
        let guard = slot.entry.read().unwrap_or_else(|p| p.into_inner());
        guard.as_ref()?.validators().cloned()
    }

    /// Whether rules for `key` would be fetched now (nothing held, or its
    /// age or retry time reached), without making a slot.
    pub(crate) fn would_fetch(&self, key: &str) -> bool {
        match self.slots.get(key) {
            Some(slot) => self.cached(&slot).is_none(),
            None => true,
        }
    }

    /// The rules held for `key` while they need no fetch, with one lookup
    /// and one clock reading: what nearly every request finds, so it skips
    /// the fetch path's second lookup and its timing.
    pub(crate) fn fresh(&self, key: &str) -> Option<Rules<F>> {
        let slot = self.slots.get(key)?;
        let rules = self.cached(&slot)?;
        slot.touch(&self.epoch);
        Some(rules)
    }

    fn cached(&self, slot: &Slot<F>) -> Option<Rules<F>> {
        let now = self.clock.now_std();
        let guard = slot.entry.read().unwrap_or_else(|p| p.into_inner());
        match guard.as_ref()?.lookup(&self.params, now) {
            Lookup::Use(rules) => Some(rules),
            Lookup::Fetch => None,
        }
    }

    fn slot(&self, key: &str) -> Arc<Slot<F>> {
        if let Some(s) = self.slots.get(key) {
            s.touch(&self.epoch);
            return s.clone();
        }
        if self.slots.len() >= self.params.max_entries {
            self.evict(None);
        }
        self.slots
            .entry(key.to_string())
            .or_insert_with(|| {
                Arc::new(Slot {
                    entry: std::sync::RwLock::new(None),
                    used: AtomicU64::new(self.epoch.fetch_add(1, Ordering::Relaxed)),
                    bytes: AtomicU64::new(0),
                    fetching: Mutex::new(()),
                })
            })
            .clone()
    }

    // Stale entries go first; if every entry is live, the least recently
    // used go until an eighth of the cap is free (not half: a crawl of ever
    // new origins would see memory drop by half and climb back, and the
    // allocator keep the peaks). The
    // byte bound works the same way, on the bodies' sizes, and then goes on
    // (least recently used first) while the bodies left still pass it.
    // `keep` is the entry being installed: its slot holds no live entry yet,
    // and evicting it would drop the fetch just paid for and leave its
    // origin to fetch again on its next request.
    fn evict(&self, keep: Option<&Slot<F>>) {
        let now = self.clock.now_std();
        let kept = |s: &Arc<Slot<F>>| keep.is_some_and(|k| std::ptr::eq(&**s, k));
        self.slots.retain(|_, s| {
            let keep = kept(s)
                || s.entry
                    .read()
                    .map(|e| e.as_ref().is_some_and(|e| e.is_live(&self.params, now)))
                    .unwrap_or(false);
            if !keep {
                self.bytes
                    .fetch_sub(s.bytes.swap(0, Ordering::Relaxed), Ordering::Relaxed);
            }
            keep
        });
        let over_bytes = || self.bytes.load(Ordering::Relaxed) > self.params.max_bytes;
        if self.slots.len() < self.params.max_entries && !over_bytes() {
            self.slots.shrink_to_fit();
            return;
        }
        let mut by_use: Vec<(u64, String)> = self
            .slots
            .iter()
            .filter(|e| !kept(e.value()))
            .map(|e| (e.value().used.load(Ordering::Relaxed), e.key().clone()))
            .collect();
        by_use.sort_unstable();
        let max = self.params.max_entries;
        let need = self.slots.len().saturating_sub(max - max / 8).max(1);
        let mut oldest = by_use.into_iter().map(|(_, key)| key);
        for k in oldest.by_ref().take(need) {
            self.remove(&k);
        }
        // Ends under the cap: the entry kept is one body, at most
        // MAX_ROBOTS_BYTES, which `robots.max_bytes` is never below.
        for k in oldest {
            if !over_bytes() {
                break;
            }
            self.remove(&k);
        }
        // As `Bound::hold` (state): the tables would otherwise double to
        // hold the removals' tombstones.
        self.slots.shrink_to_fit();
    }

    fn remove(&self, key: &str) {
        if let Some((_, s)) = self.slots.remove(key) {
            self.bytes
                .fetch_sub(s.bytes.swap(0, Ordering::Relaxed), Ordering::Relaxed);
        }
    }
}

/// Fills the audit record of a fetch of `F` (`robots_fetched`,
/// `tdmrep_fetched`).
pub(crate) fn fetch_record<F: SiteFile>(
    mut rec: Box<AuditRecord>,
    r: &FetchReport,
) -> Box<AuditRecord> {
    rec.outcome = Some(F::FETCHED);
    rec.sent = r.sent.map(crate::clock::stamp);
    rec.status = r.status;
    rec.bytes = Some(r.bytes);
    rec.retry_after = r.retry_after.clone();
    rec.signed = r.keyid.is_some();
    rec.keyid = r.keyid.as_ref().map(|k| k.to_string());
    rec.source = r.stop.as_ref().map(|s| s.source().as_str());
    rec.reason = fetch_reason_of::<F>(&r.result);
    if r.result == FetchResult::NotModified {
        rec.cache(CacheOutcome::Revalidated);
    }
    rec
}

#[cfg(test)]
mod tests;
