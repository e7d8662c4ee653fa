//! Operations routes: health, metrics, the OpenAPI document.

use crate::AppState;
use crate::dto::Health;
use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use std::sync::Arc;

/// Liveness and storage reachability.
#[utoipa::path(get, path = "/healthz", operation_id = "get_health", tag = "operations",
    responses((status = 200, body = Health), (status = 503, body = Health)))]
pub async fn healthz(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    // Well inside the request timeout: a partitioned dependency is reported, never waited for.
    let within = (state.opts.request_timeout / 2).min(std::time::Duration::from_secs(2));
    // Load balancers poll every instance every few seconds: the engines are checked at most
    // once a second (`likewise_service::HEALTH_CACHE`), whoever asks.
    let checks = state.svc.health_cached(within, likewise_service::HEALTH_CACHE).await;
    let storage = checks.iter().any(|(name, ok)| *name == "storage" && *ok);
    for (name, _) in checks.iter().filter(|(_, ok)| !*ok) {
        tracing::warn!(dependency = *name, "health check failed");
    }
    let checks = checks
        .into_iter()
        .map(|(name, ok)| (name.to_string(), if ok { "ok" } else { "down" }.to_string()))
        .collect();
    if storage {
        (StatusCode::OK, Json(Health { status: "ok".into(), checks }))
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, Json(Health { status: "unavailable".into(), checks }))
    }
}

/// Prometheus metrics.
#[utoipa::path(get, path = "/metrics", operation_id = "get_metrics", tag = "operations",
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain")))]
pub async fn metrics(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    // Each dependency probed at scrape time (as /healthz does, bounded the same way), so
    // `likewise_dependency_up` is current whether or not anything polls /healthz.
    let within = (state.opts.request_timeout / 2).min(std::time::Duration::from_secs(2));
    state.svc.health(within).await;
    // Sizes are read at scrape time: cheap, and always current.
    let mut usages = state.svc.cache_usage();
    usages.push(state.keys.cache_usage());
    state.svc.stores().engine.publish_gauges();
    for u in usages {
        metrics::gauge!("likewise_cache_entries", "cache" => u.cache).set(u.entries as f64);
        metrics::gauge!("likewise_cache_capacity", "cache" => u.cache).set(u.capacity as f64);
        metrics::gauge!("likewise_cache_bytes", "cache" => u.cache).set(u.bytes as f64);
    }
    let mut body = state.metrics.as_ref().map(|h| h.render()).unwrap_or_default();
    // The stream readers' positions, kept apart: a reader's series goes with the reader.
    body.push_str(&likewise_core::positions::render());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
}

/// The served OpenAPI document, built once with the router from the same route table.
#[derive(Clone)]
pub struct OpenApiDocument(pub Arc<serde_json::Value>);

/// This document.
#[utoipa::path(get, path = "/openapi.json", operation_id = "get_openapi", tag = "operations",
    responses((status = 200, description = "OpenAPI 3 document", content_type = "application/json")))]
pub async fn openapi(Extension(doc): Extension<OpenApiDocument>) -> impl IntoResponse {
    Json(doc.0.as_ref().clone())
}
