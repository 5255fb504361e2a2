//! End-to-end tests: in-process origins on loopback, the real proxy, real
//! clients (reqwest trusting our CA, curl where installed, raw sockets).

mod e2e {
    // Test support shared with the benchmarks in examples/, in one crate.
    pub use mannerly_test_support::cluster as cluster_bench;
    pub use mannerly_test_support::limiters as limiters_bench;
    pub use mannerly_test_support::{kill9, redis_cluster, redis_server};
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
}
