//! What a site shows when it struggles without saying 429: the events that
//! count as distress (cbcp-01 §3, RFC 9110 §15.6), as values.

use serde::{Deserialize, Serialize};

/// One sign of a struggling site, as the budget hears it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Distress {
    /// No connection within `upstream.connect_timeout_secs`.
    #[serde(rename = "connect_timeout")]
    ConnectTimeout,
    /// No response head within `upstream.first_byte_timeout_secs`.
    #[serde(rename = "first_byte_timeout")]
    FirstByteTimeout,
    /// The connection was reset or closed before a response head.
    #[serde(rename = "reset")]
    Reset,
    /// 502 without Retry-After.
    #[serde(rename = "502")]
    BadGateway,
    /// 503 without Retry-After.
    #[serde(rename = "503")]
    Unavailable,
    /// 504 without Retry-After.
    #[serde(rename = "504")]
    GatewayTimeout,
    /// `server_error_run` 500s in a row.
    #[serde(rename = "500_run")]
    ServerErrors,
    /// Time to first byte above `latency_factor` × the host's baseline.
    #[serde(rename = "slow")]
    Slow,
}

/// What a request that got no response tells the budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// A distress event: a timeout or a reset.
    Distress(Distress),
    /// The client went away, or the proxy gave up for its own reasons,
    /// this long after the send: a time to first byte at least this long.
    Abandoned {
        /// Milliseconds from the send to the end.
        after_ms: u64,
    },
    /// Nothing the site showed (the guard refused, the client's body broke).
    Nothing,
}

impl Distress {
    /// The name in audit lines, answers and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Distress::ConnectTimeout => "connect_timeout",
            Distress::FirstByteTimeout => "first_byte_timeout",
            Distress::Reset => "reset",
            Distress::BadGateway => "502",
            Distress::Unavailable => "503",
            Distress::GatewayTimeout => "504",
            Distress::ServerErrors => "500_run",
            Distress::Slow => "slow",
        }
    }

    /// Every event, in code order (for metrics).
    pub const ALL: [Distress; 8] = [
        Distress::ConnectTimeout,
        Distress::FirstByteTimeout,
        Distress::Reset,
        Distress::BadGateway,
        Distress::Unavailable,
        Distress::GatewayTimeout,
        Distress::ServerErrors,
        Distress::Slow,
    ];

    /// The event a status without Retry-After is, if any (500 alone is
    /// not: only a run of them).
    pub fn of_status(status: u16) -> Option<Distress> {
        match status {
            502 => Some(Distress::BadGateway),
            503 => Some(Distress::Unavailable),
            504 => Some(Distress::GatewayTimeout),
            _ => None,
        }
    }

    /// A one-byte code for the compact host state (0 is none).
    pub(crate) fn code(self) -> u8 {
        Distress::ALL
            .iter()
            .position(|&d| d == self)
            .map_or(0, |i| i as u8 + 1)
    }

    /// The event a code stands for.
    pub(crate) fn from_code(code: u8) -> Option<Distress> {
        Distress::ALL
            .get(usize::from(code).checked_sub(1)?)
            .copied()
    }
}

impl std::fmt::Display for Distress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::Distress;

    #[test]
    fn codes_go_both_ways() {
        for d in Distress::ALL {
            assert_eq!(Distress::from_code(d.code()), Some(d));
        }
        assert_eq!(Distress::from_code(0), None);
        assert_eq!(Distress::from_code(9), None);
    }

    #[test]
    fn serde_names_are_the_audit_names() {
        for d in Distress::ALL {
            let json = serde_json::to_string(&d).unwrap();
            assert_eq!(json, format!("\"{}\"", d.as_str()));
            assert_eq!(serde_json::from_str::<Distress>(&json).unwrap(), d);
        }
    }
}
