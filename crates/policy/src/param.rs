//! The one shape of a configuration value that cannot be used: its full
//! dotted key and what is wrong with the value.

/// A parameter that makes no sense, named by its config key
/// (`budget.max_rate`, `robots.max_age_secs`, `cache.max_body`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {why}")]
pub struct ParamError {
    /// The full config key, e.g. `budget.hosts."example.org".burst`.
    pub key: String,
    /// What is wrong with its value; does not repeat the key.
    pub why: String,
}

impl ParamError {
    /// An error for `key`.
    pub fn new(key: impl Into<String>, why: impl Into<String>) -> ParamError {
        ParamError {
            key: key.into(),
            why: why.into(),
        }
    }
}
