//! Likes of posts, and the likers list.

use crate::AppState;
use crate::auth::Viewer;
use crate::dto::{LikeResponse, LikerDto, LikersPage, rfc3339_ms};
use crate::error::{ApiError, ApiResult};
use crate::extract::{NoBody, PathParams, QueryParams};
use crate::paging::{PageQuery, parse_limit};
use axum::Json;
use axum::extract::State;
use likewise_core::ids::{PostId, UserId};
use likewise_core::like::LikeAction;
use likewise_core::ports::Liker;
use std::sync::Arc;

/// Cursor kind byte of the likers list.
const LIKERS_CURSOR: u8 = 1;

async fn set(
    state: &AppState,
    viewer: Viewer,
    post: PostId,
    action: LikeAction,
) -> ApiResult<Json<LikeResponse>> {
    let r = state.svc.likes.set_post_like(viewer.0.user, post, action).await?;
    Ok(Json(LikeResponse { liked: r.liked, changed: r.changed }))
}

/// Like a post (idempotent: a retry answers `changed: false`).
#[utoipa::path(put, path = "/v1/posts/{post_id}/like", operation_id = "like_post", tag = "likes",
    params(("post_id" = String, Path)),
    responses((status = 200, body = LikeResponse), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 403, body = crate::error::ErrorBody),
        (status = 404, body = crate::error::ErrorBody),
        (status = 422, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn like(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    PathParams(post): PathParams<PostId>,
    _: NoBody,
) -> ApiResult<Json<LikeResponse>> {
    set(&state, viewer, post, LikeAction::Like).await
}

/// Remove a like (idempotent; never refused for a block, so a blocked user can take back an
/// earlier like).
#[utoipa::path(delete, path = "/v1/posts/{post_id}/like", operation_id = "unlike_post", tag = "likes",
    params(("post_id" = String, Path)),
    responses((status = 200, body = LikeResponse), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 404, body = crate::error::ErrorBody),
        (status = 422, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn unlike(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    PathParams(post): PathParams<PostId>,
    _: NoBody,
) -> ApiResult<Json<LikeResponse>> {
    set(&state, viewer, post, LikeAction::Unlike).await
}

/// Likers of a post, newest first.
#[utoipa::path(get, path = "/v1/posts/{post_id}/likers", operation_id = "list_post_likers", tag = "likes",
    params(("post_id" = String, Path), PageQuery),
    responses((status = 200, body = LikersPage), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 404, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn likers(
    State(state): State<Arc<AppState>>,
    _viewer: Viewer,
    PathParams(post): PathParams<PostId>,
    QueryParams(q): QueryParams<PageQuery>,
) -> ApiResult<Json<LikersPage>> {
    let limit = parse_limit(q.limit.as_deref())?;
    let after = match q.cursor.as_deref() {
        None => None,
        Some(c) => {
            let p = state.cursors.open(LIKERS_CURSOR, c)?;
            if p.len() != 24 || p[..8] != post.0.to_be_bytes() {
                return Err(ApiError::invalid("invalid cursor"));
            }
            let n = |i: usize| u64::from_be_bytes(p[i..i + 8].try_into().unwrap_or([0; 8]));
            Some(Liker { liked_at_ms: n(8), user: UserId(n(16)) })
        }
    };
    let page = state.svc.likes.post_likers(post, after, limit).await?;
    let next_cursor = page.next.map(|l| {
        let mut p = Vec::with_capacity(24);
        p.extend_from_slice(&post.0.to_be_bytes());
        p.extend_from_slice(&l.liked_at_ms.to_be_bytes());
        p.extend_from_slice(&l.user.0.to_be_bytes());
        state.cursors.seal(LIKERS_CURSOR, &p)
    });
    let items = page
        .items
        .into_iter()
        .map(|(l, username)| LikerDto { user_id: l.user, username, liked_at: rfc3339_ms(l.liked_at_ms) })
        .collect();
    Ok(Json(LikersPage { items, next_cursor }))
}
