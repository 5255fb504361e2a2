//! One request per resource at a time (cbcp-01 §3: "no concurrent requests
//! to the same resource"; squid's `collapsed_forwarding`): identical GETs or
//! HEADs in flight together reach the origin once. The first is the
//! flight; the others wait for its answer and get a copy, each with its own
//! line (`collapsed`, `collapsed_into` naming the first).
//!
//! Identical is the same method, the same cache key and the same request
//! fields (hop-by-hop and proxy fields aside), with nothing private: the
//! caller only asks for requests the store's rules admit (no
//! Authorization, no Cookie) and without a body of their own.
//!
//! # Failure
//!
//! A flight whose walk ends without an answer of the origin's (a refusal,
//! a timeout), whose answer is meant for one client (`Set-Cookie`,
//! `private`, `no-store`), or whose body breaks or is larger than the
//! store's `max_body`, lands nothing: its waiters go on by themselves, the
//! first of them as a new flight. A waiter never waits past its own hold.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http::{HeaderMap, Method, Response, StatusCode};
use http_body::Body;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::body::{boxed, ProxyBody};
use crate::cache::Tee;

/// What makes two requests the same request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct FlightKey {
    method: Method,
    key: String,
    fields: Vec<(String, Vec<u8>)>,
}

impl FlightKey {
    /// The key of a request whose cache key is `key`, or `None` when it
    /// may not share: another method than GET/HEAD, or a body.
    pub(crate) fn of(method: &Method, key: &str, headers: &HeaderMap) -> Option<FlightKey> {
        if method != Method::GET && method != Method::HEAD {
            return None;
        }
        let has_body = headers.contains_key(http::header::TRANSFER_ENCODING)
            || headers
                .get(http::header::CONTENT_LENGTH)
                .is_some_and(|v| v.as_bytes() != b"0");
        if has_body {
            return None;
        }
        let mut fields: Vec<(String, Vec<u8>)> = headers
            .iter()
            .filter(|(name, _)| {
                let n = name.as_str();
                !n.starts_with("proxy-")
                    && !matches!(n, "connection" | "keep-alive" | "te" | "via" | "upgrade")
            })
            .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
            .collect();
        fields.sort();
        Some(FlightKey {
            method: method.clone(),
            key: key.to_owned(),
            fields,
        })
    }
}

/// An answer a flight brought back, as its waiters get it.
#[derive(Debug)]
pub(crate) struct Landed {
    /// The first request's audit id.
    pub(crate) id: String,
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

#[derive(Clone, Debug)]
enum State {
    Flying,
    Landed(Arc<Landed>),
    Lost,
}

/// The requests in flight that others may wait for.
pub(crate) struct Flights {
    flying: Mutex<HashMap<FlightKey, watch::Receiver<State>>>,
    max_body: usize,
}

/// How a request goes: as a flight of its own (`None` when it may not be
/// shared), or with the answer of an identical one.
pub(crate) enum Joined {
    Alone(Option<Flight>),
    Shared(Arc<Landed>),
}

/// A request others wait for; what it lands is theirs too.
pub(crate) struct Flight {
    flights: Arc<Flights>,
    key: FlightKey,
    tx: watch::Sender<State>,
}

impl Flights {
    pub(crate) fn new(max_body: u64) -> Arc<Flights> {
        Arc::new(Flights {
            flying: Mutex::new(HashMap::new()),
            max_body: usize::try_from(max_body).unwrap_or(usize::MAX),
        })
    }

    /// Takes off with `key`, or waits (until `deadline` at most) for the
    /// identical request already in flight.
    pub(crate) async fn join(
        self: &Arc<Self>,
        key: Option<FlightKey>,
        deadline: Instant,
    ) -> Joined {
        let Some(key) = key else {
            return Joined::Alone(None);
        };
        loop {
            let waiting = {
                let mut flying = self.flying.lock().unwrap_or_else(PoisonError::into_inner);
                match flying.get(&key) {
                    Some(rx) if matches!(*rx.borrow(), State::Flying) => rx.clone(),
                    _ => {
                        let (tx, rx) = watch::channel(State::Flying);
                        flying.insert(key.clone(), rx);
                        let flights = self.clone();
                        return Joined::Alone(Some(Flight { flights, key, tx }));
                    }
                }
            };
            let mut rx = waiting;
            let landed = rx.wait_for(|s| !matches!(s, State::Flying));
            let state = match tokio::time::timeout_at(deadline, landed).await {
                // Out of hold: the request goes alone, as it would have.
                Err(_) => return Joined::Alone(None),
                Ok(Ok(state)) => state.clone(),
                Ok(Err(_)) => State::Lost,
            };
            match state {
                State::Landed(page) => return Joined::Shared(page),
                // Lost: the next flight may be this one.
                State::Flying | State::Lost => continue,
            }
        }
    }

    /// Flights in the air now (for tests and metrics).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.flying
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl Flight {
    /// The flight's answer, which also lands for its waiters once its body
    /// has been read whole (copied on its way by the store's [`Tee`]).
    pub(crate) fn land(self, resp: Response<ProxyBody>, id: String) -> Response<ProxyBody> {
        if private(resp.headers()) {
            // Dropped: the waiters ask for their own.
            return resp;
        }
        let (parts, body) = resp.into_parts();
        let (status, headers) = (parts.status, parts.headers.clone());
        let landed = move |body| Landed {
            id,
            status,
            headers,
            body,
        };
        if body.is_end_stream() {
            // hyper polls no more once a body says it has ended.
            self.done(State::Landed(Arc::new(landed(Bytes::new()))));
            return Response::from_parts(parts, body);
        }
        let max = u64::try_from(self.flights.max_body).unwrap_or(u64::MAX);
        let (tee, copy) = Tee::new(body, max);
        tokio::spawn(async move {
            // Nothing when the body broke or grew past `max`: dropped, the
            // flight lands nothing.
            if let Ok(chunks) = copy.await {
                let body = Bytes::from(chunks.concat());
                self.done(State::Landed(Arc::new(landed(body))));
            }
        });
        Response::from_parts(parts, boxed(tee))
    }

    fn done(&self, state: State) {
        let mut flying = self
            .flights
            .flying
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if flying
            .get(&self.key)
            .is_some_and(|rx| rx.same_channel(&self.tx.subscribe()))
        {
            flying.remove(&self.key);
        }
        drop(flying);
        self.tx.send_replace(state);
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        if matches!(*self.tx.borrow(), State::Flying) {
            self.done(State::Lost);
        }
    }
}

/// An answer meant for one client only: it sets a cookie, or says it is
/// private or not to be stored (squid shares only what it could cache,
/// and once shared private answers by mistake: CVE-2016-10002).
fn private(headers: &HeaderMap) -> bool {
    headers.contains_key(http::header::SET_COOKIE)
        || headers
            .get_all(http::header::CACHE_CONTROL)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|d| {
                d.trim()
                    .split('=')
                    .next()
                    .unwrap_or("")
                    .to_ascii_lowercase()
            })
            .any(|d| d == "private" || d == "no-store")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::full;
    use http_body_util::BodyExt;

    fn key(path: &str) -> Option<FlightKey> {
        let mut h = HeaderMap::new();
        h.insert("user-agent", "bot/1".parse().unwrap());
        FlightKey::of(&Method::GET, path, &h)
    }

    /// A flight of `/a` with `max_body`, one request waiting for it, and
    /// what the waiter got once `resp` has landed (its body read whole).
    // The hold's deadline is the only time read, once, from the real clock.
    #[allow(clippy::disallowed_methods)]
    async fn waiter_of(max_body: u64, resp: Response<ProxyBody>) -> (Joined, Arc<Flights>) {
        let flights = Flights::new(max_body);
        let deadline = Instant::now() + std::time::Duration::from_secs(5);
        let Joined::Alone(Some(flight)) = flights.join(key("/a"), deadline).await else {
            panic!("the first request flies")
        };
        assert!(matches!(
            flights.join(key("/b"), deadline).await,
            Joined::Alone(Some(_))
        ));
        let f2 = flights.clone();
        let waiter = tokio::spawn(async move { f2.join(key("/a"), deadline).await });
        tokio::task::yield_now().await;
        let resp = flight.land(resp, "id-1".into());
        resp.into_body().collect().await.unwrap();
        (waiter.await.unwrap(), flights)
    }

    #[tokio::test]
    async fn waiters_get_the_flights_answer_once_its_body_is_whole() {
        let (joined, flights) = waiter_of(1024, Response::new(full("page"))).await;
        let Joined::Shared(page) = joined else {
            panic!("the waiter shares")
        };
        assert_eq!((page.id.as_str(), &page.body[..]), ("id-1", &b"page"[..]));
        assert_eq!(flights.len(), 0);
    }

    #[tokio::test]
    async fn a_body_over_the_cap_lets_its_waiter_fly_and_a_post_never_shares() {
        let (joined, _) = waiter_of(2, Response::new(full("page"))).await;
        assert!(matches!(joined, Joined::Alone(Some(_))));
        let post = FlightKey::of(&Method::POST, "/a", &HeaderMap::new());
        assert!(post.is_none());
    }

    #[tokio::test]
    async fn an_answer_that_sets_a_cookie_or_is_private_is_never_shared() {
        for (name, value) in [
            ("set-cookie", "s=1"),
            ("cache-control", "max-age=0, Private"),
        ] {
            let mut resp = Response::new(full("mine"));
            resp.headers_mut().insert(name, value.parse().unwrap());
            let (joined, _) = waiter_of(1024, resp).await;
            assert!(matches!(joined, Joined::Alone(Some(_))), "{name}");
        }
    }
}
