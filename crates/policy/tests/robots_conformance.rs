//! Every case of the shared RFC 9309 conformance file (converted from Google's
//! robots.txt test suite) must give its `rfc9309_allowed` answer.

use mannerly_policy::robots::Robots;
use serde::Deserialize;

#[path = "support/conformance.rs"]
mod conformance;

#[derive(Deserialize)]
struct Case {
    id: String,
    robots: String,
    user_agent: String,
    url: String,
    rfc9309_allowed: Option<bool>,
}

#[test]
fn google_cases_agree_with_rfc9309() {
    let Some(cases) = conformance::cases::<Case>("robots-google.json") else {
        return;
    };

    assert_eq!(cases.len(), 145, "cases in robots-google.json");
    let mut checked = 0;
    let mut failures = Vec::new();
    for case in &cases {
        let Some(expected) = case.rfc9309_allowed else {
            continue;
        };
        checked += 1;
        let robots = Robots::parse(case.robots.as_bytes());
        let verdict = robots.check(&case.user_agent, &case.url);
        if verdict.allowed != expected {
            failures.push(format!(
                "{} (expected allowed={expected}, got {verdict})",
                case.id
            ));
        }
    }

    assert!(
        failures.is_empty(),
        "{} of {checked} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(
        checked, 144,
        "cases checked (145 minus the one with rfc9309_allowed = null)"
    );
}
