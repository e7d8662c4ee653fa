//! The public event contract's JSON Schema (docs/api.md, "Events (for other systems)").

use axum::http::header;
use axum::response::IntoResponse;
use likewise_core::public_event::SCHEMA_JSON;

/// The JSON Schema of the events published to export destinations. Needs no token.
#[utoipa::path(get, path = "/v1/events/schema.json", operation_id = "get_event_schema", tag = "events",
    summary = "The JSON Schema of published events",
    responses((status = 200, description = "JSON Schema (draft 2020-12) of one event",
        content_type = "application/schema+json")))]
pub async fn events_schema() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/schema+json")], SCHEMA_JSON)
}
