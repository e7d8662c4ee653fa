//! The viewer's own settings.

use crate::AppState;
use crate::auth::Viewer;
use crate::dto::{NotificationSettingsDto, NotificationSettingsPut, SettingsDto};
use crate::error::ApiResult;
use crate::extract::JsonBody;
use axum::Json;
use axum::extract::State;
use likewise_core::model::NotifPrefs;
use std::sync::Arc;

/// Set the viewer's preferences (`hide_like_counts` hides counts on others' posts).
#[utoipa::path(put, path = "/v1/me/settings", operation_id = "put_settings", tag = "me",
    request_body = SettingsDto,
    responses((status = 200, body = SettingsDto), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 422, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn put_settings(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    JsonBody(body): JsonBody<SettingsDto>,
) -> ApiResult<Json<SettingsDto>> {
    let s = state
        .svc
        .upstream
        .update_settings(viewer.0.user, |s| s.hide_like_counts = body.hide_like_counts)
        .await?;
    Ok(Json(SettingsDto { hide_like_counts: s.hide_like_counts }))
}

/// The viewer's preferences.
#[utoipa::path(get, path = "/v1/me/settings", operation_id = "get_settings", tag = "me",
    responses((status = 200, body = SettingsDto), (status = 401, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_settings(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
) -> ApiResult<Json<SettingsDto>> {
    let s = state.svc.upstream.viewer_settings(viewer.0.user).await?;
    Ok(Json(SettingsDto { hide_like_counts: s.hide_like_counts }))
}

/// Which notifications the viewer gets, per kind: `all` (default), `following` (only actions
/// by people the viewer follows) or `off`.
#[utoipa::path(get, path = "/v1/me/notification-settings", operation_id = "get_notification_settings", tag = "notifications",
    responses((status = 200, body = NotificationSettingsDto), (status = 401, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_notification_settings(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
) -> ApiResult<Json<NotificationSettingsDto>> {
    let s = state.svc.upstream.viewer_settings(viewer.0.user).await?;
    Ok(Json(NotificationSettingsDto::from(s.notifications)))
}

/// Change some notification preferences (any subset of the kinds); answers all of them. A
/// muted action never creates an item or a push; turning a kind back on replays nothing.
#[utoipa::path(put, path = "/v1/me/notification-settings", operation_id = "put_notification_settings", tag = "notifications",
    request_body(content = NotificationSettingsPut, example = json!({"post_liked": "following", "commented": "off"})),
    responses((status = 200, body = NotificationSettingsDto), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 415, body = crate::error::ErrorBody),
        (status = 422, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn put_notification_settings(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    JsonBody(body): JsonBody<NotificationSettingsPut>,
) -> ApiResult<Json<NotificationSettingsDto>> {
    let s = state
        .svc
        .upstream
        .update_settings(viewer.0.user, |s| {
            let n: &mut NotifPrefs = &mut s.notifications;
            for (field, value) in [
                (&mut n.post_liked, body.post_liked),
                (&mut n.comment_liked, body.comment_liked),
                (&mut n.commented, body.commented),
                (&mut n.replied, body.replied),
            ] {
                if let Some(v) = value {
                    *field = v.into();
                }
            }
        })
        .await?;
    Ok(Json(NotificationSettingsDto::from(s.notifications)))
}
