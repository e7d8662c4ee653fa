//! Service errors, classified by kind; the HTTP layer maps kinds to status codes in one place.

use likewise_core::StoreError;
use likewise_core::error::ErrorKind as StoreKind;

/// What a service call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The named thing does not exist.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// The caller may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// The request is malformed.
    #[error("{0}")]
    Invalid(String),
    /// Well-formed, but it cannot be done as asked (an `Idempotency-Key` reused with another
    /// request): 422.
    #[error("{0}")]
    Unprocessable(String),
    /// The request conflicts with the current state (e.g. a fourth pin).
    #[error("{0}")]
    Conflict(String),
    /// Too many requests; retry after this many seconds.
    #[error("too many requests; retry in {0} s")]
    RateLimited(u64),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Error kinds, independent of transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// 404.
    NotFound,
    /// 403.
    Forbidden,
    /// 400.
    Invalid,
    /// 422.
    Unprocessable,
    /// 409.
    Conflict,
    /// 429.
    RateLimited,
    /// 503: retry later.
    Unavailable,
    /// 500.
    Internal,
    /// 504: a write that may or may not be stored; retry it with its key.
    OutcomeUnknown,
}

impl ServiceError {
    /// The kind of this error.
    pub fn kind(&self) -> Kind {
        match self {
            ServiceError::NotFound(_) => Kind::NotFound,
            ServiceError::Forbidden(_) => Kind::Forbidden,
            ServiceError::Invalid(_) => Kind::Invalid,
            ServiceError::Unprocessable(_) => Kind::Unprocessable,
            ServiceError::Conflict(_) => Kind::Conflict,
            ServiceError::RateLimited(_) => Kind::RateLimited,
            ServiceError::Store(e) => match e.kind() {
                StoreKind::Unavailable => Kind::Unavailable,
                StoreKind::Internal => Kind::Internal,
                StoreKind::OutcomeUnknown => Kind::OutcomeUnknown,
            },
        }
    }
}

/// Result of a service call.
pub type ServiceResult<T> = Result<T, ServiceError>;
