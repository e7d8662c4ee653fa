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
    let route = req.extensions().get::<MatchedPath>().map(|m| intern(m.as_str())).unwrap_or("unmatched");
    let method = intern(req.method().as_str());
    let started = Instant::now();
    let resp = next.run(req).await;
    let status = intern(resp.status().as_str());
    metrics::counter!("likewise_http_requests_total", "route" => route, "method" => method, "status" => status)
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

/// Route templates, methods and status codes form a small closed set: intern them once so
/// labelling a request allocates nothing (this runs on every request).
fn intern(s: &str) -> &'static str {
    static TABLE: std::sync::OnceLock<parking_lot::RwLock<std::collections::HashSet<&'static str>>> =
        std::sync::OnceLock::new();
    let table = TABLE.get_or_init(Default::default);
    if let Some(v) = table.read().get(s) {
        return v;
    }
    let mut w = table.write();
    if let Some(v) = w.get(s) {
        return v;
    }
    if w.len() >= 1024 {
        return "other"; // never grow without bound, whatever the input
    }
    let leaked: &'static str = Box::leak(s.to_owned().into_boxed_str());
    w.insert(leaked);
    leaked
}
