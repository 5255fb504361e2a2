//! What the proxy accepts from a client before a request walks the
//! pipeline: who may connect and how much they may hold, the checks every
//! request head gets, proxy authentication, and the request body on its way
//! to the origin. Nothing here reaches an origin or the shared state.

pub(crate) mod auth;
pub(crate) mod body;
pub(crate) mod heads;
pub(crate) mod intake;
pub(crate) mod interim;
pub(crate) mod limits;
