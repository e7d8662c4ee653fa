//! The viewer's own settings.

use crate::AppState;
use crate::auth::Viewer;
use crate::dto::SettingsDto;
use crate::error::ApiResult;
use crate::extract::JsonBody;
use axum::Json;
use axum::extract::State;
use likewise_core::model::ViewerSettings;
use std::sync::Arc;

/// Set the viewer's preferences (`hide_like_counts` hides counts on others' posts).
#[utoipa::path(put, path = "/v1/me/settings", tag = "me",
    request_body = SettingsDto,
    responses((status = 200, body = SettingsDto), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 422, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn put_settings(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    JsonBody(body): JsonBody<SettingsDto>,
) -> ApiResult<Json<SettingsDto>> {
    let s = ViewerSettings { hide_like_counts: body.hide_like_counts };
    state.svc.put_settings(viewer.0.user, s).await?;
    Ok(Json(SettingsDto { hide_like_counts: s.hide_like_counts }))
}

/// The viewer's preferences.
#[utoipa::path(get, path = "/v1/me/settings", tag = "me",
    responses((status = 200, body = SettingsDto), (status = 401, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_settings(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
) -> ApiResult<Json<SettingsDto>> {
    let s = state.svc.viewer_settings(viewer.0.user).await?;
    Ok(Json(SettingsDto { hide_like_counts: s.hide_like_counts }))
}
