//! A host's budget as bytes for a store shared by several processes, and
//! the local stand-in a process uses while that store is out of reach.
//!
//! `HostBudget` counts milliseconds from a monotonic `base` that means
//! nothing to another process, so the encoding carries `base` as unix
//! microseconds and every decode re-anchors it on the reader's clocks. The
//! in-flight count is left out: a shared store keeps it as expiring leases,
//! so that a process that dies holding slots does not hold them forever.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::super::params::HostParams;
use super::sends::{SendLog, SENDS_LEN};
use super::{
    get, HostBudget, AT_ONCE, BREAKER, DISTRESS, GAP_NONE, GUESSED, LEARNED, LENT, LOAN_SENT,
    MAX_SEND_GAP_MS, NONE, ON_LOAN, RING,
};

/// First byte of an encoded budget; a layout change gets a new one.
const LAYOUT: u8 = 8;
/// Encoded length: layout, base, 3 + RING + 5 `u32`s, 2 `u16`s, 2 bytes,
/// then (layout 2) the announced cap, then (layout 4) the latest slot given,
/// then (layout 5) the long pace window: its start, sends and accepted pace.
/// Layout 6 has layout 5's length: its flags byte holds the open breaker
/// (bit 0), the first slot's loan (bit 1), a reservation on it (bit 2)
/// and a send on it (bit 3) where layout 5 held the breaker alone.
/// Layout 3 has layout 2's length: its fifth `u32` holds the last two gaps
/// between sends (two `u16`s, newest first) where layout 2 held one
/// smoothed gap.
/// Layout 7 adds what the site showed, so that a fleet sees one host's
/// distress together: the latest distress event, the latency cap and the
/// last cut for slowness (`u32`s), baseline and fast time to first byte
/// (`u16`s), events in the window, 500s in a row, the latest event's code
/// and a spare byte; its flags byte adds the distress pause (bit 4).
/// Layout 8 adds the last sends and what became of each (`sends.rs`), so
/// that the limit a fleet's sends showed is read from all of them; its
/// flags byte holds the limit climbed back to (bit 5) and, since issue
/// 51's fourth round, the limit gone to at once (bit 6) and whether it was
/// a guess (bit 7): a proxy before it drops those bits, and reads the next
/// 429 as it read the last.
pub const ENCODED_LEN: usize = LAYOUT_7_LEN + SENDS_LEN;
/// The flags layout 8 holds.
const LAYOUT_FLAGS: u8 =
    BREAKER | LENT | ON_LOAN | LOAN_SENT | DISTRESS | LEARNED | AT_ONCE | GUESSED;
/// Layouts 1 to 6 are still read, so that a cluster can be upgraded one
/// proxy at a time. Layout 1 had no announced cap.
const LAYOUT_1_LEN: usize = 1 + 8 + 4 * (3 + RING + 5) + 2 * 2 + 2;
const LAYOUT_2_LEN: usize = LAYOUT_1_LEN + 4;
const LAYOUT_4_LEN: usize = LAYOUT_2_LEN + 4;
const LAYOUT_6_LEN: usize = LAYOUT_4_LEN + 8;
const LAYOUT_7_LEN: usize = LAYOUT_6_LEN + 20;

/// Why stored bytes are not a budget.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Wrong length or an unknown layout byte: written by another version.
    #[error("not an encoded host budget (layout {layout}, {len} bytes)")]
    Layout {
        /// The first byte found.
        layout: u8,
        /// The length found.
        len: usize,
    },
}

// === impl HostBudget (shared) ===

impl HostBudget {
    /// The budget as bytes any process can [`HostBudget::decode`], without
    /// the in-flight count. `now` and `wall` are read together by the caller.
    pub fn encode(&self, now: Instant, wall: SystemTime) -> Vec<u8> {
        let mut out = Vec::with_capacity(ENCODED_LEN);
        out.push(LAYOUT);
        out.extend_from_slice(&base_unix_us(self.base, now, wall).to_le_bytes());
        let words = [self.tat, self.pause, self.throttled]
            .into_iter()
            .chain(self.history)
            .chain([
                self.rate,
                self.ceiling,
                self.crawl_delay_ms,
                self.sent,
                u32::from(self.gaps[0]) | u32::from(self.gaps[1]) << 16,
            ]);
        for w in words {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&self.concurrency.to_le_bytes());
        out.extend_from_slice(&self.streak.to_le_bytes());
        out.push(self.strikes);
        out.push(self.flags);
        out.extend_from_slice(&self.announced.to_le_bytes());
        out.extend_from_slice(&self.slot.to_le_bytes());
        out.extend_from_slice(&self.since.to_le_bytes());
        out.extend_from_slice(&self.sends.to_le_bytes());
        out.extend_from_slice(&self.accepted.to_le_bytes());
        out.extend_from_slice(&self.distressed.to_le_bytes());
        out.extend_from_slice(&self.latency_cap.to_le_bytes());
        out.extend_from_slice(&self.slowed.to_le_bytes());
        out.extend_from_slice(&self.latency_base.to_le_bytes());
        out.extend_from_slice(&self.latency_fast.to_le_bytes());
        out.extend_from_slice(&[self.events, self.errors, self.event, 0]);
        self.log.encode(&mut out);
        out
    }

    /// Rebuilds a budget from [`HostBudget::encode`] output on this
    /// process's clocks, with `in_flight` requests in flight (the live
    /// leases). Values are clamped to `p`: another process may run with
    /// other parameters.
    pub fn decode(
        p: &HostParams,
        bytes: &[u8],
        in_flight: u32,
        now: Instant,
        wall: SystemTime,
    ) -> Result<HostBudget, DecodeError> {
        known_layout(bytes)?;
        let mut at = 1;
        let mut take = |n: usize| {
            let s = &bytes[at..at + n];
            at += n;
            s
        };
        let base_us = i64::from_le_bytes(take(8).try_into().unwrap_or([0; 8]));
        let mut word = || u32::from_le_bytes(take(4).try_into().unwrap_or([0; 4]));
        let (tat, pause, throttled) = (word(), word(), word());
        let mut history = [NONE; RING];
        for h in &mut history {
            *h = word();
        }
        let (rate, ceiling, crawl_delay_ms, sent, gap) = (word(), word(), word(), word(), word());
        let concurrency = u16::from_le_bytes(take(2).try_into().unwrap_or([0; 2]));
        let streak = u16::from_le_bytes(take(2).try_into().unwrap_or([0; 2]));
        let strikes = take(1)[0];
        let flags = match (bytes[0], take(1)[0]) {
            (LAYOUT, flags) => flags & LAYOUT_FLAGS,
            (7, flags) => flags & (BREAKER | LENT | ON_LOAN | LOAN_SENT | DISTRESS),
            (6, flags) => flags & (BREAKER | LENT | ON_LOAN | LOAN_SENT),
            (_, breaker) => u8::from(breaker != 0) * BREAKER,
        };
        let mut optional = |from_len: usize, absent: u32| match bytes.len() >= from_len {
            true => u32::from_le_bytes(take(4).try_into().unwrap_or([0; 4])),
            false => absent,
        };
        let announced = optional(LAYOUT_2_LEN, 0);
        let slot = optional(LAYOUT_4_LEN, NONE);
        // Layout 5's window; an older proxy's budget starts one afresh.
        let since = optional(LAYOUT_6_LEN, NONE);
        let counts = optional(LAYOUT_6_LEN, 0);
        let (sends, accepted) = (counts as u16, (counts >> 16) as u16);
        // Layout 7's distress; an older proxy's budget has heard none.
        let distress = [NONE, 0, NONE, 0, 0].map(|absent| optional(LAYOUT_7_LEN, absent));
        // Layout 8's sends; an older proxy's budget remembers none.
        let log = SendLog::decode(bytes.get(LAYOUT_7_LEN..).unwrap_or_default());

        let mut b = HostBudget::new(p, now);
        b.tat = tat;
        b.slot = slot;
        b.pause = pause;
        b.throttled = throttled;
        b.history = history;
        b.rate = rate.clamp(1, p.max_u());
        b.ceiling = ceiling.clamp(p.floor_u(), p.max_u());
        b.crawl_delay_ms = crawl_delay_ms.min(super::MAX_INTERVAL_MS as u32);
        b.sent = sent;
        b.gaps = if bytes[0] >= 3 {
            [gap as u16, (gap >> 16) as u16]
        } else {
            // Layouts 1 and 2 kept one smoothed gap: the best guess at both.
            let g = get(gap).map_or(GAP_NONE, |g| g.min(MAX_SEND_GAP_MS) as u16);
            [g, g]
        };
        b.concurrency = concurrency.clamp(1, p.concurrency_u());
        b.in_flight = u16::try_from(in_flight).unwrap_or(u16::MAX);
        b.streak = streak;
        b.strikes = strikes;
        b.flags = flags;
        b.announced = announced;
        b.since = since;
        b.sends = sends;
        b.accepted = accepted;
        b.read_distress(p, distress);
        b.log = log;
        b.rebase_to(base_us, now, wall);
        Ok(b)
    }

    /// Layout 7's five words: the latest distress event, the latency cap,
    /// the last cut for slowness, the two latencies, the three counts.
    fn read_distress(&mut self, p: &HostParams, [at, cap, slowed, latency, counts]: [u32; 5]) {
        self.distressed = at;
        self.latency_cap = cap.min(p.max_u());
        self.slowed = slowed;
        (self.latency_base, self.latency_fast) = (latency as u16, (latency >> 16) as u16);
        let [events, errors, event, _] = counts.to_le_bytes();
        (self.events, self.errors, self.event) = (events, errors, event);
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> u32 {
        u32::from(self.in_flight)
    }

    /// Sets the requests in flight (the live leases of a shared store).
    pub fn set_in_flight(&mut self, n: u32) {
        self.in_flight = u16::try_from(n).unwrap_or(u16::MAX);
    }

    /// What one of `instances` processes may do alone while the state they
    /// share is out of reach: this budget with its rate divided by
    /// `instances` (never above it) and its concurrency likewise (at least
    /// one). The cap is a minimum spacing, returned in milliseconds, that
    /// the caller keeps in force over any Crawl-delay it applies later
    /// (see [`HostBudget::set_crawl_delay`]).
    pub fn degraded(&self, p: &HostParams, now: Instant, instances: u32) -> (HostBudget, u64) {
        let mut b = self.clone();
        let n = b.tick(now);
        let instances = instances.max(1);
        let rate = (b.rate_u(p, n) / instances).max(1);
        let spacing = 1_000_000_000u64
            .div_ceil(u64::from(rate))
            .min(super::MAX_INTERVAL_MS);
        let tau = b.tau_ms(p, n);
        b.crawl_delay_ms = b.crawl_delay_ms.max(spacing as u32);
        b.keep_next_slot(p, n, tau);
        let limit = b.concurrency_limit(p);
        b.concurrency = (limit / u16::try_from(instances).unwrap_or(u16::MAX)).max(1);
        b.in_flight = 0;
        (b, spacing)
    }

    /// Moves `base` to where `base_us` (unix µs) falls on this process's
    /// monotonic clock, given `now` and `wall` read together.
    fn rebase_to(&mut self, base_us: i64, now: Instant, wall: SystemTime) {
        let wall_us = unix_us(wall);
        let ago = i128::from(wall_us) - i128::from(base_us);
        let mag = Duration::from_micros(u64::try_from(ago.unsigned_abs()).unwrap_or(u64::MAX));
        let base = if ago >= 0 {
            now.checked_sub(mag)
        } else {
            now.checked_add(mag)
        };
        match base {
            Some(base) => self.base = base,
            None => {
                // This clock cannot reach that far: count from `now`, and
                // drop the times that lie before it (all long past).
                self.base = now;
                let shift = u64::try_from(ago.max(0) / 1000).unwrap_or(u64::MAX);
                self.shift_times(shift);
            }
        }
    }
}

/// Where `base` lies in unix µs, given `now` and `wall` read together.
fn base_unix_us(base: Instant, now: Instant, wall: SystemTime) -> i64 {
    let wall_us = i128::from(unix_us(wall));
    let at = if base <= now {
        wall_us - i128::try_from(now.duration_since(base).as_micros()).unwrap_or(0)
    } else {
        wall_us + i128::try_from(base.duration_since(now).as_micros()).unwrap_or(0)
    };
    i64::try_from(at).unwrap_or(0)
}

fn unix_us(wall: SystemTime) -> i64 {
    match wall.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_micros()).unwrap_or(i64::MAX),
    }
}

/// A layout this process reads, at its length: the bytes `decode` takes
/// are all there.
fn known_layout(bytes: &[u8]) -> Result<(), DecodeError> {
    let known = matches!(
        (bytes.first(), bytes.len()),
        (Some(8), ENCODED_LEN)
            | (Some(7), LAYOUT_7_LEN)
            | (Some(5 | 6), LAYOUT_6_LEN)
            | (Some(4), LAYOUT_4_LEN)
            | (Some(2 | 3), LAYOUT_2_LEN)
            | (Some(1), LAYOUT_1_LEN)
    );
    if known {
        return Ok(());
    }
    Err(DecodeError::Layout {
        layout: bytes.first().copied().unwrap_or(0),
        len: bytes.len(),
    })
}

#[cfg(test)]
// Tests need some instant to start from; all later ones are derived by hand.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use crate::budget::{BudgetParams, Reaction, Reservation, Start};

    fn params() -> HostParams {
        BudgetParams::default().for_host("example.com")
    }

    #[test]
    fn encoded_length_is_fixed() {
        let p = params();
        let now = Instant::now();
        let b = HostBudget::new(&p, now);
        assert_eq!(b.encode(now, SystemTime::UNIX_EPOCH).len(), ENCODED_LEN);
    }

    /// Two processes with unrelated monotonic clocks see one budget: a
    /// pause set in one is the same wall-clock pause in the other.
    #[test]
    fn a_pause_survives_the_trip_between_processes() {
        let p = params();
        let t0 = Instant::now();
        let wall0 = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut a = HostBudget::new(&p, t0);
        assert_eq!(a.admit(&p, t0), Reservation::Go);
        assert_eq!(a.try_start(&p, t0, p.max_hold()), Start::Go);
        let r = a.on_response(&p, t0, wall0, 429, Some("7"), 0.0);
        assert!(matches!(r, Reaction::Throttled(_)));
        let bytes = a.encode(t0, wall0);

        // The other process's monotonic clock reads 1000 s more at the
        // same wall time, one second later.
        let t1 = t0 + Duration::from_secs(1001);
        let wall1 = wall0 + Duration::from_secs(1);
        let b = HostBudget::decode(&p, &bytes, 0, t1, wall1).expect("decodes");
        let va = a.view(&p, t0 + Duration::from_secs(1));
        let vb = b.view(&p, t1);
        assert_eq!(va.paused_for, vb.paused_for);
        assert_eq!(vb.paused_for, Some(Duration::from_secs(6)));
        assert_eq!(va.rate, vb.rate);
        assert_eq!(va.ceiling, vb.ceiling);
        assert_eq!(vb.recent_throttles, 1);
        assert_eq!(vb.in_flight, 0);
    }

    /// A budget whose nominal rate (4/s) ran ahead of its sends: 600 ms
    /// then 300 ms apart.
    fn ahead_of_its_sends(t0: Instant) -> (HostParams, HostBudget) {
        let p = BudgetParams {
            start_rate: 4.0,
            ..Default::default()
        }
        .for_host("example.com");
        let mut b = HostBudget::new(&p, t0);
        for at in [0, 600, 900] {
            let t = t0 + Duration::from_millis(at);
            assert_eq!(b.try_start(&p, t, p.max_hold()), Start::Go);
            b.finish(&p, t);
        }
        (p, b)
    }

    fn drawn(p: &HostParams, b: &mut HostBudget, now: Instant) -> f64 {
        match b.on_response(p, now, UNIX_EPOCH, 429, Some("2"), 0.0) {
            Reaction::Throttled(t) => t.rate_before,
            other => panic!("expected a throttle, got {other:?}"),
        }
    }

    #[test]
    fn the_pace_of_the_last_two_gaps_survives_the_trip() {
        let t0 = Instant::now();
        let (p, a) = ahead_of_its_sends(t0);
        let now = t0 + Duration::from_millis(900);
        let bytes = a.encode(now, UNIX_EPOCH);
        assert_eq!(bytes[0], LAYOUT);
        let mut b = HostBudget::decode(&p, &bytes, 1, now, UNIX_EPOCH).expect("decodes");
        assert_eq!(drawn(&p, &mut b, now), 2.222222);
    }

    /// Layout 4 carries the latest slot given; layout 3 did not, and reads
    /// as a budget that does not know it.
    #[test]
    fn the_latest_slot_survives_the_trip_and_layout_3_reads_without_it() {
        let t0 = Instant::now();
        let (p, mut a) = ahead_of_its_sends(t0);
        // The next slot is one interval (250 ms) after the last send.
        let now = t0 + Duration::from_millis(1150);
        assert_eq!(a.admit(&p, now), Reservation::Go);
        assert!(get(a.slot).is_some());
        let mut bytes = a.encode(now, UNIX_EPOCH);
        let b = HostBudget::decode(&p, &bytes, 1, now, UNIX_EPOCH).expect("decodes");
        assert_eq!((b.slot, b.tat), (a.slot, a.tat));
        bytes[0] = 3;
        bytes.truncate(LAYOUT_2_LEN);
        let b = HostBudget::decode(&p, &bytes, 1, now, UNIX_EPOCH).expect("decodes");
        assert_eq!((b.slot, b.tat, b.announced), (NONE, a.tat, a.announced));
        assert_eq!(b.gaps, a.gaps);
    }

    /// Layout 5 carries the long pace window; layout 4 did not, and reads
    /// as a budget whose window starts at its next send.
    #[test]
    fn the_pace_window_survives_the_trip_and_layout_4_reads_without_it() {
        let t0 = Instant::now();
        let (p, a) = ahead_of_its_sends(t0);
        let now = t0 + Duration::from_millis(900);
        let mut bytes = a.encode(now, UNIX_EPOCH);
        let b = HostBudget::decode(&p, &bytes, 1, now, UNIX_EPOCH).expect("decodes");
        assert_eq!((b.since, b.sends, b.accepted), (a.since, 3, a.accepted));
        bytes[0] = 4;
        bytes.truncate(LAYOUT_4_LEN);
        let b = HostBudget::decode(&p, &bytes, 1, now, UNIX_EPOCH).expect("decodes");
        assert_eq!((b.since, b.sends, b.accepted), (NONE, 0, 0));
        assert_eq!((b.slot, b.gaps), (a.slot, a.gaps));
    }

    /// Layout 2 kept one smoothed gap where layout 3 keeps the last two: a
    /// proxy of the new version reads it as both.
    #[test]
    fn a_layout_2_smoothed_gap_reads_as_both_gaps() {
        let t0 = Instant::now();
        let (p, a) = ahead_of_its_sends(t0);
        let now = t0 + Duration::from_millis(900);
        let mut bytes = a.encode(now, UNIX_EPOCH);
        bytes[0] = 2;
        bytes.truncate(LAYOUT_2_LEN);
        let gap_at = 1 + 8 + 4 * (3 + RING + 4);
        bytes[gap_at..gap_at + 4].copy_from_slice(&400u32.to_le_bytes());
        let mut b = HostBudget::decode(&p, &bytes, 1, now, UNIX_EPOCH).expect("decodes");
        assert_eq!(drawn(&p, &mut b, now), 2.5);
        // Unknown stays unknown: the nominal rate is all there is.
        bytes[gap_at..gap_at + 4].copy_from_slice(&NONE.to_le_bytes());
        let mut b = HostBudget::decode(&p, &bytes, 1, now, UNIX_EPOCH).expect("decodes");
        assert_eq!(drawn(&p, &mut b, now), 4.0);
    }

    #[test]
    fn in_flight_comes_from_the_caller() {
        let p = params();
        let now = Instant::now();
        let bytes = HostBudget::new(&p, now).encode(now, SystemTime::UNIX_EPOCH);
        let b = HostBudget::decode(&p, &bytes, 3, now, SystemTime::UNIX_EPOCH).expect("decodes");
        assert_eq!(b.in_flight(), 3);
    }

    #[test]
    fn foreign_bytes_are_refused() {
        let p = params();
        let now = Instant::now();
        let e = HostBudget::decode(&p, b"hello", 0, now, SystemTime::UNIX_EPOCH);
        assert!(matches!(e, Err(DecodeError::Layout { len: 5, .. })));
    }

    #[test]
    fn degraded_divides_rate_and_concurrency() {
        let p = params();
        let now = Instant::now();
        let b = HostBudget::new(&p, now);
        let shared = b.view(&p, now);
        let (d, spacing) = b.degraded(&p, now, 4);
        let v = d.view(&p, now);
        assert!(
            v.rate <= shared.rate / 4.0 + 1e-9,
            "{} vs {}",
            v.rate,
            shared.rate
        );
        assert_eq!(spacing, (4000.0 / shared.rate).ceil() as u64);
        assert_eq!(v.concurrency, (shared.concurrency / 4).max(1));
    }
}
