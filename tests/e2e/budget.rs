//! Per-host budgets through the proxy.
