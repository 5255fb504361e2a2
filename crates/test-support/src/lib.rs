//! mannerly's test support in one place: the real servers tests start
//! (redis-server, a Redis Cluster) and the scenarios both the end-to-end
//! tests and the benchmarks in `examples/` run (`kill -9` under load, nginx
//! limiters, the cluster scenario). A dev-only crate, as linkerd2-proxy
//! keeps its test support; the scenarios, which start proxies, are the
//! `scenarios` feature, so mannerly-state's tests take the starters alone.

pub mod poll;
pub mod ports;
pub mod redis_cluster;
pub mod redis_server;

#[cfg(feature = "scenarios")]
pub mod cluster;
#[cfg(feature = "scenarios")]
pub mod kill9;
#[cfg(feature = "scenarios")]
pub mod limiters;
