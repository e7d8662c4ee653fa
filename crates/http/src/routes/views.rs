//! Views and insights.

use crate::AppState;
use crate::auth::Viewer;
use crate::dto::InsightsDto;
use crate::error::ApiResult;
use crate::extract::PathParams;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use likewise_core::ids::PostId;
use std::sync::Arc;

/// Count a view of the post by the caller (unique viewers are counted approximately).
#[utoipa::path(post, path = "/v1/posts/{post_id}/views", operation_id = "record_post_view", tag = "views", params(("post_id" = String, Path)),
    responses((status = 204), (status = 400, body = crate::error::ErrorBody), (status = 401, body = crate::error::ErrorBody),
        (status = 404, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn view(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    PathParams(post): PathParams<PostId>,
) -> ApiResult<StatusCode> {
    state.svc.views.record(viewer.0.user, post).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The post's exact like count, comment count and unique viewers (its author only).
#[utoipa::path(get, path = "/v1/posts/{post_id}/insights", operation_id = "get_post_insights", tag = "views", params(("post_id" = String, Path)),
    responses((status = 200, body = InsightsDto), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 403, body = crate::error::ErrorBody),
        (status = 404, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn insights(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    PathParams(post): PathParams<PostId>,
) -> ApiResult<Json<InsightsDto>> {
    let i = state.svc.views.insights(viewer.0.user, post).await?;
    Ok(Json(InsightsDto {
        like_count: i.like_count,
        comment_count: i.comment_count,
        unique_viewers: i.unique_viewers,
    }))
}
