//! The HTTP API of `API.md`, on axum.
//!
//! - [`router`] builds every route with its layers; [`serve`] runs it until a shutdown signal
//!   and drains in-flight requests (tests bind port 0 and pass their own signal).
//! - [`auth`]: bearer tokens and the `Viewer` / `Service` extractors.
//! - [`extract`]: path, query and JSON extractors that speak the error contract.
//! - [`error`]: error kinds to status codes, in one place.
//! - [`cursor`]: opaque, tamper-evident cursors.
//! - [`dto`]: the JSON shapes; [`openapi`]: the generated OpenAPI document.
//! - [`middleware`]: request metrics and the per-request timeout.
//! - [`routes`]: one file per resource.
//! - [`web`]: the web demo page at `/`, and the demo-only routes `likewise demo` adds.

pub mod auth;
pub mod cursor;
pub mod dto;
pub mod error;
pub mod extract;
pub mod middleware;
pub mod openapi;
pub mod routes;
pub mod server;
pub mod web;

use auth::TokenKeys;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, put};
use cursor::CursorCodec;
use error::ApiError;
use likewise_service::Engagement;
use metrics_exporter_prometheus::PrometheusHandle;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// HTTP tuning.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Largest request body accepted.
    pub max_body_bytes: usize,
    /// A request taking longer is answered 503 (its write, if any, may still complete:
    /// retrying is safe because likes are idempotent).
    pub request_timeout: Duration,
    /// Connection-level limits (slow clients, connection count, drain).
    pub serve: server::ServeOptions,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            max_body_bytes: 64 * 1024,
            request_timeout: Duration::from_secs(10),
            serve: server::ServeOptions::default(),
        }
    }
}

/// What every handler can reach.
pub struct AppState {
    /// The engagement service.
    pub svc: Arc<Engagement>,
    /// Token keys.
    pub keys: TokenKeys,
    /// Cursor signing.
    pub cursors: CursorCodec,
    /// Renders `/metrics` (None when no recorder is installed).
    pub metrics: Option<PrometheusHandle>,
    /// Options.
    pub opts: HttpOptions,
}

/// Body limit of `PUT /v1/me/hidden-words`: the longest valid list, every character escaped
/// as a UTF-16 surrogate pair (12 bytes), fits.
pub const HIDDEN_WORDS_BODY_BYTES: usize = 1024 * 1024;

/// Every route of the API with its layers.
pub fn router(state: Arc<AppState>) -> Router {
    router_with(state, None)
}

/// Every route of the API, plus `extra` routes (the demo's), with its layers.
pub fn router_with(state: Arc<AppState>, extra: Option<Router<Arc<AppState>>>) -> Router {
    use routes::*;
    let v1 = Router::new()
        .route("/v1/users/{user_id}", put(upstream::put_user))
        .route("/v1/users/{user_id}/follows/{other_id}", put(upstream::follow).delete(upstream::unfollow))
        .route("/v1/posts", get(posts::posts))
        .route("/v1/posts/{post_id}", get(posts::post).put(upstream::put_post))
        .route("/v1/posts/{post_id}/like", put(likes::like).delete(likes::unlike))
        .route("/v1/posts/{post_id}/likers", get(likes::likers))
        .route("/v1/posts/{post_id}/views", axum::routing::post(views::view))
        .route("/v1/posts/{post_id}/insights", get(views::insights))
        .route("/v1/posts/{post_id}/comments", get(comments::list).post(comments::create))
        .route("/v1/comments/{comment_id}", axum::routing::delete(comments::delete))
        .route("/v1/comments/{comment_id}/replies", get(comments::replies))
        .route("/v1/comments/{comment_id}/like", put(comments::like).delete(comments::unlike))
        .route("/v1/me/settings", put(me::put_settings).get(me::get_settings))
        // A full list (1,000 entries of 64 characters, JSON-escaped) needs more than the
        // default body limit; this route alone gets enough for it.
        .route(
            "/v1/me/hidden-words",
            put(moderation::put_hidden_words)
                .layer(DefaultBodyLimit::max(state.opts.max_body_bytes.max(HIDDEN_WORDS_BODY_BYTES))),
        )
        .route("/v1/me/notifications", get(notifications::inbox))
        .route("/v1/me/notifications/stream", get(notifications::stream))
        .route("/v1/me/blocks/{user_id}", put(moderation::block).delete(moderation::unblock))
        .route("/v1/me/restricts/{user_id}", put(moderation::restrict).delete(moderation::unrestrict))
        .route("/v1/comments/{comment_id}/reports", axum::routing::post(moderation::report))
        .route("/v1/comments/{comment_id}/approve", axum::routing::post(moderation::approve))
        .route("/v1/posts/{post_id}/pins/{comment_id}", put(moderation::pin).delete(moderation::unpin))
        .route("/v1/moderation/queue", get(moderation::queue))
        .route("/v1/moderation/comments/{comment_id}", axum::routing::post(moderation::decide));
    Router::new()
        .route("/healthz", get(ops::healthz))
        .route("/metrics", get(ops::metrics))
        .route("/openapi.json", get(ops::openapi))
        .merge(v1)
        .merge(web::page_routes())
        .merge(extra.unwrap_or_default())
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(DefaultBodyLimit::max(state.opts.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(state.clone(), middleware::timeout))
        .layer(axum::middleware::from_fn(middleware::track))
        .with_state(state)
}

/// Only `/healthz` and `/metrics`: what a worker process (no API) offers its operators.
pub fn ops_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/healthz", get(routes::ops::healthz))
        .route("/metrics", get(routes::ops::metrics))
        .fallback(|| async {
            ApiError::not_found("this is a worker node: it serves /healthz and /metrics only")
        })
        .layer(axum::middleware::from_fn(middleware::track))
        .with_state(state)
}

/// Serve `router` until `shutdown` resolves, then drain (see [`server`] for the limits).
pub async fn serve_router(
    listener: TcpListener,
    router: Router,
    opts: server::ServeOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    server::serve(listener, router, opts, shutdown).await
}

/// Serve until `shutdown` resolves, then stop accepting and finish in-flight requests.
pub async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    server::serve(listener, router(state), server::ServeOptions::default(), shutdown).await
}
