//! Per-host request budgets that learn from 429s.
