//! The one place where error kinds become HTTP statuses and JSON bodies
//! (`{"error": kind, "message": text}`), as `docs/api.md` specifies.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use likewise_service::ServiceError;
use likewise_service::error::Kind;
use serde::Serialize;
use utoipa::ToSchema;

/// The JSON error body.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// One of `invalid`, `unauthenticated`, `forbidden`, `not_found`, `method_not_allowed`,
    /// `conflict`, `too_large`, `unsupported_media_type`, `rate_limited`, `unavailable`,
    /// `internal`.
    pub error: &'static str,
    /// Human-readable explanation.
    pub message: String,
}

/// An API error: a status, a kind and a message.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
    retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, kind, message: message.into(), retry_after: None }
    }
    /// 400 invalid.
    pub fn invalid(msg: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid", msg)
    }
    /// 422 invalid (well-formed JSON that does not fit the schema).
    pub fn unprocessable(msg: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid", msg)
    }
    /// 401 unauthenticated.
    pub fn unauthenticated(msg: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthenticated", msg)
    }
    /// 409 conflict.
    pub fn conflict(msg: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", msg)
    }
    /// 403 forbidden.
    pub fn forbidden(msg: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", msg)
    }
    /// 404 not_found.
    pub fn not_found(msg: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", msg)
    }
    /// 405 method_not_allowed.
    pub fn method_not_allowed() -> Self {
        Self::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "method not allowed on this route")
    }
    /// 415 unsupported_media_type: a body that is not declared as JSON.
    pub fn unsupported_media_type() -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "request bodies must be JSON, sent with Content-Type: application/json",
        )
    }
    /// 431 too_large: the request's header fields are too many or too large.
    pub fn headers_too_large(msg: impl Into<String>) -> Self {
        Self::new(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, "too_large", msg)
    }

    /// 413 too_large.
    pub fn too_large(msg: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", msg)
    }
    /// 429 rate_limited with a Retry-After in seconds.
    pub fn rate_limited(retry_after_secs: u64) -> Self {
        let mut e = Self::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", "too many requests; slow down");
        e.retry_after = Some(retry_after_secs.max(1));
        e
    }
    /// 429 with its own message (a busy single slot, say).
    pub fn rate_limited_because(retry_after_secs: u64, msg: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", msg);
        e.retry_after = Some(retry_after_secs.max(1));
        e
    }
    /// 503 unavailable.
    pub fn unavailable(msg: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", msg)
    }
    /// 504 outcome_unknown: a write that may or may not have been stored (the storage did not
    /// confirm its commit, or it was still committing when the request's time ran out). Not
    /// a 503, which says nothing was created: retrying with the same `Idempotency-Key` (a
    /// like or unlike: the same call) answers the stored write if there is one.
    pub fn outcome_unknown() -> Self {
        let mut e = Self::new(
            StatusCode::GATEWAY_TIMEOUT,
            "outcome_unknown",
            "the write may or may not have been stored; send it again as it was (a comment create with the same Idempotency-Key)",
        );
        e.retry_after = Some(1);
        e
    }
    /// 503 unavailable with `Retry-After`: a write refused by admission control, at the door
    /// or at the commit queue (the same answer either way: nothing was written).
    pub fn shed(retry_after_secs: u64) -> Self {
        let mut e = ApiError::unavailable("too many writes queued; nothing was written, retry later");
        e.retry_after = Some(retry_after_secs.max(1));
        e
    }
    /// 503 unavailable with `Retry-After`: the request's time ran out before any of its writes
    /// was committing (they were cancelled: nothing was written).
    pub fn timed_out() -> Self {
        let mut e = ApiError::unavailable("request timed out");
        e.retry_after = Some(1);
        e
    }
    /// 503 unavailable with `Retry-After`: a read refused by admission control at the door.
    pub fn shed_read(retry_after_secs: u64) -> Self {
        let mut e = ApiError::unavailable("too many requests queued; retry later");
        e.retry_after = Some(retry_after_secs.max(1));
        e
    }
    /// 500 internal, without internals.
    pub fn internal() -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "internal error")
    }
    /// The same error with another message.
    pub fn with_message(mut self, msg: impl Into<String>) -> Self {
        self.message = msg.into();
        self
    }
    /// The status code.
    pub fn status(&self) -> StatusCode {
        self.status
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        match e.kind() {
            Kind::NotFound => ApiError::not_found(e.to_string()),
            Kind::Forbidden => ApiError::forbidden(e.to_string()),
            Kind::Invalid => ApiError::invalid(e.to_string()),
            Kind::Unprocessable => ApiError::unprocessable(e.to_string()),
            Kind::Conflict => ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string()),
            Kind::RateLimited => ApiError::rate_limited(match e {
                ServiceError::RateLimited(secs) => secs,
                _ => 1,
            }),
            Kind::Unavailable => match e {
                ServiceError::Store(likewise_core::StoreError::Shed { retry_after_secs }) => {
                    ApiError::shed(retry_after_secs)
                }
                ServiceError::Store(likewise_core::StoreError::Refused { reason, retry_after_secs }) => {
                    let mut e = ApiError::unavailable(format!(
                        "storage takes no writes now ({reason}); nothing was written, retry later"
                    ));
                    e.retry_after = Some(retry_after_secs.max(1));
                    e
                }
                _ => ApiError::unavailable("service is shutting down or storage is unavailable"),
            },
            Kind::OutcomeUnknown => {
                tracing::warn!(error = %likewise_core::error::chain(&e), "write outcome unknown");
                ApiError::outcome_unknown()
            }
            Kind::Internal => {
                tracing::error!(error = %likewise_core::error::chain(&e), "internal error");
                ApiError::internal()
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp =
            (self.status, Json(ErrorBody { error: self.kind, message: self.message })).into_response();
        if let Some(v) = self.retry_after.and_then(|secs| HeaderValue::from_str(&secs.to_string()).ok()) {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        resp
    }
}

/// Result of a handler.
pub type ApiResult<T> = Result<T, ApiError>;
