//! End-to-end tests: in-process origins on loopback, the real proxy, real
//! clients (reqwest trusting our CA, curl where installed, raw sockets).

mod e2e {
    pub mod support;

    mod admin;
    mod audit;
    mod browser;
    mod budget;
    mod cache;
    mod dashboard;
    mod forwarding;
    mod identity;
    mod prefs;
    mod realweb;
    mod report;
    mod robots;
}
