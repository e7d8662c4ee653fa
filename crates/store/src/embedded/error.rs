//! How the embedded engine reports fjall's errors.

use likewise_core::StoreError;

pub(crate) fn engine_err(e: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>) -> StoreError {
    StoreError::backend("fjall", e)
}
