//! Trending posts (docs/api.md, "Trending and integrity").

use crate::AppState;
use crate::auth::Viewer;
use crate::dto::{TrendingItem, TrendingPage};
use crate::error::{ApiError, ApiResult};
use crate::extract::QueryParams;
use crate::paging::parse_limit;
use axum::Json;
use axum::extract::State;
use likewise_core::trending::Window;
use serde::Deserialize;
use std::sync::Arc;
use utoipa::IntoParams;

/// `GET /v1/trending` parameters.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TrendingQuery {
    /// `1h` (default) or `24h`.
    pub window: Option<String>,
    /// 1..=100, default 20.
    pub limit: Option<String>,
    /// Trending is one page: a cursor is refused.
    pub cursor: Option<String>,
}

/// Posts ranked by recent engagement velocity: likes and visible comments in the window,
/// recent ones weighing more. `likes` is null where the post's like count is hidden from this
/// viewer (as `like_count` of a post), and such a post is placed by a power-of-two bucket of
/// its score, so its place does not give the count away.
#[utoipa::path(get, path = "/v1/trending", operation_id = "list_trending_posts", tag = "trending",
    params(TrendingQuery),
    responses((status = 200, body = TrendingPage), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn trending(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    QueryParams(q): QueryParams<TrendingQuery>,
) -> ApiResult<Json<TrendingPage>> {
    let window = match q.window.as_deref() {
        None => Window::Hour,
        Some(w) => Window::parse(w).ok_or_else(|| ApiError::invalid("window must be 1h or 24h"))?,
    };
    let limit = parse_limit(q.limit.as_deref())?;
    if q.cursor.is_some() {
        return Err(ApiError::invalid("trending is a single page: it takes no cursor"));
    }
    let items = state
        .svc
        .trending
        .top(viewer.0.user, window, limit)
        .await?
        .into_iter()
        .map(|r| TrendingItem {
            post_id: r.post,
            likes: r.likes,
            comments: r.comments,
            score: r.likes.map(|_| r.score),
        })
        .collect();
    Ok(Json(TrendingPage { items, next_cursor: None }))
}
