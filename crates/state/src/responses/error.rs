//! What can go wrong in a response store.

/// A response store failed. The proxy answers the request as a pass-through
/// and audits `cache: "error"`; a store error never fails a client's request.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The embedded database failed (I/O, disk full, a damaged file).
    #[error("response store database: {0}")]
    Database(#[from] redb::Error),
    /// Another process (a second mannerly on the same data dir) holds the
    /// store file.
    #[error("the store is in use by another process: another mannerly runs on this data dir (stop it, or give this one its own with --data-dir or MANNERLY_DATA_DIR)")]
    InUse,
    /// An entry or record could not be encoded.
    #[error("response store encoding: {0}")]
    Encode(#[from] serde_json::Error),
    /// A thread panicked while holding the store's lock.
    #[error("response store lock poisoned")]
    Poisoned,
    /// The store's writer thread is gone (it panicked, or the store is
    /// closing): nothing more is written.
    #[error("response store writer stopped")]
    Closed,
    /// The store's writer thread could not be started.
    #[error("response store writer thread: {0}")]
    Thread(std::io::Error),
    /// The transaction this write was part of failed (every write in it
    /// gets the same error).
    #[error(transparent)]
    Batch(std::sync::Arc<StoreError>),
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
    redb::CommitError,
    redb::SetDurabilityError
);
