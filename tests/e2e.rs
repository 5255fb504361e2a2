//! End-to-end tests: in-process origins on loopback, the real proxy, real
//! clients (reqwest trusting our CA, curl where installed, raw sockets).

mod e2e {
    // The redis-server and Redis Cluster starters, through the cluster
    // scenario that loads them (a file is one module once).
    pub use cluster_bench::{redis_cluster, redis_server};
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
    mod groups;
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
    mod robots_ext;
    mod scrapy_pause;
    mod seal;
    mod shared_cache;
    mod shared_pages;
    mod startup;
    mod tdmrep;
    mod told;
    mod tour;
    mod wake;
    mod witness;

    #[path = "../../examples/kill9.rs"]
    mod kill9;
    // The scenario's main and its other runs are not used by the tests.
    #[allow(dead_code)]
    #[path = "../../examples/cluster_scenario.rs"]
    pub mod cluster_bench;
    // Its benchmark's main and naive loop are not used by the tests.
    #[allow(dead_code)]
    #[path = "../../examples/limiters.rs"]
    mod limiters_bench;
}
