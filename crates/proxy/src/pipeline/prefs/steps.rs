//! The pipeline's preference steps: `tdmrep.json` before the send, the
//! answer's own preferences after it. Apart from `prefs.rs`, whose
//! judgements `request.rs` calls, so that those do not import the pipeline.

use http::{HeaderMap, Request, Response};
use hyper::body::Incoming;
use mannerly_policy::conditional::CacheEntryMeta;
use mannerly_policy::prefs::page::MetaScan;
use mannerly_policy::prefs::{ResponsePreferences, TDMREP_PATH, TDM_PURPOSES};

use super::head::{self, Prefixed};
use super::{judge, request_purposes, tdm_file_refusal, OnResponse, PREFERENCES};
use crate::answer::{failure, header_text};
use crate::hosts::robots::Unfetched;
use crate::pipeline::{Exchange, Step};

impl Exchange {
    /// Usage preferences: a response whose headers, or the robots `<meta>`
    /// of its head (read from the first `policy.meta_prefix_bytes` of an
    /// HTML body), refuse a declared purpose is withheld (neither delivered
    /// nor stored) or annotated, by config; in observe mode it passes and
    /// the line says `would`. What `tdmrep.json` refused under `annotate` is
    /// said here too; `noindex` / `nofollow` go in the decision header.
    pub(in crate::pipeline) async fn preferences(
        &mut self,
        resp: Response<Incoming>,
    ) -> Step<Response<Prefixed>> {
        let (limit, idle) = (
            self.live.policy.meta_prefix_bytes,
            self.shared.cfg.upstream.idle_timeout,
        );
        let (mut resp, meta) = head::read_meta(resp, limit, idle).await;
        self.decide_preferences(resp.headers_mut(), meta.as_ref())?;
        Ok(resp)
    }

    /// [`Exchange::preferences`] of a stored page about to be served: the
    /// store is shared by every identity of the crawl, and a page one may
    /// have is not for that alone another's.
    pub(in crate::pipeline) fn stored_preferences(
        &mut self,
        status: http::StatusCode,
        headers: &mut HeaderMap,
        body: &bytes::Bytes,
        entry: Option<&CacheEntryMeta>,
    ) -> Step<()> {
        let limit = self.live.policy.meta_prefix_bytes;
        let meta = head::stored_meta(status, headers, body, limit, entry);
        self.decide_preferences(headers, meta.as_ref())
    }

    /// Judges a response's head (and `<meta>`), and says so: the decision
    /// header's `robots=`, `Mannerly-Preferences`, or the refusal.
    fn decide_preferences(&mut self, headers: &mut HeaderMap, meta: Option<&MetaScan>) -> Step<()> {
        let judged = judge(&self.live, headers, meta, &mut self.rec);
        if let Some(p) = self.rec.prefs.as_ref().filter(|p| !p.directives.is_empty()) {
            self.said.push(("robots", p.directives.join(",")));
        }
        let ours = match judged {
            OnResponse::Pass => None,
            OnResponse::Annotate(value) => Some(value),
            OnResponse::Withhold(stop) => {
                self.enforced(Some(stop))?;
                None
            }
        };
        let notes = [self.annotation.clone(), ours];
        if notes.iter().any(Option::is_some) {
            // Only ours: an origin's field of that name would pass for one.
            headers.remove(PREFERENCES);
            for value in notes.into_iter().flatten() {
                headers.append(PREFERENCES, value);
            }
        }
        Ok(())
    }

    /// Step 1b: TDMRep's `/.well-known/tdmrep.json`, fetched, cached and
    /// paced as robots.txt is, but only for a crawl that declares a purpose
    /// a reservation refuses (`ai-train`, `ai-input`): a plain crawl pays no
    /// extra request per origin. A reservation (or a file that cannot be
    /// read) is answered before anything is sent with `withhold`, passed on
    /// with `Mannerly-Preferences` with `annotate`, recorded as `would` in
    /// observe mode.
    pub(in crate::pipeline) async fn tdmrep<B>(&mut self, req: &Request<B>) -> Step<()> {
        let live = self.live.clone();
        let declared = request_purposes(&live, &self.rec)
            .iter()
            .any(|p| TDM_PURPOSES.contains(p));
        let path = req.uri().path();
        let own = mannerly_policy::url::is_robots_txt(path) || path == TDMREP_PATH;
        if !declared || own {
            return Ok(());
        }
        let fetched = self.site_file(|s| &s.tdmrep, req).await;
        let (shared, host) = (&self.shared, &self.target.host);
        let refusal = match fetched {
            Ok(rules) => {
                let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
                tdm_file_refusal(&live, &rules, path, &mut self.rec)
            }
            Err(Unfetched::Budget(r)) => {
                let by = shared.throttled_by.get(&shared.budgets.group(host).key);
                let why = "tdmrep.json cannot be fetched: ";
                return self.enforced(Some(failure::budget(&r, why, by.as_deref())));
            }
            Err(Unfetched::Stopped(stop)) => return Err(stop),
        };
        match refusal {
            Some((_, note))
                if live.policy.response_preferences == ResponsePreferences::Annotate =>
            {
                self.annotation = Some(header_text(&note));
                Ok(())
            }
            refusal => self.enforced(refusal.map(|(stop, _)| stop)),
        }
    }
}
