//! The HTTP API of `docs/api.md`, on axum.
//!
//! - [`router`] builds every route with its layers from one table (`api_routes`), which also
//!   yields the OpenAPI document; [`serve`] runs it until a shutdown signal
//!   and drains in-flight requests (tests bind port 0 and pass their own signal).
//! - [`auth`]: bearer tokens and the `Viewer` / `Service` extractors.
//! - [`extract`]: path, query and JSON extractors that speak the error contract.
//! - [`paging`]: the `limit` and `cursor` parameters of every list.
//! - [`error`]: error kinds to status codes, in one place.
//! - [`cursor`]: opaque, tamper-evident cursors.
//! - [`dto`]: the JSON shapes; [`openapi`]: what the OpenAPI document adds to the route
//!   table's annotations.
//! - [`middleware`]: request metrics, admission control at the door and the per-request
//!   timeout; [`admission`]: the door's estimate of the wait a request would face.
//! - [`routes`]: one file per resource.
//! - [`web`]: the web demo page at `/`, and the demo-only routes `likewise demo` adds.

pub mod admission;
pub mod auth;
pub mod cursor;
pub mod dto;
pub mod error;
pub mod extract;
pub mod middleware;
pub mod openapi;
pub mod paging;
pub mod routes;
pub mod server;
pub mod web;

use auth::TokenKeys;
use axum::Router;
use axum::routing::get;
use cursor::CursorCodec;
use error::ApiError;
use likewise_service::Engagement;
use metrics_exporter_prometheus::PrometheusHandle;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouterExt};
use utoipa_axum::routes;

/// HTTP tuning.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Largest request body accepted.
    pub max_body_bytes: usize,
    /// A request taking longer is answered 503 (its write, if any, may still complete:
    /// retrying is safe because likes are idempotent).
    pub request_timeout: Duration,
    /// Admission control at the door ([`admission`]): a write whose expected wait exceeds
    /// this share of `request_timeout` is answered 503 with `Retry-After` before any work
    /// (reads: the whole timeout); 0 turns the door off (the group commit still sheds).
    pub admission_wait_share: f64,
    /// Connection-level limits (slow clients, connection count, drain).
    pub serve: server::ServeOptions,
    /// Most notification streams one user may hold open (`notifications.max_streams_per_user`).
    pub max_streams_per_user: usize,
    /// Most notification streams open at once, all users together; 0 means half of
    /// `serve.max_connections`, so streams never take the slots ordinary requests need.
    pub max_streams: usize,
    /// Origins allowed to call the API from a browser (CORS); empty: none.
    pub cors_origins: Vec<String>,
}

impl HttpOptions {
    /// The total stream cap in effect (see [`HttpOptions::max_streams`]).
    pub fn stream_cap(&self) -> usize {
        match self.max_streams {
            0 => (self.serve.max_connections / 2).max(1),
            n => n,
        }
    }
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            max_body_bytes: 64 * 1024,
            request_timeout: Duration::from_secs(10),
            admission_wait_share: 0.5,
            serve: server::ServeOptions::default(),
            max_streams_per_user: 5,
            max_streams: 0,
            cors_origins: Vec::new(),
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
    /// Open notification streams, per user and in total.
    pub streams: routes::notifications::StreamSlots,
    /// Requests in flight and their answer rate, for admission control.
    pub door: admission::Door,
}

impl AppState {
    /// State for `svc` with `keys`, `cursors` and `opts` (the stream slots follow `opts`).
    pub fn new(
        svc: Arc<Engagement>,
        keys: TokenKeys,
        cursors: CursorCodec,
        metrics: Option<PrometheusHandle>,
        opts: HttpOptions,
    ) -> Self {
        let streams = routes::notifications::StreamSlots::new(opts.max_streams_per_user, opts.stream_cap());
        AppState { svc, keys, cursors, metrics, opts, streams, door: admission::Door::default() }
    }
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
    let hidden_words_limit = state.opts.max_body_bytes.max(HIDDEN_WORDS_BODY_BYTES);
    let (api, doc) = api_routes(hidden_words_limit).split_for_parts();
    let doc = routes::ops::OpenApiDocument(Arc::new(openapi::complete(doc)));
    let cors = cors_layer(&state.opts.cors_origins);
    api.merge(web::page_routes())
        .merge(extra.unwrap_or_default())
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(axum::Extension(doc))
        .layer(extract::body_limit(state.opts.max_body_bytes))
        .layer(axum::middleware::from_fn(middleware::require_json))
        .layer(axum::middleware::from_fn_with_state(state.clone(), middleware::admit_and_time))
        .layer(tower::util::option_layer(cors))
        .layer(axum::middleware::from_fn(middleware::limit_headers))
        .layer(axum::middleware::from_fn(middleware::track))
        .with_state(state)
}

/// CORS for the configured origins (`server.cors_origins`), or none when the list is empty:
/// browsers on those origins may call every route with a bearer token and JSON bodies.
/// Preflights are answered before authentication (they carry no token).
fn cors_layer(origins: &[String]) -> Option<tower_http::cors::CorsLayer> {
    use axum::http::{HeaderName, HeaderValue, Method, header};
    use tower_http::cors::{AllowOrigin, CorsLayer};
    let origins: Vec<HeaderValue> = origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()).collect();
    if origins.is_empty() {
        return None;
    }
    Some(
        CorsLayer::new()
            .allow_origin(AllowOrigin::list(origins))
            .allow_methods([Method::GET, Method::PUT, Method::POST, Method::DELETE])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                HeaderName::from_static("idempotency-key"),
                HeaderName::from_static("last-event-id"),
            ])
            .expose_headers([header::RETRY_AFTER])
            .max_age(Duration::from_secs(600)),
    )
}

/// The OpenAPI document `/openapi.json` serves (for tools and tests without a server).
pub fn openapi_document() -> serde_json::Value {
    openapi::complete(api_routes(HIDDEN_WORDS_BODY_BYTES).split_for_parts().1)
}

/// The API's routes, each listed once: the router and the OpenAPI document both come from
/// this table (`routes!` groups the handlers of one path; each handler's `#[utoipa::path]`
/// gives its method and path).
fn api_routes(hidden_words_limit: usize) -> OpenApiRouter<Arc<AppState>> {
    use routes::*;
    OpenApiRouter::with_openapi(openapi::base())
        .routes(routes!(ops::healthz))
        .routes(routes!(ops::metrics))
        .routes(routes!(ops::openapi))
        .routes(routes!(events::events_schema))
        .routes(routes!(upstream::put_user))
        .routes(routes!(upstream::follow, upstream::unfollow))
        .routes(routes!(posts::posts))
        .routes(routes!(posts::post, upstream::put_post))
        .routes(routes!(likes::like, likes::unlike))
        .routes(routes!(likes::likers))
        .routes(routes!(views::view))
        .routes(routes!(views::insights))
        .routes(routes!(trending::trending))
        .routes(routes!(comments::list, comments::create))
        .routes(routes!(comments::delete))
        .routes(routes!(comments::replies))
        .routes(routes!(comments::like, comments::unlike))
        .routes(routes!(me::put_settings, me::get_settings))
        // A full list (1,000 entries of 64 characters, JSON-escaped) needs more than the
        // default body limit; this route alone gets enough for it.
        .routes(routes!(moderation::put_hidden_words).layer(extract::body_limit(hidden_words_limit)))
        .routes(routes!(notifications::inbox))
        .routes(routes!(me::get_notification_settings, me::put_notification_settings))
        .routes(routes!(notifications::stream))
        .routes(routes!(moderation::block, moderation::unblock))
        .routes(routes!(moderation::restrict, moderation::unrestrict))
        .routes(routes!(moderation::report))
        .routes(routes!(moderation::approve))
        .routes(routes!(moderation::appeal))
        .routes(routes!(moderation::pin, moderation::unpin))
        .routes(routes!(moderation::queue))
        .routes(routes!(moderation::decide))
        .routes(routes!(integrity::list))
        .routes(routes!(integrity::decide))
        .routes(routes!(analytics::hourly))
}

/// Only `/healthz` and `/metrics`: what a worker process (no API) offers its operators.
pub fn ops_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/healthz", get(routes::ops::healthz))
        .route("/metrics", get(routes::ops::metrics))
        .fallback(|| async {
            ApiError::not_found("this is a worker node: it serves /healthz and /metrics only")
        })
        .layer(axum::middleware::from_fn(middleware::limit_headers))
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
