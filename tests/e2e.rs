//! End-to-end tests: in-process origins on loopback, the real proxy, real
//! clients (reqwest trusting our CA, curl where installed, raw sockets).

mod e2e {
    // Its call counters serve the cluster benchmark.
    #[allow(dead_code)]
    #[path = "../../crates/state/tests/support/redis_cluster.rs"]
    pub mod redis_cluster;
    #[path = "../../crates/state/tests/support/redis_server.rs"]
    pub mod redis_server;
    pub mod support;

    mod admin;
    mod announced;
    mod audit;
    mod auth;
    mod broad;
    mod browser;
    mod budget;
    mod cache;
    mod cache_suite;
    mod cli;
    mod clients;
    mod cluster;
    mod collapse;
    mod conduct;
    mod dashboard;
    mod datadir;
    mod deploy;
    mod distress;
    mod evidence;
    mod forwarding;
    mod identity;
    mod limiters;
    mod limits;
    mod parent;
    mod payment;
    mod prefs;
    mod realweb;
    mod record;
    mod redis_cluster_failover;
    mod reload;
    mod report;
    mod robots;
    mod seal;
    mod shared_cache;
    mod shared_pages;
    mod startup;
    mod tdmrep;
    mod tour;
    mod wake;
    mod witness;

    #[path = "../../examples/kill9.rs"]
    mod kill9;
    // Its benchmark's main and naive loop are not used by the tests.
    #[allow(dead_code)]
    #[path = "../../examples/limiters.rs"]
    mod limiters_bench;
}
