//! Errors of a shard's write transaction: the deadlocks and serialization failures that two
//! API nodes' transactions can cause are retried; anything else fails the batch.

use super::pg_err;
use likewise_core::StoreError;

/// Is this a deadlock or a serialization failure (worth running the transaction again)?
pub(super) fn retryable(e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    e.code()
        .is_some_and(|c| *c == SqlState::T_R_DEADLOCK_DETECTED || *c == SqlState::T_R_SERIALIZATION_FAILURE)
}

/// An error of a shard transaction: retry it or give up.
pub(super) enum TxError {
    /// Run the transaction again.
    Retry(tokio_postgres::Error),
    /// Give up.
    Fail(StoreError),
}

impl From<tokio_postgres::Error> for TxError {
    fn from(e: tokio_postgres::Error) -> Self {
        if retryable(&e) { TxError::Retry(e) } else { TxError::Fail(pg_err(e)) }
    }
}

impl From<StoreError> for TxError {
    fn from(e: StoreError) -> Self {
        TxError::Fail(e)
    }
}
