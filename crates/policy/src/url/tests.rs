use super::*;

const BASE: &str = "http://a/b/c/d;p?q";

fn check(cases: &[(&str, &str)]) {
    for (reference, expected) in cases {
        assert_eq!(
            join(BASE, reference).as_deref(),
            Some(*expected),
            "{reference}"
        );
    }
}

/// RFC 3986 §5.4.1, every example as the RFC writes it.
#[test]
fn the_rfcs_normal_examples() {
    check(&[
        ("g:h", "g:h"),
        ("g", "http://a/b/c/g"),
        ("./g", "http://a/b/c/g"),
        ("g/", "http://a/b/c/g/"),
        ("/g", "http://a/g"),
        ("//g", "http://g"),
        ("?y", "http://a/b/c/d;p?y"),
        ("g?y", "http://a/b/c/g?y"),
        ("#s", "http://a/b/c/d;p?q#s"),
        ("g#s", "http://a/b/c/g#s"),
        ("g?y#s", "http://a/b/c/g?y#s"),
        (";x", "http://a/b/c/;x"),
        ("g;x", "http://a/b/c/g;x"),
        ("g;x?y#s", "http://a/b/c/g;x?y#s"),
        ("", "http://a/b/c/d;p?q"),
        (".", "http://a/b/c/"),
        ("./", "http://a/b/c/"),
        ("..", "http://a/b/"),
        ("../", "http://a/b/"),
        ("../g", "http://a/b/g"),
        ("../..", "http://a/"),
        ("../../", "http://a/"),
        ("../../g", "http://a/g"),
    ]);
}

/// RFC 3986 §5.4.2, every example; `http:g` as a strict parser reads it.
#[test]
fn the_rfcs_abnormal_examples() {
    check(&[
        ("../../../g", "http://a/g"),
        ("../../../../g", "http://a/g"),
        ("/./g", "http://a/g"),
        ("/../g", "http://a/g"),
        ("g.", "http://a/b/c/g."),
        (".g", "http://a/b/c/.g"),
        ("g..", "http://a/b/c/g.."),
        ("..g", "http://a/b/c/..g"),
        ("./../g", "http://a/b/g"),
        ("./g/.", "http://a/b/c/g/"),
        ("g/./h", "http://a/b/c/g/h"),
        ("g/../h", "http://a/b/c/h"),
        ("g;x=1/./y", "http://a/b/c/g;x=1/y"),
        ("g;x=1/../y", "http://a/b/c/y"),
        ("g?y/./x", "http://a/b/c/g?y/./x"),
        ("g?y/../x", "http://a/b/c/g?y/../x"),
        ("g#s/./x", "http://a/b/c/g#s/./x"),
        ("g#s/../x", "http://a/b/c/g#s/../x"),
        ("http:g", "http:g"),
    ]);
}

/// The two ways the robots.txt redirect resolver went wrong, and a base
/// with no path (§5.2.3: the merge starts at "/").
#[test]
fn a_scheme_is_case_insensitive_and_a_query_keeps_the_path() {
    let base = "http://a.test/robots.txt";
    assert_eq!(
        join(base, "HTTPS://c.test/y").as_deref(),
        Some("https://c.test/y")
    );
    assert_eq!(
        join(base, "?v=2").as_deref(),
        Some("http://a.test/robots.txt?v=2")
    );
    assert_eq!(
        join("http://a.test", "x").as_deref(),
        Some("http://a.test/x")
    );
    assert_eq!(join("/no/scheme", "x"), None);
    assert_eq!(
        join_target(base, "/r#top").as_deref(),
        Some("http://a.test/r")
    );
}

#[test]
fn default_ports_and_origins() {
    assert_eq!(default_port("HTTP"), Some(80));
    assert_eq!(default_port("https"), Some(443));
    assert_eq!(default_port("ftp"), None);
    for (scheme, host, port, expected) in [
        ("http", "Example.TEST", Some(80), "http://example.test"),
        ("http", "example.test", None, "http://example.test"),
        ("http", "example.test", Some(443), "http://example.test:443"),
        ("https", "example.test", Some(443), "https://example.test"),
        ("https", "[::1]", Some(8443), "https://[::1]:8443"),
    ] {
        let mut out = String::new();
        push_origin(&mut out, scheme, host, port);
        assert_eq!(out, expected);
        assert_eq!(origin(&format!("{out}/p?q")), expected);
        assert_eq!(origin(&out), expected);
    }
    assert_eq!(origin("http://a.test?q"), "http://a.test");
    for (scheme, authority, expected) in [
        ("https", "a.test:443", "a.test"),
        ("https", "a.test:80", "a.test:80"),
        ("http", "a.test:80", "a.test"),
        ("https", "[::1]:443", "[::1]"),
        ("https", "[::1]", "[::1]"),
        ("https", "a.test", "a.test"),
    ] {
        assert_eq!(strip_default_port(scheme, authority), expected);
    }
}

#[test]
fn robots_txt_is_its_path_whatever_the_query() {
    for yes in [
        "/robots.txt",
        "/robots.txt?x",
        "/robots.txt?",
        "/robots.txt#f",
    ] {
        assert!(is_robots_txt(yes), "{yes}");
    }
    for no in [
        "/robots.txt/",
        "/robots.txtx",
        "/ROBOTS.TXT",
        "/a/robots.txt",
        "/",
    ] {
        assert!(!is_robots_txt(no), "{no}");
    }
}
