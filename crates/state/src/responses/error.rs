//! What can go wrong in a response store.

/// A response store failed. The proxy answers the request as a pass-through
/// and audits `cache: "error"`; a store error never fails a client's request.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The embedded database failed (I/O, disk full, a damaged file).
    #[error("response store database: {0}")]
    Database(#[from] redb::Error),
    /// An entry or record could not be encoded.
    #[error("response store encoding: {0}")]
    Encode(#[from] serde_json::Error),
    /// A thread panicked while holding the store's lock.
    #[error("response store lock poisoned")]
    Poisoned,
}

macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> Self {
                StoreError::Database(redb::Error::from(e))
            }
        }
    )*};
}

from_redb!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);
