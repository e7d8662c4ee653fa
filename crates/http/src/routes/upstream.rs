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
#[utoipa::path(put, path = "/v1/users/{user_id}", operation_id = "put_user", tag = "upstream",
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
    let name = check_username(&body.username)?;
    let profile = UserProfile { username: name.clone(), verified: body.verified };
    state.svc.upstream.put_user(user, profile).await?;
    Ok(Json(UserRecord { user_id: user, username: name, verified: body.verified }))
}

/// The name to store, if `raw` is a valid username (see [`check_username`]).
pub fn valid_username(raw: &str) -> Option<String> {
    check_username(raw).ok()
}

/// The name to store for `raw`: at most [`MAX_USERNAME`] characters as sent (what the
/// OpenAPI schema's maxLength says), then trimmed of surrounding whitespace, leaving at least
/// one character and no control character (422 otherwise); no bidi control, no invisible
/// character but the joiners and selectors of emoji sequences, and at least one visible
/// character (400 otherwise: these are the spoofing attempts, such as `adm\u{202E}nimi`,
/// `al\u{200B}ice` or a name of zero-width spaces; `likewise_core::names`); stored in Unicode
/// NFC, so one name has one spelling. The OpenAPI pattern states the same rule
/// (`openapi.rs`, tested against this function).
pub fn check_username(raw: &str) -> Result<String, ApiError> {
    use likewise_core::names::{is_bidi_control, is_clean_name, is_invisible};
    use unicode_normalization::UnicodeNormalization;
    let name = raw.trim();
    if name.is_empty() || raw.chars().count() > MAX_USERNAME || name.chars().any(char::is_control) {
        return Err(ApiError::unprocessable(format!(
            "username must be 1 to {MAX_USERNAME} characters without control characters"
        )));
    }
    if name.chars().any(is_bidi_control) {
        return Err(ApiError::invalid("username must not contain text-direction controls"));
    }
    if name.chars().all(is_invisible) {
        return Err(ApiError::invalid("username must contain a visible character"));
    }
    if !is_clean_name(name) {
        return Err(ApiError::invalid("username must not contain invisible characters"));
    }
    Ok(name.nfc().collect())
}

/// Register or update a post.
#[utoipa::path(put, path = "/v1/posts/{post_id}", operation_id = "put_post", tag = "upstream",
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
    state.svc.upstream.put_post(post, meta).await?;
    Ok(Json(PostRecord {
        post_id: post,
        author_id: body.author_id,
        hide_like_count: body.hide_like_count,
        comments: body.comments,
    }))
}

/// `user_id` follows `other_id`.
#[utoipa::path(put, path = "/v1/users/{user_id}/follows/{other_id}", operation_id = "follow_user", tag = "upstream",
    params(("user_id" = String, Path), ("other_id" = String, Path)),
    responses((status = 204), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 403, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn follow(
    State(state): State<Arc<AppState>>,
    _svc: Service,
    PathParams((user, other)): PathParams<(UserId, UserId)>,
) -> ApiResult<StatusCode> {
    state.svc.upstream.set_follow(user, other, true).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `user_id` stops following `other_id`.
#[utoipa::path(delete, path = "/v1/users/{user_id}/follows/{other_id}", operation_id = "unfollow_user", tag = "upstream",
    params(("user_id" = String, Path), ("other_id" = String, Path)),
    responses((status = 204), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 403, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn unfollow(
    State(state): State<Arc<AppState>>,
    _svc: Service,
    PathParams((user, other)): PathParams<(UserId, UserId)>,
) -> ApiResult<StatusCode> {
    state.svc.upstream.set_follow(user, other, false).await?;
    Ok(StatusCode::NO_CONTENT)
}
