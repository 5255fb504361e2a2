//! End-to-end tests: in-process origins on loopback, the real proxy, real
//! clients (reqwest trusting our CA, curl where installed, raw sockets).

mod e2e {
    pub mod support;

    mod audit;
    mod auth;
    mod budget;
    mod cache;
    mod datadir;
    mod forwarding;
    mod limits;
    mod robots;
    mod seal;

    #[path = "../../examples/kill9.rs"]
    mod kill9;
}
