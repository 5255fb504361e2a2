//! Step 3, conditional: what the store has for a request, as validators
//! to send or, with `serve_fresh`, as the answer itself.

use http::Method;
use mannerly_policy::conditional::CacheOutcome;

use super::{ask, request, Fixture};
use crate::config::Config;
use crate::pipeline::Lookup;

#[tokio::test(start_paused = true)]
async fn a_post_is_left_alone_and_a_get_is_looked_up() {
    let f = Fixture::new(Config::default()).await;
    let post = request(Method::POST, "http://example.org/form", &[]);
    let step = ask(&mut f.begin(&post), &post).await;
    assert!(step.key.is_none());
    assert_eq!(step.outcome, CacheOutcome::Bypass);

    let get = request(Method::GET, "http://example.org/page", &[]);
    let step = ask(&mut f.begin(&get), &get).await;
    assert!(step.key.is_some());
    assert_eq!(step.outcome, CacheOutcome::Miss);
    assert!(step.validators.is_none(), "nothing stored yet");
    assert!(!step.had_entry);
}

#[tokio::test(start_paused = true)]
async fn a_stored_page_is_asked_for_with_its_validators() {
    let f = Fixture::new(Config::default()).await;
    let url = "http://example.org/page";
    let etag = [("etag", "\"v1\""), ("cache-control", "max-age=600")];
    let key = f.store(url, &etag, "stored page");
    let get = request(Method::GET, url, &[]);
    let step = ask(&mut f.begin(&get), &get).await;
    assert_eq!(step.key, Some(key));
    assert!(step.had_entry);
    assert_eq!(step.outcome, CacheOutcome::Miss);
    let validators = step.validators.expect("validators");
    assert_eq!(validators["if-none-match"], "\"v1\"");
    let stored = step.stored.expect("the page they came from");
    assert_eq!(stored.body, "stored page");
}

#[tokio::test(start_paused = true)]
async fn the_clients_own_validators_pass_through_without_ours() {
    let f = Fixture::new(Config::default()).await;
    let url = "http://example.org/page";
    let key = f.store(url, &[("etag", "\"v1\"")], "stored page");
    let get = request(Method::GET, url, &[("if-none-match", "\"mine\"")]);
    let step = ask(&mut f.begin(&get), &get).await;
    assert_eq!(step.key, Some(key), "its answer may still replace the page");
    assert_eq!(step.outcome, CacheOutcome::Bypass);
    assert!(step.validators.is_none());
    assert!(step.stored.is_none());
}

#[tokio::test(start_paused = true)]
async fn serve_fresh_answers_a_fresh_page_from_the_store() {
    let mut cfg = Config::default();
    cfg.cache.serve_fresh = true;
    let f = Fixture::new(cfg).await;
    let url = "http://example.org/page";
    f.store(url, &[("cache-control", "max-age=600")], "stored page");
    let get = request(Method::GET, url, &[]);
    let mut x = f.begin(&get);
    let Ok(Lookup::Stored(page)) = x.conditional(&get).await else {
        panic!("a fresh page is served without asking");
    };
    assert_eq!(page.status, 200);
    assert_eq!(page.body, "stored page");
    assert_eq!(page.headers["cache-control"], "max-age=600");
    assert_eq!(x.rec.cache, Some("hit"));
}
