//! The conduct record (issue 32): `mannerly report` on a hand-made log of
//! the current format (send times, retries that name each other, agent and
//! key id) whose figures are known; one site alone with `--host`; the JSON
//! figures citing their lines; and the whole thing through the binary
//! against a Python origin that throttles two requests in three, its own
//! log compared with the report's.

use std::collections::HashMap;
use std::time::Duration;

use mannerly_policy::{chain_line, GENESIS};
use serde_json::{json, Value};

use super::browser::Browser;
use super::support::*;

/// One line of the hand-made log: seconds after 12:00:00 of arrival and of
/// the send (if sent), and the other fields.
fn line(id: &str, ts: f64, sent: Option<f64>, outcome: &str, more: Value) -> Value {
    let at = |s: f64| {
        let whole = s.floor() as u64;
        let (d, rest) = (whole / 86_400, whole % 86_400);
        format!(
            "2025-02-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            1 + d,
            12 + rest / 3600,
            rest % 3600 / 60,
            rest % 60,
            ((s - s.floor()) * 1000.0).round() as u64
        )
    };
    let mut v = json!({
        "ts": at(ts),
        "id": id,
        "method": "GET",
        "url": format!("http://c.example/{id}"),
        "host": "c.example",
        "agent": "testbot",
        "outcome": outcome,
        "keyid": "kid-1",
        "signed": true,
    });
    if let Some(s) = sent {
        v["sent"] = Value::from(at(s));
    }
    for (k, x) in more.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

const ALLOWED: &str = "allowed by Allow: / (line 2, group *)";
const PRIVATE: &str = "Disallow: /private/ (line 3, group *)";

/// c.example, sends at 0 (robots.txt), 1 (429), 3 (429, its retry), 5
/// (200, the retry's retry), 6, 8 (429, a POST not sent again), 10 (304
/// to our validators), 11 (a disallowed path fetched in observe mode), 12
/// (the 429 that opens the breaker) and 100; a refusal by robots.txt at 6
/// and one a day later, against a copy then older than a day; a breaker
/// refusal at 13; an operator reset at 90. One line of d.example, which
/// `--host c.example` must not name.
fn rows() -> Vec<Value> {
    let r = |extra: Value| {
        let mut v = json!({ "rule": ALLOWED });
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v
    };
    let t429 = |extra: Value| {
        let mut v = r(json!({"status": 429, "retry_after": "2", "pause_s": 2.0}));
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v
    };
    let mut d = line("d-1", 3.0, Some(3.0), "fetched", json!({"status": 200}));
    d["host"] = "d.example".into();
    d["url"] = "http://d.example/secret-path".into();
    vec![
        line(
            "c-1",
            0.1,
            Some(0.0),
            "robots_fetched",
            json!({"status": 200}),
        ),
        line(
            "c-2",
            0.0,
            Some(1.0),
            "throttled",
            t429(json!({"attempt": 1, "retried_by": "c-3"})),
        ),
        d,
        line(
            "c-3",
            0.0,
            Some(3.0),
            "throttled",
            t429(json!({"attempt": 2, "retry_of": "c-2", "retried_by": "c-4"})),
        ),
        line(
            "c-4",
            0.0,
            Some(5.0),
            "fetched",
            r(json!({"status": 200, "attempt": 3, "retry_of": "c-3"})),
        ),
        line("c-5", 5.5, Some(6.0), "fetched", r(json!({"status": 200}))),
        line(
            "c-6",
            6.0,
            None,
            "disallowed",
            json!({"status": 403, "rule": PRIVATE}),
        ),
        line("c-7", 7.0, Some(8.0), "throttled", t429(json!({}))),
        line(
            "c-8",
            9.0,
            Some(10.0),
            "revalidated",
            r(json!({"status": 200, "saved_bytes": 500})),
        ),
        line(
            "c-9",
            11.0,
            Some(11.0),
            "fetched",
            json!({"status": 200, "rule": PRIVATE, "would": "disallowed"}),
        ),
        line(
            "c-10",
            12.0,
            Some(12.0),
            "breaker_open",
            t429(json!({"pause_s": 300.0})),
        ),
        line(
            "c-11",
            13.0,
            None,
            "breaker_open",
            r(json!({"status": 429})),
        ),
        line("c-12", 90.0, None, "operator_reset", json!({"status": 200})),
        line(
            "c-13",
            100.0,
            Some(100.0),
            "fetched",
            r(json!({"status": 200})),
        ),
        line(
            "c-14",
            86_500.0,
            None,
            "disallowed",
            json!({"status": 403, "rule": PRIVATE}),
        ),
    ]
}

fn write_log(path: &std::path::Path) {
    let mut prev = GENESIS.to_string();
    let mut out = String::new();
    for v in rows() {
        let (line, chain) = chain_line(&prev, &v.to_string());
        prev = chain;
        out.push_str(&line);
        out.push('\n');
    }
    std::fs::write(path, out).unwrap();
}

fn ids(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|l| l["id"].as_str().unwrap())
        .collect()
}

fn close(a: &Value, b: f64) -> bool {
    a.as_f64().is_some_and(|a| (a - b).abs() < 1e-6)
}

#[test]
fn one_site_s_record_has_the_known_figures_each_citing_its_lines() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    write_log(&log);
    let json_path = dir.path().join("c.json");
    let (code, out) = mannerly(
        &[
            "report",
            log.to_str().unwrap(),
            "--host",
            "c.example",
            "--json",
            json_path.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("site: c.example"), "{out}");
    assert!(
        out.contains("crawler: agent testbot; Web Bot Auth key id kid-1"),
        "{out}"
    );
    assert!(
        !out.contains("d.example") && !out.contains("ALL HOSTS"),
        "{out}"
    );
    let row: Vec<&str> = out
        .lines()
        .find(|l| l.starts_with("c.example"))
        .unwrap()
        .split_whitespace()
        .collect();
    // HOST REQUESTS SENT ROBOTS 429s SLOWED REPEAT BREAKER NEXT429 MIN429 REVAL% SAVED
    assert_eq!(
        row,
        [
            "c.example",
            "10",
            "10",
            "2",
            "4",
            "2/4",
            "2",
            "1",
            "3.7s",
            "2.0s",
            "20.0",
            "500"
        ]
    );

    let text = std::fs::read_to_string(&json_path).unwrap();
    assert!(!text.contains("d.example") && !text.contains("secret-path"));
    let r: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(r["site"], "c.example");
    assert_eq!(r["hosts"].as_array().unwrap().len(), 1);
    let h = &r["hosts"][0];
    assert_eq!(
        h["crawler"],
        json!({"agents": ["testbot"], "keyids": ["kid-1"]})
    );

    // robots.txt: 12 requests checked, 11 against a copy under a day old,
    // the one a day later against an older one; one disallowed path
    // fetched; two refusals by the same rule.
    let robots = &h["robots"];
    assert_eq!(
        (robots["checked"].as_u64(), robots["fresh"].as_u64()),
        (Some(12), Some(11))
    );
    assert_eq!(ids(&robots["stale"]["lines"]), ["c-14"]);
    assert_eq!(ids(&robots["disallowed_fetched"]["lines"]), ["c-9"]);
    assert_eq!(robots["age_unknown"]["count"], 0);
    assert_eq!(robots["by_rule"][0]["rule"], PRIVATE);
    assert_eq!(ids(&robots["by_rule"][0]["lines"]), ["c-6", "c-14"]);
    assert_eq!(ids(&robots["fetches"]["lines"]), ["c-1"]);

    // Response to feedback, 429 by 429 (sends, span of the window, next
    // request and next 429 in seconds, stayed below, repeated).
    let f = &h["feedback"];
    assert_eq!(ids(&f["breaker_openings"]["lines"]), ["c-10"]);
    assert!(close(&f["revalidation"]["share"], 0.2));
    assert_eq!(ids(&f["revalidation"]["revalidated"]["lines"]), ["c-8"]);
    let episodes = f["episodes"].as_array().unwrap();
    let want = [
        (
            "c-2",
            1,
            1.0,
            7,
            11.0,
            Some(2.0),
            Some(2.0),
            Some(true),
            false,
        ),
        (
            "c-3",
            2,
            3.0,
            6,
            9.0,
            Some(2.0),
            Some(5.0),
            Some(false),
            false,
        ),
        (
            "c-7",
            5,
            8.0,
            3,
            4.0,
            Some(2.0),
            Some(4.0),
            Some(false),
            true,
        ),
        ("c-10", 8, 12.0, 0, 0.0, Some(88.0), None, Some(true), true),
    ];
    assert_eq!(episodes.len(), want.len());
    for (e, w) in episodes.iter().zip(want) {
        let (id, nb, sb, na, sa, next, next429, below, repeated) = w;
        assert_eq!(e["line"]["id"], id, "{e}");
        assert_eq!(e["before"]["sends"], nb, "{e}");
        assert!(close(&e["before"]["span_s"], sb), "{e}");
        assert_eq!(e["after"]["sends"], na, "{e}");
        assert!(close(&e["after"]["span_s"], sa), "{e}");
        assert_eq!(
            e["next_request_s"].as_f64().map(|v| (v * 1e3).round()),
            next.map(|v: f64| v * 1e3),
            "{e}"
        );
        assert_eq!(
            e["next_429_s"].as_f64().map(|v| (v * 1e3).round()),
            next429.map(|v: f64| v * 1e3),
            "{e}"
        );
        assert_eq!(e["stayed_below"].as_bool(), below, "{e}");
        assert_eq!(e["repeated"], repeated, "{e}");
    }
    // Each window names the lines of its sends.
    assert_eq!(ids(&episodes[0]["before"]["lines"]), ["c-1"]);
    assert_eq!(
        ids(&episodes[0]["after"]["lines"]),
        ["c-3", "c-4", "c-5", "c-7", "c-8", "c-9", "c-10"]
    );
    assert_eq!(episodes[0]["next_request"]["id"], "c-3");
    assert_eq!(episodes[3]["next_request"]["id"], "c-13");
    // A cited line is the line at that place in the file.
    let file: Vec<&str> = std::fs::read_to_string(&log)
        .map(|s| s.leak().lines().collect())
        .unwrap();
    let at = &episodes[1]["next_429"];
    let cited: Value =
        serde_json::from_str(file[at["line"].as_u64().unwrap() as usize - 1]).unwrap();
    assert_eq!(cited["id"], at["id"]);

    // The whole log names both hosts.
    let (code, out) = mannerly(&["report", log.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("d.example") && out.contains("ALL HOSTS"),
        "{out}"
    );
    let (code, out) = mannerly(
        &["report", log.to_str().unwrap(), "--host", "nowhere.example"],
        &[],
    );
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("nowhere.example"), "{out}");
}

/// The HTML page of that log: every 429 has its marker and no marker
/// covers another; every link of a figure leads to the cited line.
#[test]
fn the_html_record_shows_every_429_and_its_links_lead_to_lines() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    write_log(&log);
    let html = dir.path().join("c.html");
    let (code, out) = mannerly(
        &[
            "report",
            log.to_str().unwrap(),
            "--host",
            "c.example",
            "--html",
            html.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(!page.contains("d.example") && !page.contains("<script"));
    let Some(mut browser) = Browser::start() else {
        return;
    };
    browser.open(&format!("file://{}", html.display()));
    browser.wait_for("document.readyState === 'complete'");
    assert_markers_apart(&mut browser, "c.example", 4);
    let links = browser.eval(
        "[...document.querySelectorAll('a.line')].map(a => { const t = document.getElementById(a.getAttribute('href').slice(1)); return t ? JSON.parse(t.textContent.replace(/^\\S+ /, '')).id === a.textContent : 'missing ' + a.getAttribute('href'); })",
    );
    let links = links.as_array().unwrap();
    assert!(links.len() > 20, "{links:?}");
    assert!(links.iter().all(|l| l == true), "{links:?}");
    assert_eq!(
        browser.eval("document.querySelector('p.crawler').textContent"),
        "Crawler: agent testbot; Web Bot Auth key id kid-1"
    );
}

/// The chart of `host` has `n` 429 markers, no two of which overlap.
fn assert_markers_apart(browser: &mut Browser, host: &str, n: usize) {
    let boxes = browser.eval(&format!(
        "[...document.querySelectorAll('svg.chart[data-host=\"{host}\"] .t429')].map(m => {{ const b = m.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; }})"
    ));
    let boxes: Vec<[f64; 4]> = serde_json::from_value(boxes).unwrap();
    assert_eq!(boxes.len(), n, "{boxes:?}");
    for (i, a) in boxes.iter().enumerate() {
        assert!(a[2] - a[0] >= 4.0, "marker {i} is too small to see: {a:?}");
        for b in &boxes[i + 1..] {
            let apart = a[2] <= b[0] || b[2] <= a[0] || a[3] <= b[1] || b[3] <= a[1];
            assert!(apart, "markers overlap: {a:?} {b:?}");
        }
    }
}
