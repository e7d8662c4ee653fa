//! Upstream data pushed by its owners (service role): users, posts, follows.

use crate::AppState;
use crate::auth::Service;
use crate::dto::{CommentsSetting, PostPut, PostRecord, UserPut, UserRecord};
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, PathParams};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use likewise_core::ids::{PostId, UserId};
use likewise_core::model::{CommentsPolicy, PostMeta, UserProfile};
use std::sync::Arc;

/// Longest username accepted.
pub const MAX_USERNAME: usize = 64;

/// Register or update a user's profile.
#[utoipa::path(put, path = "/v1/users/{user_id}", tag = "upstream",
    params(("user_id" = String, Path, description = "User ID")),
    request_body = UserPut,
    responses((status = 200, body = UserRecord), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 403, body = crate::error::ErrorBody),
        (status = 422, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn put_user(
    State(state): State<Arc<AppState>>,
    _svc: Service,
    PathParams(user): PathParams<UserId>,
    JsonBody(body): JsonBody<UserPut>,
) -> ApiResult<Json<UserRecord>> {
    let Some(name) = valid_username(&body.username) else {
        return Err(ApiError::unprocessable(format!(
            "username must be 1 to {MAX_USERNAME} characters without control characters"
        )));
    };
    let profile = UserProfile { username: name.to_string(), verified: body.verified };
    state.svc.put_user(user, profile).await?;
    Ok(Json(UserRecord { user_id: user, username: name.to_string(), verified: body.verified }))
}

/// The name to store, if `raw` is a valid username: at most [`MAX_USERNAME`] characters as
/// sent (what the OpenAPI schema's maxLength says), then trimmed of surrounding whitespace,
/// leaving at least one character and no control character. The OpenAPI pattern states the
/// same rule (`openapi.rs`, tested against this function).
pub fn valid_username(raw: &str) -> Option<&str> {
    let name = raw.trim();
    let ok = !name.is_empty() && raw.chars().count() <= MAX_USERNAME && !name.chars().any(char::is_control);
    ok.then_some(name)
}

/// Register or update a post.
#[utoipa::path(put, path = "/v1/posts/{post_id}", tag = "upstream",
    params(("post_id" = String, Path, description = "Post ID")),
    request_body = PostPut,
    responses((status = 200, body = PostRecord), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 403, body = crate::error::ErrorBody),
        (status = 422, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn put_post(
    State(state): State<Arc<AppState>>,
    _svc: Service,
    PathParams(post): PathParams<PostId>,
    JsonBody(body): JsonBody<PostPut>,
) -> ApiResult<Json<PostRecord>> {
    let comments = match body.comments {
        CommentsSetting::Everyone => CommentsPolicy::Everyone,
        CommentsSetting::Followers => CommentsPolicy::Followers,
        CommentsSetting::Off => CommentsPolicy::Off,
    };
    let meta = PostMeta { author: body.author_id, hide_like_count: body.hide_like_count, comments };
    state.svc.put_post(post, meta).await?;
    Ok(Json(PostRecord {
        post_id: post,
        author_id: body.author_id,
        hide_like_count: body.hide_like_count,
        comments: body.comments,
    }))
}

/// `user_id` follows `other_id`.
#[utoipa::path(put, path = "/v1/users/{user_id}/follows/{other_id}", tag = "upstream",
    params(("user_id" = String, Path), ("other_id" = String, Path)),
    responses((status = 204), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 403, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn follow(
    State(state): State<Arc<AppState>>,
    _svc: Service,
    PathParams((user, other)): PathParams<(UserId, UserId)>,
) -> ApiResult<StatusCode> {
    state.svc.set_follow(user, other, true).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `user_id` stops following `other_id`.
#[utoipa::path(delete, path = "/v1/users/{user_id}/follows/{other_id}", tag = "upstream",
    params(("user_id" = String, Path), ("other_id" = String, Path)),
    responses((status = 204), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 403, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn unfollow(
    State(state): State<Arc<AppState>>,
    _svc: Service,
    PathParams((user, other)): PathParams<(UserId, UserId)>,
) -> ApiResult<StatusCode> {
    state.svc.set_follow(user, other, false).await?;
    Ok(StatusCode::NO_CONTENT)
}
