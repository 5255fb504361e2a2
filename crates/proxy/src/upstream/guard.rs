//! The guard against internal addresses, and the connection it allows:
//! names resolved (overrides first), every address checked, the first that
//! answers connected. A leaf of `upstream`: the connector and the parent
//! proxy both use it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use mannerly_policy::{classify_ip, parse_host_ip};
use mannerly_state::hosts::{Bound, Tier};
use tokio::net::TcpStream;

use super::resolve::Overrides;
use crate::clock::Clock;
use crate::config::UpstreamConfig;
use crate::error::ConnectError;

/// `EMFILE` / `ENFILE` (Linux numbering): the process or the system is out
/// of file descriptors.
fn out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(23 | 24))
}

/// Resolves names (overrides first) and refuses internal addresses.
#[derive(Debug, Clone)]
pub(crate) struct Guard {
    allow_private: bool,
    overrides: Arc<Overrides>,
    /// Names that recently resolved to allowed addresses only, for the early
    /// check of each request; the connector still checks every address it
    /// connects to, so a name that changes meanwhile is caught there.
    /// With when each passed and a `bound` stamp of it.
    vetted: Arc<mannerly_state::FastMap<(String, u16), (tokio::time::Instant, u64)>>,
    bound: Arc<Bound>,
    clock: Clock,
}

/// How long a name that passed the guard is not resolved again for the
/// early check.
const VETTED_FOR: Duration = Duration::from_secs(30);
/// Names remembered as vetted; past this the longest vetted go first.
const VETTED_MAX: usize = 100_000;

impl Guard {
    /// A guard from the `[upstream]` section.
    pub(crate) fn new(cfg: &UpstreamConfig, clock: Clock) -> Self {
        // `Config::validate` has read every key already.
        let overrides = Overrides::new(&cfg.resolve).unwrap_or_default();
        Guard {
            allow_private: cfg.allow_private,
            overrides: Arc::new(overrides),
            vetted: Arc::new(mannerly_state::FastMap::default()),
            bound: Arc::default(),
            clock,
        }
    }

    /// The clock the guard reads.
    pub(crate) fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The early check of a request's host name: like [`Guard::resolve`],
    /// but a name that passed within the last 30 s is not resolved again.
    pub(crate) async fn check_name(&self, host: &str, port: u16) -> Result<(), ConnectError> {
        let key = (host.to_string(), port);
        let now = self.clock.now();
        if self
            .vetted
            .get(&key)
            .is_some_and(|at| now < at.0 + VETTED_FOR)
        {
            return Ok(());
        }
        self.resolve(host, port).await?;
        self.vetted.insert(key, (now, self.bound.stamp()));
        self.bound
            .hold(&self.vetted, VETTED_MAX, |_, at| Some((Tier::Idle, at.1)));
        Ok(())
    }

    /// Every address `host:port` may be reached at, or why none may. All
    /// resolved addresses must pass: a name that mixes public and internal
    /// addresses is how DNS rebinding gets in.
    pub(crate) async fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> Result<Vec<SocketAddr>, ConnectError> {
        let addrs = self.lookup(host, port).await?;
        self.check(host, &addrs)?;
        Ok(addrs)
    }

    /// The addresses of `host:port` (overrides first), unjudged: for the
    /// parent proxy, whose address the operator chose.
    pub(crate) async fn lookup(
        &self,
        host: &str,
        port: u16,
    ) -> Result<Vec<SocketAddr>, ConnectError> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let addrs = if let Some(addr) = self.overrides.get(bare, port) {
            vec![addr]
        } else if let Some(ip) = parse_host_ip(host) {
            vec![SocketAddr::new(ip, port)]
        } else {
            let found =
                tokio::net::lookup_host((bare, port))
                    .await
                    .map_err(|e| ConnectError::Resolve {
                        host: host.to_string(),
                        why: e.to_string(),
                    })?;
            found.collect()
        };
        if addrs.is_empty() {
            return Err(ConnectError::Resolve {
                host: host.to_string(),
                why: "no addresses".into(),
            });
        }
        Ok(addrs)
    }

    /// Refuses the first internal address, unless those are allowed.
    pub(crate) fn check(&self, host: &str, addrs: &[SocketAddr]) -> Result<(), ConnectError> {
        if self.allow_private {
            return Ok(());
        }
        for a in addrs {
            let class = classify_ip(a.ip());
            if class.is_internal() {
                return Err(ConnectError::Blocked {
                    host: host.to_string(),
                    addr: a.ip(),
                    class,
                });
            }
        }
        Ok(())
    }
}

/// Connects to the first of `addrs` that answers within `timeout` in all.
pub(crate) async fn connect_any(
    host: &str,
    addrs: &[SocketAddr],
    timeout: Duration,
) -> Result<TcpStream, ConnectError> {
    let attempt = async {
        let mut last = None;
        for a in addrs {
            match TcpStream::connect(a).await {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    return Ok(s);
                }
                Err(e) => last = Some(e),
            }
        }
        let source = last.unwrap_or_else(|| std::io::Error::other("no address"));
        if out_of_descriptors(&source) {
            return Err(ConnectError::ProxyBusy {
                host: host.to_string(),
                why: format!("mannerly is out of file descriptors ({source})"),
            });
        }
        Err(ConnectError::Io {
            host: host.to_string(),
            source,
        })
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or_else(|_| {
            Err(ConnectError::Timeout {
                host: host.to_string(),
            })
        })
}
