//! Per-post hourly aggregates of a live node's event log and view sketches: what
//! `likewise export analytics --url` writes to a Parquet file without stopping the node
//! (docs/api.md, "Analytics"). Service role only.

use crate::AppState;
use crate::auth::Service;
use crate::dto::{AnalyticsHourly, AnalyticsRow, rfc3339_ms};
use crate::error::{ApiError, ApiResult};
use crate::extract::QueryParams;
use axum::Json;
use axum::extract::State;
use likewise_service::analytics::{self, Span};
use serde::Deserialize;
use std::sync::{Arc, OnceLock};
use tokio::sync::Semaphore;
use utoipa::IntoParams;

/// `GET /v1/analytics/hourly` parameters.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HourlyQuery {
    /// First hour covered: RFC 3339 or a date (midnight UTC); truncated to its UTC hour.
    #[param(required = true)]
    pub since: Option<String>,
    /// End of the span, exclusive, truncated to its UTC hour; at most 366 days after `since`.
    #[param(required = true)]
    pub until: Option<String>,
}

/// One export at a time per node: each reads the node's whole retained log.
fn slot() -> &'static Semaphore {
    static SLOT: OnceLock<Semaphore> = OnceLock::new();
    SLOT.get_or_init(|| Semaphore::new(1))
}

/// Per-post hourly aggregates of `[since, until)`: likes, unlikes, comments, the visible
/// comment count's change, comment likes and unlikes, and unique viewers, one row per post and
/// UTC hour with any of them, sorted by hour, then post. Read from the node's retained event
/// log up to its head when the request arrived. One at a time per node (429 while one runs).
/// Not bound by `server.request_timeout_ms`: a year's log takes longer than a request.
#[utoipa::path(get, path = "/v1/analytics/hourly", operation_id = "analytics_hourly", tag = "operations",
    params(HourlyQuery),
    responses((status = 200, body = AnalyticsHourly), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 403, body = crate::error::ErrorBody),
        (status = 409, body = crate::error::ErrorBody), (status = 429, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn hourly(
    State(state): State<Arc<AppState>>,
    _svc: Service,
    QueryParams(q): QueryParams<HourlyQuery>,
) -> ApiResult<Json<AnalyticsHourly>> {
    let (Some(since), Some(until)) = (q.since.as_deref(), q.until.as_deref()) else {
        return Err(ApiError::invalid("since and until are required"));
    };
    let span = Span::parse(since, until, ("since", "until")).map_err(ApiError::invalid)?;
    let stores = state.svc.stores();
    if !stores.events.readable() {
        return Err(ApiError::conflict(
            "this node's events are read through the event stream: run `likewise export analytics` \
             with the deployment's configuration and without --url; it reads the stream and \
             PostgreSQL itself while the deployment runs",
        ));
    }
    let Ok(slot) = slot().try_acquire() else {
        return Err(ApiError::rate_limited_because(
            10,
            "another analytics export is running on this node; retry when it is done",
        ));
    };
    // The embedded engine reads its log on the calling thread: on a thread of its own, so the
    // node's runtime threads go on serving while a long log is read.
    let (events, views) = (stores.events.clone(), stores.views.clone());
    let rt = tokio::runtime::Handle::current();
    let report = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        rt.block_on(analytics::hourly(&*events, &*views, span, false, |_, _| {}))
    })
    .await
    .map_err(|e| {
        tracing::error!(error = %e, "the analytics export's task failed");
        ApiError::internal()
    })?
    .map_err(likewise_service::error::ServiceError::from)?;
    Ok(Json(AnalyticsHourly {
        since: rfc3339_ms(span.since_ms),
        until: rfc3339_ms(span.until_ms),
        warning: report.warning(&span),
        store_id: state.svc.stores().identity.clone(),
        rows: report.rows.iter().map(AnalyticsRow::from).collect(),
    }))
}
