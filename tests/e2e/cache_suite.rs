//! The public HTTP cache test suite (the suite of cache-tests.fyi) through
//! the real binary, in both store modes, in two versions:
//! - the npm package `http-cache-tests` 0.4.5, whose tests are an older
//!   state of the suite (its `tests/age-parse.mjs` is the repository's of
//!   October 2020, before the Age tests were turned round to RFC 9111 §5.1;
//!   docs/store.md says which tests that decides);
//! - the repository itself (github.com/http-tests/cache-tests) at
//!   [`GIT_COMMIT`], the suite cache-tests.fyi publishes results of, with
//!   the interim-response (1xx) tests. `.ci/run` checks it out.
//!
//! `cache_tests/run.mjs` runs either: the suite's origin on loopback, its
//! client through the proxy with undici's `ProxyAgent` in absolute form.
//! Each test's result is compared with `cache_tests/expected.json` (npm)
//! or `expected-git.json`, so a test that stops passing fails here, and
//! one that starts passing too, until the file says so; a test whose pass
//! would mean a `Set-Cookie` was replayed may never pass, nor be expected
//! to (`replays_set_cookie`). Every recorded failure carries its reason
//! under the file's `reasons` (per mode, by family of test ids: the RFC
//! 9111 section the test checks and why mannerly differs, or the suite's
//! known disagreement); one without is refused (`reasons_missing`), and so
//! is a reason that no longer explains a failure. To record a change:
//! `CACHE_TESTS_WRITE=1` rewrites it from the run, `CACHE_TESTS_WRITE=add`
//! adds what a run saw to it. The `304-etag-update-response-*` tests pause
//! between requests and race their own `max-age`; with `serve_fresh` on,
//! their setup fails now and then on a busy machine, so the file allows
//! `pass|setup` for those, and for nothing else. A setup failure is no
//! verdict on the cache (the suite counts it as neither pass nor fail).
//!
//! The budget is out of the way (`policy.enforce = false`): the suite
//! answers 429s and 503s on purpose, and sends a hundred tests at once to
//! one origin; what is measured here is the store.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::support::*;

const SUITE: &str = "http-cache-tests@0.4.5";
const UNDICI: &str = "undici@7.30.2";
const EXPECTED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/e2e/cache_tests/expected.json"
);
const EXPECTED_GIT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/e2e/cache_tests/expected-git.json"
);
/// The commit of github.com/http-tests/cache-tests run (July 2026).
const GIT_COMMIT: &str = "b55b8bda3dbb8c927c04e85bd8d496a8caa3e4ba";

/// The suite and undici, installed once into cargo's test temp dir (`.ci/run`
/// installs them there first). `None` (skipped) without node or npm, or when
/// the install fails outside CI.
fn suite_dir() -> Option<PathBuf> {
    if !have_tool("node", "nodejs") || !have_tool("npm", "npm") {
        return None;
    }
    // The four suite tests run at once: one installs, the others wait for
    // it rather than run node on a half-written node_modules.
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("http-cache-tests");
    let package = dir.join("node_modules/http-cache-tests");
    if package.join("package.json").exists() && dir.join("node_modules/undici").exists() {
        return Some(package);
    }
    npm_install(&dir, &[SUITE, UNDICI]).then_some(package)
}

/// The repository's tests (vendored in `tests/e2e/cache_tests/repo`),
/// copied beside the npm package so that they find the same undici.
fn git_dir() -> Option<PathBuf> {
    suite_dir()?;
    static COPY: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = COPY.lock().unwrap_or_else(|e| e.into_inner());
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("http-cache-tests/git");
    if !dir.join("test-engine/client/runner.mjs").exists() {
        let vendored = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/cache_tests/repo");
        let _ = std::fs::remove_dir_all(&dir);
        let copied = std::process::Command::new("cp")
            .arg("-r")
            .arg(&vendored)
            .arg(&dir)
            .status();
        assert!(
            copied.is_ok_and(|s| s.success()),
            "copying {} to {} (github.com/http-tests/cache-tests at {GIT_COMMIT})",
            vendored.display(),
            dir.display()
        );
    }
    Some(dir)
}

/// Test id → result (`pass`, `fail`, `setup`, `dependency`), and the kinds.
type Results = BTreeMap<String, (String, String)>;

fn run_suite(package: &Path, serve_fresh: &str) -> Results {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("MANNERLY_CACHE__SERVE_FRESH", serve_fresh),
        ("MANNERLY_POLICY__ENFORCE", "false"),
        ("MANNERLY_BUDGET__QUEUE_LIMIT", "10000"),
    ];
    let proxy = RunningBinary::start(dir.path(), &env);
    let results = dir.path().join("results.json");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e/cache_tests/run.mjs");
    let out = std::process::Command::new("node")
        .arg(script)
        .env("CACHE_TESTS", package)
        .env("PROXY", format!("http://{}", proxy.addr))
        .env("RESULTS", &results)
        .output()
        .unwrap();
    drop(proxy);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&results).unwrap()).unwrap();
    json.as_object()
        .unwrap()
        .iter()
        .map(|(id, r)| {
            let field = |k: &str| r[k].as_str().unwrap().to_string();
            (id.clone(), (field("kind"), field("result")))
        })
        .collect()
}

/// `kind/result` → count, as the report gives them.
fn counts(results: &Results) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for (kind, result) in results.values() {
        *out.entry(format!("{kind}/{result}")).or_default() += 1;
    }
    out
}

fn check_mode(package: Option<PathBuf>, file: &str, mode: &str, serve_fresh: &str) {
    let Some(package) = package else {
        return;
    };
    let unexplained = reasons_missing(&read_expected(file));
    assert!(
        unexplained.is_empty(),
        "{file}:\n{}",
        unexplained.join("\n")
    );
    let got = run_suite(&package, serve_fresh);
    eprintln!("{mode}: {:?}", counts(&got));
    let mut expected = read_expected(file);
    if let Some(how) = std::env::var_os("CACHE_TESTS_WRITE") {
        // `add`: keep what other runs saw too (a test whose setup depends
        // on timing passes in one run and cannot be set up in another).
        let before = expected[mode].clone();
        let map: serde_json::Map<String, serde_json::Value> = got
            .iter()
            .map(|(id, (_, result))| {
                let mut seen: Vec<&str> = vec![result];
                if how == "add" {
                    let old = before[id].as_str().unwrap_or(result);
                    seen.extend(old.split('|'));
                }
                seen.sort();
                seen.dedup();
                (id.clone(), seen.join("|").into())
            })
            .collect();
        expected[mode] = map.into();
        let text = serde_json::to_string_pretty(&expected).unwrap();
        std::fs::write(file, text + "\n").unwrap();
        return;
    }
    let want = expected[mode]
        .as_object()
        .expect("expectations for the mode");
    let mut changed = Vec::new();
    for (id, w) in want {
        let w = w.as_str().unwrap_or_default();
        if replays_set_cookie(id) && w.split('|').any(|r| r == "pass") {
            changed.push(format!(
                "{id}: {file} allows it to pass, which would mean a Set-Cookie was replayed"
            ));
        }
    }
    for (id, (kind, result)) in &got {
        let w = want.get(id).and_then(|v| v.as_str());
        let seen: Vec<&str> = w.map_or(Vec::new(), |w| w.split('|').collect());
        if replays_set_cookie(id) && result == "pass" {
            changed.push(format!(
                "{id} ({kind}): passed: a response's Set-Cookie was replayed"
            ));
            continue;
        }
        // Any result the file does not hold is a change: a test that
        // stops passing is a regression, and one that starts passing (or
        // fails where it could not be set up) must be recorded, so the file
        // says what the proxy does. Under load a test that races its own
        // max-age cannot be set up, which the suite counts as neither: that
        // alone is no change.
        let recorded = seen.contains(&result.as_str()) || (result == "setup" && w.is_some());
        if !recorded {
            changed.push(format!("{id} ({kind}): expected {w:?}, got {result}"));
        }
    }
    for id in want.keys().filter(|id| !got.contains_key(*id)) {
        changed.push(format!("{id}: expected, not run"));
    }
    assert!(
        changed.is_empty(),
        "{mode}: results differ from {file} (if the change is meant, \
         rerun with CACHE_TESTS_WRITE=1):\n{}",
        changed.join("\n")
    );
}

fn read_expected(file: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(file).unwrap_or_else(|_| "{}".into());
    serde_json::from_str(&text).unwrap()
}

/// What is wrong with the file's `reasons`: each mode's map from a family
/// of test ids (a prefix; the longest that fits wins) to why mannerly
/// fails those tests, with the RFC 9111 section or the suite's known
/// disagreement. A recorded failure with no reason says nothing about the
/// proxy, and a reason no recorded failure falls under is one left behind.
fn reasons_missing(expected: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    let Some(modes) = expected.as_object() else {
        return vec!["not a JSON object".into()];
    };
    for (mode, results) in modes.iter().filter(|(m, _)| *m != "reasons") {
        let reasons = expected["reasons"][mode].as_object();
        let mut used = std::collections::BTreeSet::new();
        let failing = results.as_object().into_iter().flatten().filter(|(_, w)| {
            w.as_str()
                .is_some_and(|w| w.split('|').any(|r| r == "fail"))
        });
        for (id, _) in failing {
            let family = reasons
                .into_iter()
                .flatten()
                .filter(|(prefix, _)| id.starts_with(prefix.as_str()))
                .max_by_key(|(prefix, _)| prefix.len());
            match family {
                Some((prefix, why)) if why.as_str().is_some_and(|w| !w.trim().is_empty()) => {
                    used.insert(prefix.clone());
                }
                _ => out.push(format!(
                    "{mode}: {id} is recorded as failing with no reason"
                )),
            }
        }
        for prefix in reasons.into_iter().flatten().map(|(p, _)| p) {
            if !used.contains(prefix) {
                out.push(format!(
                    "{mode}: the reason for {prefix:?} explains no recorded failure"
                ));
            }
        }
    }
    out
}

/// Tests whose pass means a stored response's `Set-Cookie` reached
/// another request: mannerly never stores one (DESIGN: conditional
/// requests), so such a pass is a defect, never an expectation.
fn replays_set_cookie(id: &str) -> bool {
    id == "other-set-cookie" || id.ends_with("-Set-Cookie")
}

#[test]
fn every_recorded_failure_carries_its_reason() {
    for file in [EXPECTED, EXPECTED_GIT] {
        let unexplained = reasons_missing(&read_expected(file));
        assert!(
            unexplained.is_empty(),
            "{file}:\n{}",
            unexplained.join("\n")
        );
    }
}

#[test]
fn a_failure_without_a_reason_is_refused() {
    let expected = serde_json::json!({
        "reasons": {"serve_fresh=false": {"freshness-": "RFC 9111 §4.2.1: asked each time"}},
        "serve_fresh=false": {
            "freshness-max-age": "fail",
            "vary-match": "fail|pass",
            "other-cookie": "pass",
        },
        "serve_fresh=true": {"stale-503": "fail"},
    });
    assert_eq!(
        reasons_missing(&expected),
        [
            "serve_fresh=false: vary-match is recorded as failing with no reason",
            "serve_fresh=true: stale-503 is recorded as failing with no reason",
        ]
    );
    let mut blank = expected.clone();
    blank["reasons"]["serve_fresh=false"]["freshness-"] = " ".into();
    assert!(reasons_missing(&blank).contains(
        &"serve_fresh=false: freshness-max-age is recorded as failing with no reason".to_string()
    ));
    let mut stray = expected;
    stray["reasons"]["serve_fresh=true"] = serde_json::json!({"stale-": "§4.2.4", "vary-": "§4.1"});
    stray["serve_fresh=false"]["vary-match"] = "pass".into();
    assert_eq!(
        reasons_missing(&stray),
        ["serve_fresh=true: the reason for \"vary-\" explains no recorded failure"]
    );
}

#[test]
fn the_public_cache_test_suite_revalidating() {
    check_mode(suite_dir(), EXPECTED, "serve_fresh=false", "false");
}

#[test]
fn the_public_cache_test_suite_serving_fresh() {
    check_mode(suite_dir(), EXPECTED, "serve_fresh=true", "true");
}

#[test]
fn the_cache_test_repository_revalidating() {
    check_mode(git_dir(), EXPECTED_GIT, "serve_fresh=false", "false");
}

#[test]
fn the_cache_test_repository_serving_fresh() {
    check_mode(git_dir(), EXPECTED_GIT, "serve_fresh=true", "true");
}
