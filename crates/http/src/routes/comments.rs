//! Comments: write, list (keyset pages), replies, delete, like.

use crate::AppState;
use crate::auth::Viewer;
use crate::dto::{CommentCreate, CommentDto, CommentsPage, LikeResponse, rfc3339_ms};
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, NoBody, PathParams, QueryParams};
use crate::paging::parse_limit;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use likewise_core::comment::id::id_timestamp_ms;
use likewise_core::comment::idempotency::IdempotencyKey;
use likewise_core::ids::{CommentId, PostId};
use likewise_core::like::LikeAction;
use likewise_service::comments::{CommentPage, CommentView, Order, Reader};
use likewise_service::ranking::TopCursor;
use serde::Deserialize;
use std::sync::Arc;
use utoipa::IntoParams;

/// Cursor kind bytes.
const COMMENTS_CURSOR: u8 = 2;
const REPLIES_CURSOR: u8 = 3;
const TOP_CURSOR: u8 = 5;

fn seal_top(state: &AppState, post: PostId, c: TopCursor) -> String {
    let mut p = Vec::with_capacity(41);
    p.extend_from_slice(&post.0.to_be_bytes());
    p.push(if c.version.is_some() { 4 } else { 3 });
    p.extend_from_slice(&c.score.to_bits().to_be_bytes());
    p.extend_from_slice(&c.id.0.to_be_bytes());
    p.extend_from_slice(&c.bound.to_be_bytes());
    if let Some(v) = c.version {
        p.extend_from_slice(&v.to_be_bytes());
    }
    state.cursors.seal(TOP_CURSOR, &p)
}

/// A sealed top cursor: `post | 4 | viewer score | comment | bound | index version`, or
/// `post | 3 | viewer score | comment | bound` as issued before versions (still continued,
/// ranked as of each page). Kinds 1 and 2 were the per-node snapshot cursors of earlier
/// versions, refused as invalid.
fn open_top(state: &AppState, post: PostId, cursor: &str) -> Result<TopCursor, ApiError> {
    let bad = || ApiError::invalid("invalid cursor");
    let p = state.cursors.open(TOP_CURSOR, cursor)?;
    let versioned = match (p.len(), p.get(8)) {
        (41, Some(4)) => true,
        (33, Some(3)) => false,
        _ => return Err(bad()),
    };
    if p[..8] != post.0.to_be_bytes() {
        return Err(bad());
    }
    let u = |at: usize| -> Result<u64, ApiError> {
        p.get(at..at + 8).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes).ok_or_else(bad)
    };
    let score = f64::from_bits(u(9)?);
    if score.is_nan() {
        return Err(bad());
    }
    let version = if versioned { Some(u(33)?) } else { None };
    Ok(TopCursor { score, id: CommentId(u(17)?), bound: u(25)?, version })
}

async fn list_top(
    state: &AppState,
    viewer: Viewer,
    post: PostId,
    q: &CommentsQuery,
) -> ApiResult<Json<CommentsPage>> {
    let limit = parse_limit(q.limit.as_deref())?;
    let cursor = q.cursor.as_deref().map(|c| open_top(state, post, c)).transpose()?;
    let page = state.svc.ranking.list_top(reader(viewer), post, cursor, limit).await?;
    Ok(Json(CommentsPage {
        items: page.items.into_iter().map(to_dto).collect(),
        next_cursor: page.next.map(|c| seal_top(state, post, c)),
    }))
}

/// Convert a service view to the contract's shape.
pub fn to_dto(v: CommentView) -> CommentDto {
    let r = v.record;
    CommentDto {
        comment_id: r.id,
        post_id: r.post,
        author_id: r.author,
        author_username: v.author_username,
        parent_id: r.parent,
        reply_to_user_id: r.reply_to_user,
        text: r.text,
        status: r.status.as_str().to_string(),
        like_count: v.like_count,
        reply_count: v.reply_count,
        viewer_has_liked: v.viewer_has_liked,
        pinned: v.pinned,
        created_at: rfc3339_ms(id_timestamp_ms(r.id)),
    }
}

fn reader(v: Viewer) -> Reader {
    Reader { user: v.0.user, moderator: v.0.service }
}

/// Cursor payload: the scope (post or parent ID), the order byte and the last ID scanned.
fn seal(state: &AppState, kind: u8, scope: u64, order: u8, after: CommentId) -> String {
    let mut p = Vec::with_capacity(17);
    p.extend_from_slice(&scope.to_be_bytes());
    p.push(order);
    p.extend_from_slice(&after.0.to_be_bytes());
    state.cursors.seal(kind, &p)
}

fn open(
    state: &AppState,
    kind: u8,
    scope: u64,
    order: u8,
    cursor: Option<&str>,
) -> Result<Option<CommentId>, ApiError> {
    let Some(c) = cursor else { return Ok(None) };
    let p = state.cursors.open(kind, c)?;
    if p.len() != 17 || p[..8] != scope.to_be_bytes() || p[8] != order {
        return Err(ApiError::invalid("invalid cursor"));
    }
    let mut a = [0u8; 8];
    a.copy_from_slice(&p[9..17]);
    Ok(Some(CommentId(u64::from_be_bytes(a))))
}

fn page_dto(state: &AppState, kind: u8, scope: u64, order: u8, page: CommentPage) -> CommentsPage {
    CommentsPage {
        next_cursor: page.next_after.map(|a| seal(state, kind, scope, order, a)),
        items: page.items.into_iter().map(to_dto).collect(),
    }
}

/// Write a comment or a reply. Retries are safe with an `Idempotency-Key` header: a repeat
/// with the same key and body answers the first call's status and body and creates nothing.
#[utoipa::path(post, path = "/v1/posts/{post_id}/comments", operation_id = "create_comment", tag = "comments",
    params(("post_id" = String, Path),
        ("Idempotency-Key" = Option<String>, Header, description = "1 to 255 visible ASCII characters, \
            scoped to the caller and kept at least 24 h: a repeat with the same key and body answers \
            the first call's status and body and creates nothing; the same key with another body is a \
            422; a repeat while the first call is still running is a 409.")),
    request_body = CommentCreate,
    responses((status = 201, body = CommentDto), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 403, body = crate::error::ErrorBody),
        (status = 404, body = crate::error::ErrorBody), (status = 409, body = crate::error::ErrorBody),
        (status = 422, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn create(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    PathParams(post): PathParams<PostId>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<CommentCreate>,
) -> ApiResult<(StatusCode, Json<CommentDto>)> {
    let key = idempotency_key(&headers)?;
    let v = state.svc.comments.create(viewer.0.user, post, &body.text, body.parent_id, key).await?;
    Ok((StatusCode::CREATED, Json(to_dto(v))))
}

/// The request's `Idempotency-Key`, if it sent one: exactly one header of 1..=255 visible
/// ASCII characters, else a 400.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, ApiError> {
    let mut values = headers.get_all("idempotency-key").iter();
    let Some(v) = values.next() else { return Ok(None) };
    if values.next().is_some() {
        return Err(ApiError::invalid("send one Idempotency-Key header, not several"));
    }
    IdempotencyKey::parse(v.as_bytes()).map(Some).map_err(|e| ApiError::invalid(e.to_string()))
}

/// `GET /v1/posts/{post_id}/comments` query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CommentsQuery {
    /// `top` (default: ranked for the viewer, pinned first), `newest` or `oldest` (keyset
    /// pages by ID).
    pub order: Option<String>,
    /// 1..=100, default 20.
    pub limit: Option<String>,
    /// Opaque cursor from a previous page.
    pub cursor: Option<String>,
}

/// Top-level comments of a post.
#[utoipa::path(get, path = "/v1/posts/{post_id}/comments", operation_id = "list_comments", tag = "comments",
    params(("post_id" = String, Path), CommentsQuery),
    responses((status = 200, body = CommentsPage), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 404, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn list(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    PathParams(post): PathParams<PostId>,
    QueryParams(q): QueryParams<CommentsQuery>,
) -> ApiResult<Json<CommentsPage>> {
    let (order, code) = match q.order.as_deref() {
        Some("newest") => (Order::Newest, 1u8),
        Some("oldest") => (Order::Oldest, 2u8),
        Some("top") | None => return list_top(&state, viewer, post, &q).await,
        Some(other) => {
            return Err(ApiError::invalid(format!("unknown order {other:?}: use top, newest or oldest")));
        }
    };
    let limit = parse_limit(q.limit.as_deref())?;
    let after = open(&state, COMMENTS_CURSOR, post.0, code, q.cursor.as_deref())?;
    let page = state.svc.comments.list(reader(viewer), post, order, after, limit).await?;
    Ok(Json(page_dto(&state, COMMENTS_CURSOR, post.0, code, page)))
}

/// Paging query of replies.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RepliesQuery {
    /// 1..=100, default 20.
    pub limit: Option<String>,
    /// Opaque cursor from a previous page.
    pub cursor: Option<String>,
}

/// Replies under a top-level comment, oldest first.
#[utoipa::path(get, path = "/v1/comments/{comment_id}/replies", operation_id = "list_replies", tag = "comments",
    params(("comment_id" = String, Path), RepliesQuery),
    responses((status = 200, body = CommentsPage), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 404, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn replies(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    PathParams(parent): PathParams<CommentId>,
    QueryParams(q): QueryParams<RepliesQuery>,
) -> ApiResult<Json<CommentsPage>> {
    let limit = parse_limit(q.limit.as_deref())?;
    let after = open(&state, REPLIES_CURSOR, parent.0, 0, q.cursor.as_deref())?;
    let page = state.svc.comments.replies(reader(viewer), parent, after, limit).await?;
    Ok(Json(page_dto(&state, REPLIES_CURSOR, parent.0, 0, page)))
}

/// Delete a comment (its author or the post's author).
#[utoipa::path(delete, path = "/v1/comments/{comment_id}", operation_id = "delete_comment", tag = "comments",
    params(("comment_id" = String, Path)),
    responses((status = 204), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 403, body = crate::error::ErrorBody),
        (status = 404, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn delete(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    PathParams(id): PathParams<CommentId>,
) -> ApiResult<StatusCode> {
    state.svc.comments.delete(reader(viewer), id).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn set_like(
    state: &AppState,
    viewer: Viewer,
    id: CommentId,
    action: LikeAction,
) -> ApiResult<Json<LikeResponse>> {
    let r = state.svc.likes.set_comment_like(viewer.0.user, id, action).await?;
    Ok(Json(LikeResponse { liked: r.liked, changed: r.changed }))
}

/// Like a comment (idempotent).
#[utoipa::path(put, path = "/v1/comments/{comment_id}/like", operation_id = "like_comment", tag = "likes",
    params(("comment_id" = String, Path)),
    responses((status = 200, body = LikeResponse), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 403, body = crate::error::ErrorBody),
        (status = 404, body = crate::error::ErrorBody),
        (status = 422, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn like(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    PathParams(id): PathParams<CommentId>,
    _: NoBody,
) -> ApiResult<Json<LikeResponse>> {
    set_like(&state, viewer, id, LikeAction::Like).await
}

/// Remove a like from a comment (idempotent; never refused for a block).
#[utoipa::path(delete, path = "/v1/comments/{comment_id}/like", operation_id = "unlike_comment", tag = "likes",
    params(("comment_id" = String, Path)),
    responses((status = 200, body = LikeResponse), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 404, body = crate::error::ErrorBody),
        (status = 422, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn unlike(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    PathParams(id): PathParams<CommentId>,
    _: NoBody,
) -> ApiResult<Json<LikeResponse>> {
    set_like(&state, viewer, id, LikeAction::Unlike).await
}
