//! Errors shared by the storage ports. Classified by kind, mapped to HTTP in one place (the
//! `http` crate), never by transport.

/// What went wrong in a storage engine.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The engine failed (I/O, corruption, lost connection).
    #[error("storage failure: {0}")]
    Engine(String),
    /// A stored record could not be decoded (unknown format version, truncated bytes).
    #[error("corrupt record in {keyspace}: {detail}")]
    Corrupt {
        /// Which keyspace held the record.
        keyspace: &'static str,
        /// What was wrong with it.
        detail: String,
    },
    /// The engine is shutting down and takes no more writes.
    #[error("storage is shutting down")]
    Closed,
}

/// Result of a storage call.
pub type StoreResult<T> = Result<T, StoreError>;

/// Coarse error kinds used for metrics and HTTP mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The backend is unavailable (shutting down, unreachable): retryable.
    Unavailable,
    /// An internal fault: not the caller's doing.
    Internal,
}

impl StoreError {
    /// The kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            StoreError::Closed => ErrorKind::Unavailable,
            StoreError::Engine(_) | StoreError::Corrupt { .. } => ErrorKind::Internal,
        }
    }
}
