//! The last sends to a host and what became of each, for reading the
//! site's limit from them ([`crate::budget::limit`]).
//!
//! Answers are matched to sends oldest first: a limiter answers in the
//! order it was asked closely enough, and a send whose answer never came
//! (a timeout, a reset) is marked as teaching nothing.

use super::super::limit::{
    self, estimate, estimate_recent, estimate_weighed, Learned, Outcome, Sent, LOG_LEN,
};

/// Longest gap kept between two sends; a longer one reads as this (no
/// window this long matters once the next send comes).
const MAX_GAP_MS: u64 = u16::MAX as u64 - 1;
/// Bytes of the encoding: the gaps, the count, the two masks, a spare.
pub(super) const SENDS_LEN: usize = 2 * LOG_LEN + 1 + 2 + 2 + 3;

/// Up to `LOG_LEN` sends, newest first: entry `i` went `gaps[0..i]` ms
/// before the newest. An entry with neither mark bit awaits its answer;
/// with both, it never got one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(in crate::budget) struct SendLog {
    gaps: [u16; LOG_LEN],
    len: u8,
    /// Bit `i`: entry `i` was let through.
    ok: u16,
    /// Bit `i`: entry `i` was refused.
    no: u16,
}

// === impl SendLog ===

impl SendLog {
    /// A send `gap_ms` after the one before (ignored for the first).
    pub(super) fn push(&mut self, gap_ms: Option<u64>) {
        self.gaps.copy_within(0..LOG_LEN - 1, 1);
        self.gaps[0] = 0;
        if let Some(gap) = gap_ms.filter(|_| self.len > 0) {
            self.gaps[1] = gap.min(MAX_GAP_MS) as u16;
        }
        self.ok <<= 1;
        self.no <<= 1;
        self.len = (self.len + 1).min(LOG_LEN as u8);
    }

    /// The oldest send awaiting an answer got `outcome` (`Pending`: none
    /// will come).
    pub(super) fn answer(&mut self, outcome: Outcome) {
        let Some(i) = (0..usize::from(self.len))
            .rev()
            .find(|&i| (self.ok | self.no) & (1 << i) == 0)
        else {
            return;
        };
        match outcome {
            Outcome::Accepted => self.ok |= 1 << i,
            Outcome::Refused => self.no |= 1 << i,
            Outcome::Pending => {
                self.ok |= 1 << i;
                self.no |= 1 << i;
            }
        }
    }

    /// Whether the two sends answered last were both refused, nothing let
    /// through between them.
    pub(super) fn refused_twice(&self) -> bool {
        let mut answered =
            (0..usize::from(self.len)).filter(|&i| (self.ok ^ self.no) & (1 << i) != 0);
        let (Some(last), Some(before)) = (answered.next(), answered.next()) else {
            return false;
        };
        self.no & (1 << last) != 0 && self.no & (1 << before) != 0
    }

    /// The limit the answered sends show, the newest sent at `newest_ms`;
    /// weighed by the clock's phases when `weighed` (`limit.rs`).
    pub(super) fn learned(&self, newest_ms: u64, weighed: bool) -> Option<Learned> {
        let (sends, recent) = self.answered(newest_ms);
        match (weighed, recent) {
            (true, _) => estimate_weighed(&sends, recent),
            (false, false) => estimate(&sends),
            (false, true) => estimate_recent(&sends),
        }
    }

    /// The slowest limit the answered sends fit faster than `rate_u`.
    pub(super) fn slowest_above(&self, newest_ms: u64, rate_u: u32) -> Option<Learned> {
        let (sends, recent) = self.answered(newest_ms);
        limit::slowest_above(&sends, recent, rate_u)
    }

    /// The answered sends, oldest first, and whether the log is full (it
    /// may have dropped the host's older sends).
    fn answered(&self, newest_ms: u64) -> (Vec<Sent>, bool) {
        let mut at = newest_ms;
        let mut sends = Vec::with_capacity(usize::from(self.len));
        for i in 0..usize::from(self.len) {
            at = at.saturating_sub(u64::from(self.gaps[i]));
            let outcome = match (self.ok >> i & 1, self.no >> i & 1) {
                (1, 0) => Outcome::Accepted,
                (0, 1) => Outcome::Refused,
                _ => continue,
            };
            sends.push(Sent { at_ms: at, outcome });
        }
        sends.reverse();
        (sends, usize::from(self.len) == LOG_LEN)
    }

    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        for g in self.gaps {
            out.extend_from_slice(&g.to_le_bytes());
        }
        out.push(self.len);
        out.extend_from_slice(&self.ok.to_le_bytes());
        out.extend_from_slice(&self.no.to_le_bytes());
        out.extend_from_slice(&[0; 3]);
    }

    /// From [`SendLog::encode`]'s bytes; an empty log from anything else.
    pub(super) fn decode(bytes: &[u8]) -> SendLog {
        if bytes.len() != SENDS_LEN {
            return SendLog::default();
        }
        let u16_at = |i: usize| u16::from_le_bytes([bytes[i], bytes[i + 1]]);
        let mut log = SendLog {
            len: bytes[2 * LOG_LEN].min(LOG_LEN as u8),
            ok: u16_at(2 * LOG_LEN + 1),
            no: u16_at(2 * LOG_LEN + 3),
            ..SendLog::default()
        };
        for (i, g) in log.gaps.iter_mut().enumerate() {
            *g = u16_at(2 * i);
        }
        log
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_go_to_the_oldest_send_awaiting_one_and_survive_encoding() {
        let mut log = SendLog::default();
        for (gap, answer) in [
            (None, Some(Outcome::Accepted)),
            (Some(1_000), Some(Outcome::Accepted)),
            (Some(833), Some(Outcome::Accepted)),
            (Some(694), Some(Outcome::Accepted)),
            (Some(579), None),
            (Some(482), None),
        ] {
            log.push(gap);
            if let Some(a) = answer {
                log.answer(a);
            }
        }
        // The two last sends answered late, in order: the 579 ms one let
        // through, the 482 ms one refused (nginx limit_req 2r/s).
        log.answer(Outcome::Accepted);
        log.answer(Outcome::Refused);
        let learned = log.learned(3_588, false).unwrap();
        assert_eq!((learned.allowance, learned.window_ms), (1, 500));
        let mut bytes = Vec::new();
        log.encode(&mut bytes);
        assert_eq!(bytes.len(), SENDS_LEN);
        assert_eq!(SendLog::decode(&bytes), log);
        assert_eq!(SendLog::decode(&bytes[1..]), SendLog::default());
    }

    #[test]
    fn two_refusals_in_a_row_are_told_apart_from_one_after_a_success() {
        let mut log = SendLog::default();
        log.push(None);
        log.answer(Outcome::Refused);
        assert!(!log.refused_twice(), "one refusal");
        log.push(Some(1_000));
        log.answer(Outcome::Accepted);
        log.push(Some(300));
        log.answer(Outcome::Refused);
        assert!(!log.refused_twice(), "a success between");
        // The first send after the pause, refused too; one still in flight
        // behind it is not an answer.
        log.push(Some(1_000));
        log.push(Some(250));
        log.answer(Outcome::Refused);
        assert!(log.refused_twice());
        log.answer(Outcome::Pending);
        log.push(Some(2_000));
        log.answer(Outcome::Refused);
        assert!(log.refused_twice(), "a send never answered is skipped");
    }
}
