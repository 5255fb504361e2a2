//! Host budget state behind a trait.
