//! End-to-end tests: in-process origins on loopback, the real proxy, real
//! clients (reqwest trusting our CA, curl where installed, raw sockets).

mod e2e {
    pub mod support;

    mod admin;
    mod audit;
    mod auth;
    mod browser;
    mod budget;
    mod cache;
    mod dashboard;
    mod datadir;
    mod forwarding;
    mod identity;
    mod limits;
    mod prefs;
    mod realweb;
    mod report;
    mod robots;
    mod seal;

    #[path = "../../examples/kill9.rs"]
    mod kill9;
}
