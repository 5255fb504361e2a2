//! Limits on what clients can hold: connections (in all and per client
//! address), the listen backlog, and requests that come back to us (our own
//! `Via`, answered 508).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use http::header::VIA;
use http::{HeaderMap, HeaderValue};
use tokio::net::{TcpListener, TcpSocket};

use crate::error::StartError;

/// Binds `addr` with a listen backlog of `backlog` (the kernel caps it at
/// `net.core.somaxconn`); the usual 128 drops connections in bursts.
pub(crate) fn listen(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

/// Counts open client connections.
pub(crate) struct ConnLimits {
    max: usize,
    per_client: usize,
    open: AtomicUsize,
    by_ip: Mutex<HashMap<IpAddr, usize>>,
}

/// Held by a connection for its life.
pub(crate) struct ConnPermit {
    limits: Arc<ConnLimits>,
    ip: IpAddr,
}

impl Drop for ConnPermit {
    fn drop(&mut self) {
        self.limits.open.fetch_sub(1, Ordering::Relaxed);
        if let Ok(mut m) = self.limits.by_ip.lock() {
            if let Some(n) = m.get_mut(&self.ip) {
                *n -= 1;
                if *n == 0 {
                    m.remove(&self.ip);
                }
            }
        }
    }
}

impl ConnLimits {
    pub(crate) fn new(max: usize, per_client: usize) -> Arc<ConnLimits> {
        Arc::new(ConnLimits {
            max,
            per_client,
            open: AtomicUsize::new(0),
            by_ip: Mutex::new(HashMap::new()),
        })
    }

    /// A permit for one more connection from `ip`, or `None` when a cap is
    /// reached (the connection is closed unanswered: answering costs what
    /// the cap is there to save).
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<ConnPermit> {
        let ip = ip.to_canonical();
        let mut m = self.by_ip.lock().ok()?;
        if self.open.load(Ordering::Relaxed) >= self.max {
            tracing::debug!("connection from {ip} closed: proxy.max_connections reached");
            return None;
        }
        let n = m.entry(ip).or_insert(0);
        if *n >= self.per_client {
            tracing::debug!(
                "connection from {ip} closed: proxy.max_connections_per_client reached"
            );
            return None;
        }
        *n += 1;
        self.open.fetch_add(1, Ordering::Relaxed);
        Some(ConnPermit {
            limits: self.clone(),
            ip,
        })
    }
}

/// This proxy's `Via` pseudonym, random per start, so that two proxies
/// chained on purpose do not mistake each other for a loop.
pub(crate) struct Via {
    name: String,
    value: HeaderValue,
}

impl Via {
    /// A pseudonym from the system's random source.
    pub(crate) fn new() -> Result<Via, StartError> {
        Via::from_random(getrandom::getrandom)
    }

    /// Refuses to start without randomness rather than fall back to a name
    /// made of the pid and the time: TLS (leaf keys for interception, every
    /// handshake upstream) draws on the same random source, so such a proxy
    /// would start only to fail its HTTPS traffic; failing here names the
    /// cause instead of leaving it to be found in broken handshakes.
    fn from_random(
        fill: impl FnOnce(&mut [u8]) -> Result<(), getrandom::Error>,
    ) -> Result<Via, StartError> {
        let mut b = [0u8; 6];
        fill(&mut b).map_err(|e| StartError::Random(e.to_string()))?;
        let name = format!("mannerly-{}", mannerly_policy::hex(&b));
        // Hex digits are always a valid header value.
        let value = HeaderValue::from_str(&format!("1.1 {name}"))
            .unwrap_or_else(|_| HeaderValue::from_static("1.1 mannerly"));
        Ok(Via { name, value })
    }

    /// The `Via` value added to requests sent upstream.
    pub(crate) fn value(&self) -> HeaderValue {
        self.value.clone()
    }

    /// Whether a request has already been through this proxy.
    pub(crate) fn is_loop(&self, headers: &HeaderMap) -> bool {
        headers
            .get_all(VIA)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| {
                v.split(',')
                    .any(|hop| hop.split_whitespace().nth(1) == Some(self.name.as_str()))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_count_and_release() {
        let l = ConnLimits::new(3, 2);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let p1 = l.admit(a).unwrap();
        let _p2 = l.admit(a).unwrap();
        assert!(l.admit(a).is_none(), "per-client cap");
        let _p3 = l.admit(b).unwrap();
        assert!(l.admit(b).is_none(), "global cap");
        drop(p1);
        assert!(l.admit(a).is_some());
    }

    #[test]
    fn our_via_is_a_loop_others_are_not() {
        let me = Via::new().expect("a random source");
        let next = Via::new().expect("a random source");
        let mut h = HeaderMap::new();
        h.append(VIA, HeaderValue::from_static("1.1 squid, 1.0 other"));
        assert!(!me.is_loop(&h));
        // A second proxy chained behind this one is not a loop for it.
        h.append(VIA, next.value());
        assert!(!me.is_loop(&h));
        assert!(next.is_loop(&h));
        h.append(VIA, me.value());
        assert!(me.is_loop(&h));
    }

    #[test]
    fn no_random_source_refuses_to_start_and_says_why() {
        let Err(e) = Via::from_random(|_| Err(getrandom::Error::UNSUPPORTED)) else {
            panic!("started without randomness");
        };
        assert!(matches!(e, StartError::Random(_)));
        let msg = e.to_string();
        assert!(msg.contains("random source failed"), "{msg}");
        assert!(
            msg.contains(&getrandom::Error::UNSUPPORTED.to_string()),
            "{msg}"
        );
    }
}
