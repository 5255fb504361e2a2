//! Hand-built request and response heads for the conditional-request tests.

use mannerly_policy::conditional::http::{request, response, Method, Request, Response};

/// A GET for `uri` with these header lines.
pub fn get(uri: &str, headers: &[(&str, &str)]) -> request::Parts {
    let mut b = Request::builder().method(Method::GET).uri(uri);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(()).unwrap().into_parts().0
}

/// A response head with this status and these header lines.
pub fn resp(status: u16, headers: &[(&str, &str)]) -> response::Parts {
    let mut b = Response::builder().status(status);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(()).unwrap().into_parts().0
}
