//! The admin listener's answers: a body with its type, never stored, and
//! errors as JSON. Apart from the routes, which the well-known pages share.

use bytes::Bytes;
use http::{header, Response, StatusCode};
use http_body_util::Full;
use serde::Serialize;

pub(super) type Answer = Response<Full<Bytes>>;

pub(super) fn answer(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Answer {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    h.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    r
}

pub(super) fn json(status: StatusCode, v: &impl Serialize) -> Answer {
    match serde_json::to_vec_pretty(v) {
        Ok(b) => answer(status, "application/json", b),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

pub(super) fn error(status: StatusCode, why: &str) -> Answer {
    let body = serde_json::json!({ "error": why });
    answer(status, "application/json", body.to_string())
}
