//! The ring of earlier throttles: distances in ms before the last one,
//! each with a mark once it has been counted in a breaker opening. A
//! counted throttle no longer counts towards the breaker (the same 429s
//! must not open it again when it closes) but is still on the record, so
//! what opened a breaker survives a restart with it.

use super::super::params::HostParams;
use super::{get, HostBudget, NONE};

/// Set on an entry counted in a breaker opening.
const COUNTED: u32 = 1 << 31;

/// An entry `d` ms further back, its mark kept.
pub(super) fn older(h: u32, d: u32) -> u32 {
    if h == NONE {
        return NONE;
    }
    let ms = (h & !COUNTED).saturating_add(d).min(COUNTED - 1);
    ms | (h & COUNTED)
}

/// The distance of an entry, if set and not counted in an opening.
pub(super) fn uncounted(h: u32) -> Option<u64> {
    (h != NONE && h & COUNTED == 0).then_some(u64::from(h))
}

/// The distance of an entry and whether it was counted in an opening.
pub(in crate::budget) fn entry(h: u32) -> Option<(u64, bool)> {
    (h != NONE).then_some((u64::from(h & !COUNTED), h & COUNTED != 0))
}

/// An entry `ms` back, marked when `counted`.
pub(in crate::budget) fn make(ms: u64, counted: bool) -> u32 {
    let ms = u32::try_from(ms).unwrap_or(COUNTED - 1).min(COUNTED - 1);
    ms | if counted { COUNTED } else { 0 }
}

impl HostBudget {
    /// The breaker opened: the throttles before the last one are counted.
    pub(super) fn mark_counted(&mut self) {
        for h in &mut self.history {
            if *h != NONE {
                *h |= COUNTED;
            }
        }
    }

    /// Throttles known in the `span_ms` before `n`, counted or not.
    pub(super) fn throttles_within(&self, n: u64, span_ms: u64) -> u32 {
        let Some(last) = get(self.throttled) else {
            return 0;
        };
        let age = n.saturating_sub(last);
        if age >= span_ms {
            return 0;
        }
        let earlier = self
            .history
            .iter()
            .filter_map(|&h| entry(h))
            .filter(|&(d, _)| age + d < span_ms)
            .count();
        1 + earlier as u32
    }

    /// Throttles inside the breaker window before `n` that still count
    /// towards opening it (the last one, and the earlier ones not yet
    /// counted in an opening).
    pub(super) fn recent_throttles(&self, p: &HostParams, n: u64) -> u32 {
        let Some(last) = get(self.throttled) else {
            return 0;
        };
        let window = p.window_ms();
        let age = n.saturating_sub(last);
        if age >= window {
            return 0;
        }
        let earlier = self
            .history
            .iter()
            .filter_map(|&h| uncounted(h))
            .filter(|&h| age + h < window)
            .count();
        1 + earlier as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_survives_moving_back_and_is_not_counted() {
        let h = make(1_000, true);
        assert_eq!(entry(older(h, 500)), Some((1_500, true)));
        assert_eq!(uncounted(older(h, 500)), None);
        assert_eq!(uncounted(older(make(1_000, false), 5)), Some(1_005));
        assert_eq!(older(NONE, 5), NONE);
        assert_eq!(
            entry(older(make(u64::MAX, false), 5)),
            Some((u64::from(COUNTED - 1), false))
        );
    }
}
