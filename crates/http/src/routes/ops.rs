//! Operations routes: health, metrics, the OpenAPI document.

use crate::AppState;
use crate::dto::Health;
use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use std::sync::Arc;

/// Liveness and storage reachability.
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, body = Health), (status = 503, body = Health)))]
pub async fn healthz(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    match state.svc.ping().await {
        Ok(()) => (StatusCode::OK, Json(Health { status: "ok".into() })),
        Err(e) => {
            tracing::warn!(error = %e, "health check failed");
            (StatusCode::SERVICE_UNAVAILABLE, Json(Health { status: "unavailable".into() }))
        }
    }
}

/// Prometheus metrics.
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain")))]
pub async fn metrics(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    // Sizes are read at scrape time: cheap, and always current.
    let mut usages = state.svc.cache_usage();
    usages.push(state.keys.cache_usage());
    if let Some(d) = state.svc.stores().embedded.as_ref() {
        let (entries, capacity, bytes) = d.event_tail_usage();
        usages.push(likewise_service::cache::Usage { cache: "event_tail", entries, capacity, bytes });
        metrics::gauge!("likewise_store_disk_bytes").set(d.disk_space() as f64);
        let m = d.memory();
        metrics::gauge!("likewise_store_block_cache_bytes").set(m.block_cache_bytes as f64);
        metrics::gauge!("likewise_store_block_cache_capacity_bytes").set(m.block_cache_capacity_bytes as f64);
        metrics::gauge!("likewise_store_write_buffer_bytes").set(m.write_buffer_bytes as f64);
        metrics::gauge!("likewise_store_write_buffer_limit_bytes").set(m.write_buffer_limit_bytes as f64);
        metrics::gauge!("likewise_store_pinned_bytes").set(m.pinned_bytes as f64);
        metrics::gauge!("likewise_store_like_filter_bytes").set(m.like_filter_bytes as f64);
    }
    for u in usages {
        metrics::gauge!("likewise_cache_entries", "cache" => u.cache).set(u.entries as f64);
        metrics::gauge!("likewise_cache_capacity", "cache" => u.cache).set(u.capacity as f64);
        metrics::gauge!("likewise_cache_bytes", "cache" => u.cache).set(u.bytes as f64);
    }
    let body = state.metrics.as_ref().map(|h| h.render()).unwrap_or_default();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
}

/// This document.
#[utoipa::path(get, path = "/openapi.json", tag = "operations",
    responses((status = 200, description = "OpenAPI 3 document", content_type = "application/json")))]
pub async fn openapi() -> impl IntoResponse {
    Json(crate::openapi::document())
}
