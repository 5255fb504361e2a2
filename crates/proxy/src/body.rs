//! The one boxed body type of everything the proxy sends, and its
//! constructors. The audited body that writes a request's line when its
//! answer ends is `audit::AuditedBody`.

use bytes::Bytes;
use http_body::Body;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};

/// Errors inside bodies.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body of every request and response the proxy sends.
pub(crate) type ProxyBody = BoxBody<Bytes, BoxError>;

/// A body with fixed contents.
pub(crate) fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// An empty body.
pub(crate) fn empty() -> ProxyBody {
    Empty::new().map_err(|never| match never {}).boxed()
}

/// Boxes any body whose error converts to [`BoxError`].
pub(crate) fn boxed<B>(body: B) -> ProxyBody
where
    B: Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed()
}
