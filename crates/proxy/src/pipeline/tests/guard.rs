//! Step 0, guard: a target the proxy may not reach, or cannot find, is
//! answered before robots.txt is fetched.

use http::Method;
use mannerly_policy::Outcome;

use super::{stopped, Fixture};
use crate::config::Config;
use crate::error::Source;

#[tokio::test(start_paused = true)]
async fn a_loopback_target_is_blocked_and_a_public_one_passes() {
    let f = Fixture::new(Config::default()).await;
    let mut x = f.exchange(Method::GET, "http://127.0.0.1:9/secret");
    let stop = stopped(x.guard().await, Outcome::Blocked, 403, Source::Policy);
    let why = "127.0.0.1 resolves to 127.0.0.1, a loopback address; set upstream.allow_private to allow it (to try mannerly against an origin on this machine: `mannerly run --local`)";
    assert_eq!(stop.reason(), why);
    assert_eq!(stop.details(), vec![("reason", why.to_string())]);
    let mut public = f.exchange(Method::GET, "http://93.184.215.14/page");
    assert!(public.guard().await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_name_is_judged_by_the_address_it_resolves_to() {
    let mut cfg = Config::default();
    let private = "10.1.2.3:80".parse().expect("addr");
    cfg.upstream
        .resolve
        .insert("intranet.example:80".into(), private);
    let f = Fixture::new(cfg).await;
    let mut x = f.exchange(Method::GET, "http://intranet.example/wiki");
    let stop = stopped(x.guard().await, Outcome::Blocked, 403, Source::Policy);
    assert_eq!(
        stop.reason(),
        "intranet.example resolves to 10.1.2.3, a private address; set upstream.allow_private to allow it (to try mannerly against an origin on this machine: `mannerly run --local`)"
    );
}

#[tokio::test(start_paused = true)]
async fn allow_private_lets_a_loopback_target_through() {
    let f = Fixture::local(Config::default()).await;
    let mut x = f.exchange(Method::GET, "http://127.0.0.1:9/secret");
    assert!(x.guard().await.is_ok());
}

#[tokio::test]
async fn a_name_that_does_not_resolve_is_the_requests_own_502() {
    let f = Fixture::new(Config::default()).await;
    let mut x = f.exchange(Method::GET, "http://no-such-host.invalid/page");
    let stop = stopped(x.guard().await, Outcome::Error, 502, Source::Upstream);
    assert!(
        stop.reason()
            .starts_with("cannot resolve no-such-host.invalid: "),
        "{}",
        stop.reason()
    );
    assert_eq!(
        stop.details(),
        vec![("reason", "name not resolved".to_string())]
    );
}
