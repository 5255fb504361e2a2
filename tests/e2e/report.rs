//! `mannerly report` against a hand-made audit log whose figures are known,
//! and its HTML page in headless Chromium.

use mannerly_policy::{chain_line, GENESIS};
use serde_json::{json, Value};

use super::browser::Browser;
use super::support::*;

/// (second after 12:00:00, host, outcome, status, pause_s, saved_bytes)
type Row = (
    u32,
    &'static str,
    &'static str,
    Option<u16>,
    Option<f64>,
    Option<u64>,
);

/// A log as written before lines had `sent` (sends timed by arrival).
/// a.example: five sends at 1/s draw a 429 (pause 10 s); after the pause
/// the crawler goes back to 1/s and draws a second 429; then it sends at
/// 0.5/s and draws a third, which opens the breaker. One
/// request refused during the first pause, two by the breaker, one by
/// robots.txt, one revalidation saving 1000 bytes, then an operator reset.
/// b.example: robots.txt answers 503, two requests refused for it.
const ROWS: &[Row] = &[
    (0, "a.example", "robots_fetched", Some(200), None, None),
    (0, "a.example", "fetched", Some(200), None, None),
    (1, "a.example", "fetched", Some(200), None, None),
    (2, "a.example", "fetched", Some(200), None, None),
    (3, "a.example", "fetched", Some(200), None, None),
    (4, "a.example", "fetched", Some(200), None, None),
    (5, "a.example", "throttled", Some(429), Some(10.0), None),
    (6, "a.example", "paused", Some(429), None, None),
    (15, "a.example", "fetched", Some(200), None, None),
    (16, "a.example", "fetched", Some(200), None, None),
    (17, "a.example", "fetched", Some(200), None, None),
    (18, "a.example", "fetched", Some(200), None, None),
    (19, "a.example", "throttled", Some(429), Some(10.0), None),
    (29, "a.example", "fetched", Some(200), None, None),
    (31, "a.example", "revalidated", Some(200), None, Some(1000)),
    (33, "a.example", "fetched", Some(200), None, None),
    (35, "a.example", "fetched", Some(200), None, None),
    (37, "a.example", "throttled", Some(429), Some(300.0), None),
    (38, "a.example", "breaker_open", Some(429), None, None),
    (39, "a.example", "breaker_open", Some(429), None, None),
    (40, "a.example", "disallowed", Some(403), None, None),
    (41, "a.example", "operator_reset", Some(200), None, None),
    (50, "b.example", "robots_fetched", Some(503), None, None),
    (51, "b.example", "robots_unavailable", Some(503), None, None),
    (52, "b.example", "robots_unavailable", Some(503), None, None),
];

fn write_log(path: &std::path::Path) -> Vec<String> {
    let mut prev = GENESIS.to_string();
    let mut lines = Vec::new();
    for (i, &(t, host, outcome, status, pause_s, saved)) in ROWS.iter().enumerate() {
        let rec = json!({
            "ts": format!("2025-01-31T12:00:{t:02}.000Z"),
            "id": format!("x-{i}"),
            "client": "127.0.0.1:5000",
            "method": "GET",
            "url": format!("http://{host}/p{i}"),
            "host": host,
            "outcome": outcome,
            "status": status,
            "rate": 1.0,
            "pause_s": pause_s,
            "saved_bytes": saved,
        });
        let (line, chain) = chain_line(&prev, &rec.to_string());
        prev = chain;
        lines.push(line);
    }
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
    lines
}

fn row<'a>(out: &'a str, host: &str) -> Vec<&'a str> {
    out.lines()
        .find(|l| l.starts_with(host))
        .unwrap_or_else(|| panic!("no row for {host} in\n{out}"))
        .split_whitespace()
        .collect()
}

#[test]
fn the_report_of_a_hand_made_log_has_the_known_figures() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    write_log(&log);
    let (code, out) = mannerly(&["report", log.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("audit.jsonl: 25 lines, chain intact"), "{out}");
    assert!(
        out.contains("period: 2025-01-31 12:00:00 to 2025-01-31 12:00:52 UTC"),
        "{out}"
    );
    // HOST REQUESTS SENT ROBOTS 429s SLOWED REPEAT BREAKER NEXT429 MIN429 REVAL% SAVED
    // A log from before lines had `sent`: sends are timed by arrival.
    // robots.txt is a send too (the origin counts it). The 429 at 5 s was
    // drawn at 6 sends in 5 s (1.2/s) and followed by 10 in 32 s; the one
    // at 19 s by 11 in 19 s, then 5 in 18 s; the one at 37 s has no whole
    // minute after it in the log, so whether the pace stayed below is
    // unknown. Breaker: one run of refusals.
    assert_eq!(
        row(&out, "a.example"),
        [
            "a.example",
            "20",
            "17",
            "1",
            "3",
            "2/2",
            "0",
            "1",
            "16.0s",
            "14.0s",
            "7.7",
            "1000"
        ]
    );
    assert_eq!(
        row(&out, "b.example"),
        [
            "b.example",
            "2",
            "1",
            "2",
            "0",
            "0/0",
            "0",
            "0",
            "-",
            "-",
            "-",
            "0"
        ]
    );
    assert_eq!(
        row(&out, "ALL HOSTS"),
        ["ALL", "HOSTS", "22", "18", "3", "3", "2/2", "0", "1", "16.0s", "14.0s", "7.7", "1000"]
    );

    // --since: only what happened from 12:00:30 on.
    let (code, out) = mannerly(
        &[
            "report",
            log.to_str().unwrap(),
            "--since",
            "2025-01-31T12:00:30Z",
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}");
    assert_eq!(row(&out, "a.example")[1], "7");
    // The chain is still checked over the whole file.
    assert!(out.contains("25 lines, chain intact"), "{out}");
}

#[test]
fn an_edited_log_is_reported_with_the_line_and_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let mut lines = write_log(&log);
    lines[7] = lines[7].replace("\"paused\"", "\"fetched\"");
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let (code, out) = mannerly(&["report", log.to_str().unwrap()], &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("audit.jsonl: 25 lines, line 8: chain does not match"),
        "{out}"
    );
    let (code, out) = mannerly(&["report", "/nonexistent/audit.jsonl"], &[]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("/nonexistent/audit.jsonl"), "{out}");
}

#[test]
fn the_html_report_renders_one_chart_per_host_in_chromium() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    write_log(&log);
    let html = dir.path().join("report.html");
    let (code, out) = mannerly(
        &[
            "report",
            log.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(!page.contains("<script"), "the report needs no JavaScript");
    assert!(!page.contains("src=\"http") && !page.contains("href=\"http"));
    let Some(mut browser) = Browser::start() else {
        return;
    };
    // JavaScript off: what a reader without it sees.
    browser.open("about:blank");
    browser.call(
        "Emulation.setScriptExecutionDisabled",
        json!({ "value": true }),
    );
    browser.call("Page.enable", json!({}));
    browser.call(
        "Page.navigate",
        json!({ "url": format!("file://{}", html.display()) }),
    );
    browser.call(
        "Emulation.setScriptExecutionDisabled",
        json!({ "value": false }),
    );
    let charts = browser.wait_for(
        "document.readyState === 'complete' && document.querySelectorAll('svg.chart').length",
    );
    assert_eq!(charts, Value::from(2));
    let hosts = browser.eval(
        "[...document.querySelectorAll('svg.chart')].map(s => s.dataset.host + ':' + (s.getBoundingClientRect().width > 100))",
    );
    assert_eq!(hosts, json!(["a.example:true", "b.example:true"]));
    // The three 429s of a.example are marked on its chart, the pauses shaded.
    let marks = browser
        .eval("document.querySelectorAll('svg.chart[data-host=\"a.example\"] .t429').length");
    assert_eq!(marks, Value::from(3));
    let paused = browser.eval(
        "document.querySelectorAll('svg.chart[data-host=\"a.example\"] rect.paused').length > 0",
    );
    assert_eq!(paused, Value::Bool(true));
    assert_eq!(
        browser.eval("document.querySelector('#chain li').className"),
        "ok"
    );
    if let Some(dir) = std::env::var_os("MANNERLY_SCREENSHOTS") {
        browser.screenshot(&std::path::Path::new(&dir).join("report.png"));
    }
}
