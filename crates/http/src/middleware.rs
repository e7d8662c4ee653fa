//! Request metrics (rate, status and latency by route), admission control at the door, the
//! per-request timeout, the limits on request headers, and the content-type rule for request
//! bodies.
//!
//! Every metric label comes from a closed set, whatever a client sends: the route template
//! (or `unmatched`), one of the methods the API routes (or `other`), and the status code.
//! Otherwise each made-up method name would become a label kept until restart.

use crate::AppState;
use crate::error::ApiError;
use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::time::Instant;

/// Record `likewise_http_requests_total` and `likewise_http_request_duration_seconds`,
/// labelled by the route template (not the raw path, which would explode cardinality).
/// When traces are exported, the request also runs in an `http.request` span (method, route
/// template, status), continuing the caller's trace if it sent a `traceparent` header: the
/// writes it makes carry that span's context into their events.
pub async fn track(req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map(|m| intern(m.as_str())).unwrap_or("unmatched");
    let method = method_label(req.method());
    let started = Instant::now();
    let resp = if likewise_core::trace::enabled() {
        traced(req, next, method, route).await
    } else {
        next.run(req).await
    };
    let status = intern(resp.status().as_str());
    metrics::counter!("likewise_http_requests_total", "route" => route, "method" => method, "status" => status)
        .increment(1);
    metrics::histogram!("likewise_http_request_duration_seconds", "route" => route, "method" => method)
        .record(started.elapsed().as_secs_f64());
    resp
}

async fn traced(req: Request, next: Next, method: &'static str, route: &'static str) -> Response {
    use likewise_core::trace::{TARGET, TraceContext};
    use tracing::Instrument;
    let parent = req
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .and_then(TraceContext::from_traceparent);
    let span = likewise_core::trace::request_span(parent, || {
        tracing::info_span!(target: TARGET, "http.request",
            otel.name = format!("{method} {route}"), otel.kind = "server",
            http.request.method = method, http.route = route,
            http.response.status_code = tracing::field::Empty, otel.status_code = tracing::field::Empty)
    });
    let resp = next.run(req).instrument(span.clone()).await;
    span.record("http.response.status_code", i64::from(resp.status().as_u16()));
    if resp.status().is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
    resp
}

/// The metrics label of a method: one of the methods the router serves, else `other`.
pub fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::PUT => "PUT",
        Method::POST => "POST",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// Most header fields a request may carry; more is a 431.
pub const MAX_HEADERS: usize = 100;
/// Most bytes all header names and values of a request may hold together; more is a 431.
pub const MAX_HEADER_BYTES: usize = 32 * 1024;

/// Refuse requests with too many or too large header fields: 431 with the JSON error body.
/// The server lets hyper parse heads well past these limits (`server.rs`), so it is this
/// check, not hyper's own bare 431, that answers ordinary oversized requests.
pub async fn limit_headers(req: Request, next: Next) -> Response {
    let headers = req.headers();
    if headers.len() > MAX_HEADERS {
        metrics::counter!("likewise_http_header_limit_total", "limit" => "count").increment(1);
        return ApiError::headers_too_large(format!("more than {MAX_HEADERS} header fields")).into_response();
    }
    let bytes: usize = headers.iter().map(|(k, v)| k.as_str().len() + v.len()).sum();
    if bytes > MAX_HEADER_BYTES {
        metrics::counter!("likewise_http_header_limit_total", "limit" => "bytes").increment(1);
        return ApiError::headers_too_large(format!("header fields over {MAX_HEADER_BYTES} bytes in all"))
            .into_response();
    }
    next.run(req).await
}

/// A request whose body is known to be non-empty must declare it JSON
/// ([`crate::extract::declares_json`]): 415 `unsupported_media_type` otherwise, before any
/// handler reads it. (A chunked body of unknown length is checked by `JsonBody` once read.)
pub async fn require_json(req: Request, next: Next) -> Response {
    use axum::body::HttpBody;
    let has_body = req.body().size_hint().lower() > 0;
    if has_body && !crate::extract::declares_json(req.headers()) {
        return ApiError::unsupported_media_type().into_response();
    }
    next.run(req).await
}

/// Admission control at the door (see [`crate::admission`]), then the request's deadline
/// ([`timeout`]). A `/v1/` request that would wait longer than its bound (writes:
/// `admission_wait_share` of the request timeout; reads: the whole timeout) is answered at
/// once 503 `unavailable` with `Retry-After`, before its body, token or anything else is
/// looked at; a write gets the same body as one the group commit sheds. Counted in
/// `likewise_http_shed_total{kind}`. The notification stream and the analytics export, long
/// by design, pass uncounted.
///
/// One middleware for both, not one each: axum's `from_fn` clones the inner service stack and
/// boxes a `Next` and a future on every request, so a layer of its own made the door cost
/// every route that much, though most it lets through untouched (`/healthz`, `/metrics`,
/// pages). Those now pay one look at the matched route.
pub async fn admit_and_time(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let share = state.opts.admission_wait_share;
    let Some(write) = door_kind(share, &req) else {
        return timeout(&state, req, next).await;
    };
    let (door, bound, kind) = if write {
        (&state.door.writes, state.opts.request_timeout.mul_f64(share.min(1.0)), "write")
    } else {
        (&state.door.reads, state.opts.request_timeout, "read")
    };
    match door.admit(Instant::now(), bound) {
        Err(wait) => {
            metrics::counter!("likewise_http_shed_total", "kind" => kind).increment(1);
            let after = crate::admission::retry_after(wait);
            if write { ApiError::shed(after) } else { ApiError::shed_read(after) }.into_response()
        }
        Ok(ticket) => {
            let resp = timeout(&state, req, next).await;
            let st = resp.status();
            if st != axum::http::StatusCode::SERVICE_UNAVAILABLE
                && st != axum::http::StatusCode::GATEWAY_TIMEOUT
            {
                ticket.served();
            }
            resp
        }
    }
}

/// Whether `req` passes the door: `Some(true)` as a write, `Some(false)` as a read, `None`
/// uncounted (the door is off, another method, a route outside `/v1/`, or a long one).
fn door_kind(share: f64, req: &Request) -> Option<bool> {
    if share <= 0.0 {
        return None;
    }
    let write = match *req.method() {
        Method::PUT | Method::POST | Method::DELETE => true,
        Method::GET | Method::HEAD => false,
        _ => return None,
    };
    let route = req.extensions().get::<MatchedPath>()?.as_str();
    let counted = route.starts_with("/v1/")
        && route != "/v1/me/notifications/stream"
        && route != "/v1/analytics/hourly";
    counted.then_some(write)
}

/// Answer 503 `unavailable` when a request takes longer than the configured timeout, and
/// only when that is true: its writes still queued are cancelled first, so they never run
/// (`likewise_engine::write_gate`). A request with a write already in a committing batch waits
/// for it instead and answers its real outcome; if even that does not come within half the
/// timeout more (at most 5 s: a server cut off mid-commit), 504 `outcome_unknown`.
async fn timeout(state: &AppState, req: Request, next: Next) -> Response {
    let deadline = std::time::Instant::now() + state.opts.request_timeout;
    let writes = Arc::new(likewise_engine::write_gate::RequestWrites::until(deadline));
    let handler = writes.clone().scope(next.run(req));
    tokio::pin!(handler);
    tokio::select! {
        resp = &mut handler => resp,
        () = tokio::time::sleep(state.opts.request_timeout) => {
            metrics::counter!("likewise_http_timeouts_total").increment(1);
            if !writes.cancel_pending() {
                return ApiError::timed_out().into_response();
            }
            metrics::counter!("likewise_http_timeouts_committing_total").increment(1);
            let grace = (state.opts.request_timeout / 2).min(std::time::Duration::from_secs(5));
            match tokio::time::timeout(grace, handler).await {
                Ok(resp) => resp,
                Err(_) => ApiError::outcome_unknown().into_response(),
            }
        }
    }
}

/// Route templates and status codes form a small closed set: intern them once so
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
