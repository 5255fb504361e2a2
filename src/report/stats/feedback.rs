//! Response to feedback: what the sends to one host did around each 429,
//! on the times the requests were sent (`sent`), which is what the origin
//! counted. Lines are written when an answer is done, not when its request
//! left, so sends are put back in time order (a reorder buffer of
//! [`HORIZON_S`]) before they are read.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use serde::Serialize;

use super::line::LineRef;

/// The window before and after a 429 in which the pace is read: the
/// breaker's window, and what a site grading "did it slow down" looks at.
pub const WINDOW_S: f64 = 60.0;
/// Two 429s drawn at paces this close (ratio) are the same pattern.
const REPEAT_RATIO: f64 = 1.25;
/// How late a line may be written after its request was sent and still be
/// read in time order.
const HORIZON_S: f64 = 300.0;
/// 429s listed in detail per host (the figures count every one).
pub const EPISODES: usize = 200;
/// Lines cited per window.
const CITED: usize = 16;

/// One request the origin received.
#[derive(Clone, Debug)]
pub struct Send {
    pub t: f64,
    pub status: Option<u16>,
    /// A 429, or a 503 the budget took as a throttle (it paused the host).
    pub throttle: bool,
    /// The pause the proxy put the host under for it.
    pub pause_s: Option<f64>,
    pub line: LineRef,
}

/// Sends on one side of a 429, inside the window.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Window {
    /// Requests sent in the window (the 429's own not counted).
    pub sends: u32,
    /// Seconds from the earliest send before the 429 to it, or from the
    /// 429 to the latest send after it.
    pub span_s: f64,
    /// `sends / span_s`, requests/s; absent without sends.
    pub pace: Option<f64>,
    /// The lines of those sends (the latest before, the earliest after).
    pub lines: Vec<LineRef>,
}

impl Window {
    fn add(&mut self, span: f64, line: &LineRef, keep_latest: bool) {
        self.sends += 1;
        self.span_s = self.span_s.max(span);
        self.pace = (self.span_s > 0.0).then(|| f64::from(self.sends) / self.span_s);
        if self.lines.len() < CITED {
            self.lines.push(line.clone());
        } else if keep_latest {
            self.lines.remove(0);
            self.lines.push(line.clone());
        }
    }
}

/// What happened around one 429.
#[derive(Clone, Debug, Serialize)]
pub struct Episode {
    /// When the throttled request was sent (unix seconds).
    pub at: f64,
    pub status: u16,
    /// The throttled attempt's line.
    pub line: LineRef,
    pub pause_s: Option<f64>,
    pub before: Window,
    pub after: Window,
    /// Seconds to the next request sent, and its line.
    pub next_request_s: Option<f64>,
    pub next_request: Option<LineRef>,
    /// Seconds to the next 429, and its line.
    pub next_429_s: Option<f64>,
    pub next_429: Option<LineRef>,
    /// The pace after stayed below the pace that drew it (no send at all
    /// in a whole window after counts as below); absent when the log ends
    /// before the window does.
    pub stayed_below: Option<bool>,
    /// Drawn at about (within 25 %) the pace that drew the previous 429.
    pub repeated: bool,
}

/// The sends of one host, read in time order.
#[derive(Debug, Default)]
pub struct Feedback {
    pending: BinaryHeap<Reverse<Pending>>,
    newest: f64,
    /// Sends of the last window, oldest first.
    recent: VecDeque<Send>,
    /// 429s still gathering their after-window or their next 429.
    open: VecDeque<Episode>,
    pub episodes: Vec<Episode>,
    pub throttles: u64,
    pub stayed_below: u64,
    pub not_below: u64,
    pub repeated: u64,
    pub next_gap_sum: f64,
    pub next_gap_n: u64,
    pub next_gap_min: Option<f64>,
    /// Send times of 429s, for the chart (the first [`EPISODES`]).
    pub marks: Vec<f64>,
    previous_pace: Option<f64>,
    seq: u64,
}

#[derive(Debug)]
struct Pending(i64, u64, Send);

impl PartialEq for Pending {
    fn eq(&self, o: &Self) -> bool {
        (self.0, self.1) == (o.0, o.1)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pending {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.0, self.1).cmp(&(o.0, o.1))
    }
}

impl Feedback {
    /// Takes in one send; those older than the horizon are read.
    pub fn send(&mut self, s: Send) {
        self.newest = self.newest.max(s.t);
        self.seq += 1;
        let key = (s.t * 1e6) as i64;
        self.pending.push(Reverse(Pending(key, self.seq, s)));
        while let Some(Reverse(p)) = self.pending.peek() {
            if p.2.t > self.newest - HORIZON_S {
                break;
            }
            if let Some(Reverse(p)) = self.pending.pop() {
                self.read(p.2);
            }
        }
    }

    /// Reads what is left; `end` is the host's last line (a window that
    /// ends after it is incomplete).
    pub fn finish(&mut self, end: f64) {
        while let Some(Reverse(p)) = self.pending.pop() {
            self.read(p.2);
        }
        while let Some(e) = self.open.pop_front() {
            self.close(e, end);
        }
    }

    fn read(&mut self, s: Send) {
        for e in self.open.iter_mut() {
            let d = s.t - e.at;
            if d <= WINDOW_S {
                e.after.add(d, &s.line, false);
            }
            if e.next_request_s.is_none() {
                e.next_request_s = Some(d);
                e.next_request = Some(s.line.clone());
            }
            if s.throttle && e.next_429_s.is_none() {
                e.next_429_s = Some(d);
                e.next_429 = Some(s.line.clone());
            }
        }
        while self
            .open
            .front()
            .is_some_and(|e| e.next_429_s.is_some() && s.t > e.at + WINDOW_S)
        {
            if let Some(e) = self.open.pop_front() {
                self.close(e, s.t);
            }
        }
        while self.recent.front().is_some_and(|r| r.t < s.t - WINDOW_S) {
            self.recent.pop_front();
        }
        if s.throttle {
            self.throttle(&s);
        }
        self.recent.push_back(s);
    }

    fn throttle(&mut self, s: &Send) {
        let mut before = Window::default();
        for r in self.recent.iter().rev() {
            before.add(s.t - r.t, &r.line, true);
        }
        before.lines.reverse();
        let repeated = match (self.previous_pace, before.pace) {
            (Some(a), Some(b)) => b <= a * REPEAT_RATIO && b >= a / REPEAT_RATIO,
            _ => false,
        };
        self.previous_pace = before.pace;
        self.throttles += 1;
        self.repeated += u64::from(repeated);
        if self.marks.len() < EPISODES {
            self.marks.push(s.t);
        }
        self.open.push_back(Episode {
            at: s.t,
            status: s.status.unwrap_or(429),
            line: s.line.clone(),
            pause_s: s.pause_s,
            before,
            after: Window::default(),
            next_request_s: None,
            next_request: None,
            next_429_s: None,
            next_429: None,
            stayed_below: None,
            repeated,
        });
    }

    fn close(&mut self, mut e: Episode, seen_until: f64) {
        let window_over = seen_until >= e.at + WINDOW_S;
        e.stayed_below = match (e.after.pace, e.before.pace) {
            (Some(after), Some(before)) => Some(after < before),
            (None, _) if window_over => Some(true),
            _ => None,
        };
        match e.stayed_below {
            Some(true) => self.stayed_below += 1,
            Some(false) => self.not_below += 1,
            None => {}
        }
        if let Some(g) = e.next_429_s {
            self.next_gap_sum += g;
            self.next_gap_n += 1;
            self.next_gap_min = Some(self.next_gap_min.map_or(g, |m: f64| m.min(g)));
        }
        if self.episodes.len() < EPISODES {
            self.episodes.push(e);
        } else if let Some(last) = self.episodes.last_mut() {
            // Keep the first ones and always the latest.
            *last = e;
        }
    }

    /// Mean seconds from one 429 to the next.
    pub fn mean_next_gap(&self) -> Option<f64> {
        (self.next_gap_n > 0).then(|| self.next_gap_sum / self.next_gap_n as f64)
    }
}
