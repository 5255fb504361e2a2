//! What the store answers: a decision with what it was decided on, and the
//! in-flight slot a start takes.

/// An answer of the store and what it was decided on.
#[derive(Clone, Debug, PartialEq)]
pub struct Decided<T> {
    /// The decision.
    pub value: T,
    /// The cluster's copy, or this proxy's stand-in and why.
    pub basis: Basis,
}

/// What a decision of the store was made on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basis {
    /// The cluster's copy in Redis.
    Shared,
    /// This proxy's stand-in at the degraded rate: Redis is out of reach.
    Degraded,
    /// This proxy's stand-in at the degraded rate, for this one operation:
    /// other proxies changed the host's copy under it on every one of its
    /// compare-and-set rounds (8). Redis answers, and the store stays shared.
    Contended,
}

/// An in-flight slot taken by [`RedisHosts::try_start_since`]; give it back
/// with [`RedisHosts::on_response`] or [`RedisHosts::finish`].
///
/// [`RedisHosts::try_start_since`]: super::RedisHosts::try_start_since
/// [`RedisHosts::on_response`]: super::RedisHosts::on_response
/// [`RedisHosts::finish`]: super::RedisHosts::finish
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lease {
    /// A lease in Redis, expiring after `lease_ttl` if never released.
    Shared(String),
    /// A slot of the local stand-in (taken while degraded).
    Local,
}

impl<T> Decided<T> {
    pub(super) fn map<U>(self, f: impl FnOnce(T) -> U) -> Decided<U> {
        Decided {
            value: f(self.value),
            basis: self.basis,
        }
    }
}

// === impl Basis ===

impl Basis {
    /// The audit line's `state`: `shared`, `degraded` or `contended`.
    pub fn as_str(self) -> &'static str {
        match self {
            Basis::Shared => "shared",
            Basis::Degraded => "degraded",
            Basis::Contended => "contended",
        }
    }

    /// Decided on this proxy's stand-in rather than the cluster's copy.
    pub fn is_local(self) -> bool {
        self != Basis::Shared
    }

    /// What a request let go was decided on, from its slot's reservation
    /// and its start: local if either was (a slot reserved on the stand-in
    /// makes the request a local decision even when its start was shared),
    /// the start's otherwise.
    pub fn of_request(reserved: Option<Basis>, started: Option<Basis>) -> Option<Basis> {
        match started {
            Some(b) if b.is_local() => Some(b),
            _ => reserved.filter(|b| b.is_local()).or(started),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Basis::{self, Contended, Degraded, Shared};

    #[test]
    fn a_request_is_local_if_its_slot_or_its_start_was() {
        let of = Basis::of_request;
        assert_eq!(of(Some(Shared), Some(Shared)), Some(Shared));
        assert_eq!(of(Some(Contended), Some(Shared)), Some(Contended));
        assert_eq!(of(Some(Shared), Some(Degraded)), Some(Degraded));
        assert_eq!(of(Some(Degraded), Some(Contended)), Some(Contended));
        assert_eq!(of(None, Some(Shared)), Some(Shared));
        assert_eq!(of(Some(Degraded), None), Some(Degraded));
        assert_eq!(of(None, None), None);
    }
}
