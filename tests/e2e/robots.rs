//! robots.txt through the proxy.
