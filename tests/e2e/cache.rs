//! Conditional requests through the proxy.
