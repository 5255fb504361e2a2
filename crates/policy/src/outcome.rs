use serde::Serialize;

/// What the proxy decided for one request: the `outcome` of an audit line and
/// the value of the `Mannerly-Decision` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Forwarded and answered by the origin.
    Fetched,
    /// Our validators were sent and the origin said 304: the stored page was served.
    Revalidated,
    /// The client's own validators were sent and the origin said 304.
    Unchanged,
    /// robots.txt disallows the URL for this crawler.
    Disallowed,
    /// robots.txt could not be fetched (5xx, 429, network): everything is refused for now.
    RobotsUnavailable,
    /// The site's Content-Signal refuses the crawl's declared purpose.
    SignalRefused,
    /// The origin answered 429 (or 503 with Retry-After).
    Throttled,
    /// The host is paused longer than a request may be held.
    Paused,
    /// Too many 429s in a short time: the host is left alone.
    BreakerOpen,
    /// The host is paused after repeated distress (timeouts, resets,
    /// 502/503/504 without Retry-After, runs of 500s): answered at once.
    Distressed,
    /// An identical request was already at the origin: this one got its
    /// answer, and the origin was asked once.
    Collapsed,
    /// The host's wait queue is full.
    QueueFull,
    /// Nothing is waiting, but the host's pace (Crawl-delay, a learned
    /// rate) puts its next turn beyond the hold.
    Paced,
    /// The target is not allowed (private address, port not allowed, bad request).
    Blocked,
    /// Something failed: upstream unreachable, timed out, or invalid input.
    Error,
    /// A robots.txt fetch made by the proxy itself.
    RobotsFetched,
    /// A `/.well-known/tdmrep.json` fetch made by the proxy itself (only
    /// for a crawl that declares a text-and-data-mining purpose).
    TdmrepFetched,
    /// A CONNECT tunnel passed through without interception.
    Tunneled,
    /// The client is not allowed to use the proxy (proxy authentication or
    /// the client address allow-list).
    Denied,
    /// An operator cleared a host's learned pause, ceiling and breaker
    /// (admin `POST /hosts/{host}/reset`).
    OperatorReset,
    /// The origin asked to be paid (402): passed on with its price,
    /// unpaid, never retried.
    PaymentRequired,
    /// A price the operator's limits do not cover (or a host not allowed
    /// to be paid): answered 402 by the proxy, not sent.
    PaymentRefused,
    /// The site refused a priced request (`crawler-error`) or the payment
    /// could not be made: answered without sending it again.
    PaymentFailed,
}

impl Outcome {
    /// The snake_case name used in audit lines and the `Mannerly-Decision` header.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Fetched => "fetched",
            Outcome::Revalidated => "revalidated",
            Outcome::Unchanged => "unchanged",
            Outcome::Disallowed => "disallowed",
            Outcome::RobotsUnavailable => "robots_unavailable",
            Outcome::SignalRefused => "signal_refused",
            Outcome::Throttled => "throttled",
            Outcome::Paused => "paused",
            Outcome::BreakerOpen => "breaker_open",
            Outcome::Distressed => "distressed",
            Outcome::Collapsed => "collapsed",
            Outcome::QueueFull => "queue_full",
            Outcome::Paced => "paced",
            Outcome::Blocked => "blocked",
            Outcome::Error => "error",
            Outcome::RobotsFetched => "robots_fetched",
            Outcome::TdmrepFetched => "tdmrep_fetched",
            Outcome::Tunneled => "tunneled",
            Outcome::Denied => "denied",
            Outcome::OperatorReset => "operator_reset",
            Outcome::PaymentRequired => "payment_required",
            Outcome::PaymentRefused => "payment_refused",
            Outcome::PaymentFailed => "payment_failed",
        }
    }

    /// The status the proxy answers with when it makes the answer itself.
    pub fn refusal_status(self) -> u16 {
        match self {
            Outcome::Disallowed | Outcome::SignalRefused | Outcome::Blocked => 403,
            Outcome::Denied => 407,
            Outcome::RobotsUnavailable
            | Outcome::QueueFull
            | Outcome::Paced
            | Outcome::Distressed => 503,
            Outcome::Paused | Outcome::BreakerOpen | Outcome::Throttled => 429,
            Outcome::Error => 502,
            Outcome::Fetched
            | Outcome::Revalidated
            | Outcome::Unchanged
            | Outcome::RobotsFetched
            | Outcome::TdmrepFetched
            | Outcome::Tunneled
            | Outcome::Collapsed
            | Outcome::OperatorReset => 200,
            Outcome::PaymentRequired | Outcome::PaymentRefused => 402,
            Outcome::PaymentFailed => 502,
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
