//! Conditional requests: which responses may be stored and replayed.
