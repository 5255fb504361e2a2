//! Usage preferences in the request path: the robots step asks whether the
//! site's robots.txt refuses what the crawl declares; the learn step asks the
//! same of the response's `Content-Usage` / `Content-Signal` headers and
//! TDMRep's `tdm-reservation` / `tdm-policy`. The
//! rules are the policy crate's (`mannerly_policy::prefs`); this module only
//! turns them into stops and audit fields.

use http::{HeaderMap, HeaderValue};
use mannerly_policy::prefs::{judge_response, judge_tdm, PrefsRefusal, ResponsePreferences};
use mannerly_policy::robots::Robots;
use mannerly_policy::{AuditRecord, Outcome};

use crate::answer::{header_text, Stop};
use crate::config::Config;
use crate::error::Source;

/// The header an annotated response carries.
pub(crate) const PREFERENCES: &str = "mannerly-preferences";

/// Robots step: the site's preferences for this URL go on the audit line;
/// a declared purpose or use they refuse is the answer.
pub(crate) fn robots_refusal(
    cfg: &Config,
    robots: &Robots,
    agent: &str,
    path: &str,
    rec: &mut AuditRecord,
) -> Option<Stop> {
    let prefs = robots.preferences(agent, path);
    let record = prefs.record();
    if !record.is_empty() {
        rec.prefs = Some(record);
    }
    let refusal = prefs.refusal(&cfg.crawler.purposes, cfg.crawler.usage)?;
    let said = refusal.said();
    rec.rule = Some(said.to_string());
    let mut answer = Stop::new(
        Outcome::SignalRefused,
        Source::Policy,
        format!("robots.txt: {refusal}"),
    );
    answer = match refusal {
        PrefsRefusal::Purpose { purpose, .. } => answer.detail("purpose", purpose.as_str()),
        PrefsRefusal::Use { declared, .. } => answer.detail("use", declared.as_str()),
    };
    if let mannerly_policy::prefs::Place::RobotsLine(line) = said.place {
        answer = answer.detail("line", line.to_string());
    }
    Some(answer)
}

/// What the learn step does with a response, by its preference headers.
pub(crate) enum OnResponse {
    /// Nothing refused: pass it on.
    Pass,
    /// Refused, and `annotate` is configured: pass it on with this header.
    Annotate(HeaderValue),
    /// Refused, and `withhold` is configured: this is the client's answer.
    Withhold(Stop),
}

/// Learn step: judges a response's `Content-Usage` / `Content-Signal`
/// headers, records them on the audit line (combined with robots.txt's),
/// and says what the client gets.
pub(crate) fn judge(cfg: &Config, headers: &HeaderMap, rec: &mut AuditRecord) -> OnResponse {
    let values = |name: &str| -> Vec<&str> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect()
    };
    let (usage, signal) = (values("content-usage"), values("content-signal"));
    let (tdm, tdm_policy) = (values("tdm-reservation"), values("tdm-policy"));
    if usage.is_empty() && signal.is_empty() && tdm.is_empty() {
        return OnResponse::Pass;
    }
    let purposes = &cfg.crawler.purposes;
    let mut judged = judge_response(&usage, &signal, purposes, cfg.crawler.usage);
    let reserved = judge_tdm(&tdm, &tdm_policy, purposes);
    judged.record.merge(&reserved.record);
    judged.refusal = judged.refusal.or(reserved.refusal);
    match &mut rec.prefs {
        Some(mine) => mine.merge(&judged.record),
        None if !judged.record.is_empty() => rec.prefs = Some(judged.record.clone()),
        None => {}
    }
    let Some(refusal) = judged.refusal else {
        return OnResponse::Pass;
    };
    rec.rule = Some(refusal.said().to_string());
    match cfg.policy.response_preferences {
        ResponsePreferences::Annotate => {
            OnResponse::Annotate(header_text(&format!("refused; {refusal}")))
        }
        ResponsePreferences::Withhold => {
            let answer = Stop::new(
                Outcome::SignalRefused,
                Source::Policy,
                format!("the response is withheld: {refusal}"),
            );
            let answer = match refusal {
                PrefsRefusal::Purpose { purpose, .. } => answer.detail("purpose", purpose.as_str()),
                PrefsRefusal::Use { declared, .. } => answer.detail("use", declared.as_str()),
            };
            OnResponse::Withhold(answer)
        }
    }
}
