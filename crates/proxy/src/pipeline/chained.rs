//! Step 5 behind a parent proxy (`upstream.proxy`): whose answer came back.
//! The parent's own refusal or failure ends the walk as the parent's error,
//! and the permit is dropped unused, so the target's budget learns nothing
//! from it; a target status carried in `upstream.status_header` is what the
//! budget learns from.

use http::Response;
use hyper::body::Incoming;
use mannerly_policy::parent::ParentVerdict;

use super::{Exchange, Step};
use crate::answer::failure;

impl Exchange {
    pub(super) fn through_parent(&mut self, resp: Response<Incoming>) -> Step<Response<Incoming>> {
        self.rec.target_status = None;
        let client = &self.shared.client;
        let Some(parent) = client.parent_serving(&self.target.host, self.target.port) else {
            return Ok(resp);
        };
        // Judged alike over plain HTTP and inside a CONNECT tunnel: a
        // provider that intercepts TLS answers there with its own headers.
        match parent.judge(resp.status().as_u16(), resp.headers()) {
            ParentVerdict::Target {
                status,
                from_header,
            } => {
                if from_header {
                    self.rec.target_status = Some(status);
                }
                Ok(resp)
            }
            ParentVerdict::Parent { why } => Err(failure::parent(&why)),
        }
    }
}
