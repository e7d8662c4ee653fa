//! Request metrics (rate, status and latency by route) and the per-request timeout.

use crate::AppState;
use crate::error::ApiError;
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::time::Instant;

/// Record `likewise_http_requests_total` and `likewise_http_request_duration_seconds`,
/// labelled by the route template (not the raw path, which would explode cardinality).
pub async fn track(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".into());
    let method = req.method().as_str().to_owned();
    let started = Instant::now();
    let resp = next.run(req).await;
    let status = resp.status().as_u16().to_string();
    metrics::counter!("likewise_http_requests_total", "route" => route.clone(), "method" => method.clone(), "status" => status)
        .increment(1);
    metrics::histogram!("likewise_http_request_duration_seconds", "route" => route, "method" => method)
        .record(started.elapsed().as_secs_f64());
    resp
}

/// Answer 503 `unavailable` when a request takes longer than the configured timeout.
pub async fn timeout(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    match tokio::time::timeout(state.opts.request_timeout, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => {
            metrics::counter!("likewise_http_timeouts_total").increment(1);
            ApiError::unavailable("request timed out").into_response()
        }
    }
}
