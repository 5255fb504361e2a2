//! The origin's request made from the client's: absolute URI, HTTP/1.1,
//! our Via, the target's Host (an https origin's left to the client),
//! hop-by-hop fields gone, end-to-end fields kept, our validators added.

use http::{Method, Version};

use super::{ask, request, Fixture};
use crate::body::empty;
use crate::config::Config;

#[tokio::test(start_paused = true)]
async fn the_origin_gets_the_clients_request_without_its_hops_and_with_our_validators() {
    let f = Fixture::new(Config::default()).await;
    let url = "http://example.org/page?q=1";
    f.store(url, &[("etag", "\"v1\"")], "stored page");
    let client = [
        ("host", "example.org"),
        ("accept", "text/html"),
        ("connection", "keep-alive, x-hop"),
        ("x-hop", "only for the proxy"),
        ("keep-alive", "timeout=5"),
        ("proxy-authorization", "Basic dTpw"),
        ("te", "trailers"),
        ("upgrade", "h2c"),
    ];
    let parts = request(Method::GET, "http://Example.org/page?q=1", &client);
    let mut x = f.begin(&parts);
    let cache = ask(&mut x, &parts).await;
    let out = x.outgoing(&parts, empty(), &cache).expect("request");

    assert_eq!(out.uri(), url);
    assert_eq!(out.version(), Version::HTTP_11);
    let h = out.headers();
    assert_eq!(h["via"], f.shared.via.value());
    assert!(h["via"]
        .to_str()
        .expect("text")
        .starts_with("1.1 mannerly-"));
    assert_eq!(h["accept"], "text/html");
    assert_eq!(h["user-agent"], "StepBot/1.0");
    assert_eq!(h["if-none-match"], "\"v1\"");
    assert_eq!(h["host"], "example.org");
    for gone in [
        "connection",
        "x-hop",
        "keep-alive",
        "proxy-authorization",
        "te",
        "upgrade",
    ] {
        assert!(!h.contains_key(gone), "{gone} was sent on");
    }
}

/// The origin's URI is put together from the parts already parsed; it is
/// the URI that parsing the request's URL whole gives, for every form of
/// target and path (ports, IPv6 literals, queries, no path).
#[tokio::test(start_paused = true)]
async fn the_origins_uri_is_the_parsed_url_for_every_form_of_target() {
    let f = Fixture::new(Config::default()).await;
    let cases = [
        (Method::GET, "http://example.org/page?q=1&r=%20"),
        (Method::GET, "http://Example.ORG:80/a"),
        (Method::GET, "http://example.org:8080/a/b/"),
        (Method::GET, "http://example.org"),
        (Method::GET, "http://[2001:db8::1]:8443/x?y"),
        (Method::GET, "http://[2001:db8::1]/"),
        (Method::GET, "http://192.0.2.1:81/?"),
        (Method::OPTIONS, "http://example.org"),
    ];
    for (method, uri) in cases {
        let parts = request(method, uri, &[]);
        let mut x = f.begin(&parts);
        let cache = ask(&mut x, &parts).await;
        let url = x.rec.url.clone();
        let out = x.outgoing(&parts, empty(), &cache).expect("request");
        let parsed: http::Uri = url.parse().expect("the record's URL parses");
        assert_eq!(out.uri(), &parsed, "{uri}");
        assert_eq!(out.uri().to_string(), url, "{uri}");
    }
}

/// A request target that is no path (`OPTIONS *` inside a tunnel) gets
/// what parsing its URL whole says, as before the URI was put together.
#[test]
fn a_target_that_is_no_path_gets_the_whole_urls_verdict() {
    use crate::target::{Scheme, Target};
    let target = Target::new(Scheme::Https, "example.org".into(), 443);
    let parts = request(Method::OPTIONS, "*", &[]);
    let url = target.url(parts.uri.path_and_query());
    let made = super::super::request::origin_uri(&parts, &target, &url);
    match url.parse::<http::Uri>() {
        Ok(parsed) => assert_eq!(made.expect("parses whole"), parsed),
        Err(e) => assert_eq!(
            made.expect_err("refused whole"),
            format!("cannot forward {url}: {e}")
        ),
    }
}

/// The origin's Host names the target, one field, whatever the client
/// sent; an https origin gets none from us (its client writes Host over
/// HTTP/1.1 and `:authority` alone over h2).
#[tokio::test(start_paused = true)]
async fn the_origins_host_is_the_targets_authority() {
    let f = Fixture::new(Config::default()).await;
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], Option<&'a str>);
    let cases: [Case; 7] = [
        (
            "http://example.org/a",
            &[("host", "example.org")],
            Some("example.org"),
        ),
        ("http://example.org/a", &[], Some("example.org")),
        (
            "http://example.org/a",
            &[("host", "other.example")],
            Some("example.org"),
        ),
        (
            "http://Example.org:80/a",
            &[("host", "Example.org:80")],
            Some("example.org"),
        ),
        (
            "http://example.org:8080/a",
            &[("host", "example.org:8080"), ("host", "example.org:8080")],
            Some("example.org:8080"),
        ),
        (
            "http://[2001:db8::1]:8443/a",
            &[],
            Some("[2001:db8::1]:8443"),
        ),
        ("https://example.org/a", &[("host", "example.org")], None),
    ];
    for (uri, client, want) in cases {
        let parts = request(Method::GET, uri, client);
        let mut x = f.begin(&parts);
        let cache = ask(&mut x, &parts).await;
        let out = x.outgoing(&parts, empty(), &cache).expect("request");
        let sent: Vec<_> = out.headers().get_all("host").iter().collect();
        match want {
            Some(host) => assert_eq!(sent, [host], "{uri} {client:?}"),
            None => assert!(sent.is_empty(), "{uri}: {sent:?}"),
        }
    }
}
