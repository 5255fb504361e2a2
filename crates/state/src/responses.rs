//! Stored responses for conditional requests.
