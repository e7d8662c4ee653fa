//! Viewer moderation settings (hidden words, blocks, restricts), reports, approvals, pins and
//! the moderators' review queue.

use crate::AppState;
use crate::auth::{Service, Viewer};
use crate::dto::{
    AppealCreate, CommentDto, HiddenWordsDto, ModerationAction, ModerationDecision, QueueItem, QueuePage,
    ReportCreate, ReportReasonDto,
};
use crate::error::{ApiError, ApiResult};
use crate::extract::{BodyBytes, JsonBody, PathParams, QueryParams, parse_json};
use crate::paging::{PageQuery, parse_limit};
use crate::routes::comments::to_dto;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::ports::ReportReason;
use likewise_service::comments::Reader;
use likewise_service::review::Decision;
use std::sync::Arc;

const QUEUE_CURSOR: u8 = 4;

/// Replace the viewer's hidden words.
#[utoipa::path(put, path = "/v1/me/hidden-words", operation_id = "put_hidden_words", tag = "me", request_body = HiddenWordsDto,
    responses((status = 200, body = HiddenWordsDto), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 422, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn put_hidden_words(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    JsonBody(body): JsonBody<HiddenWordsDto>,
) -> ApiResult<Json<HiddenWordsDto>> {
    // The list as stored (invisible characters dropped), so the answer shows what is matched.
    let words = state.svc.moderation.put_hidden_words(viewer.0.user, body.words).await?;
    Ok(Json(HiddenWordsDto { words }))
}

macro_rules! toggle {
    ($name:ident, $op:literal, $method:ident, $path:literal, $call:ident, $on:expr, $doc:literal) => {
        #[doc = $doc]
        #[utoipa::path($method, path = $path, operation_id = $op, tag = "me", params(("user_id" = String, Path)),
                                    responses((status = 204), (status = 400, body = crate::error::ErrorBody),
                                        (status = 401, body = crate::error::ErrorBody), (status = 403, body = crate::error::ErrorBody)),
                                    security(("bearer" = [])))]
        pub async fn $name(
            State(state): State<Arc<AppState>>,
            viewer: Viewer,
            PathParams(other): PathParams<UserId>,
        ) -> ApiResult<StatusCode> {
            if other == viewer.0.user {
                // Refused like Mastodon refuses following yourself: understood, not allowed.
                return Err(ApiError::forbidden("you cannot do that to yourself"));
            }
            state.svc.moderation.$call(viewer.0.user, other, $on).await?;
            Ok(StatusCode::NO_CONTENT)
        }
    };
}

toggle!(
    block,
    "block_user",
    put,
    "/v1/me/blocks/{user_id}",
    set_block,
    true,
    "Block a user from commenting on and liking my posts."
);
toggle!(unblock, "unblock_user", delete, "/v1/me/blocks/{user_id}", set_block, false, "Unblock a user.");
toggle!(
    restrict,
    "restrict_user",
    put,
    "/v1/me/restricts/{user_id}",
    set_restrict,
    true,
    "Restrict a user: their comments on my posts wait for my approval."
);
toggle!(
    unrestrict,
    "unrestrict_user",
    delete,
    "/v1/me/restricts/{user_id}",
    set_restrict,
    false,
    "Stop restricting a user."
);

/// Report a comment.
#[utoipa::path(post, path = "/v1/comments/{comment_id}/reports", operation_id = "report_comment", tag = "comments",
    params(("comment_id" = String, Path)), request_body = ReportCreate,
    responses((status = 202), (status = 400, body = crate::error::ErrorBody), (status = 401, body = crate::error::ErrorBody),
        (status = 404, body = crate::error::ErrorBody), (status = 422, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn report(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    PathParams(id): PathParams<CommentId>,
    JsonBody(body): JsonBody<ReportCreate>,
) -> ApiResult<StatusCode> {
    let reason = match body.reason {
        ReportReasonDto::Spam => ReportReason::Spam,
        ReportReasonDto::Bullying => ReportReason::Bullying,
        ReportReasonDto::Other => ReportReason::Other,
    };
    let reader = Reader { user: viewer.0.user, moderator: viewer.0.service };
    state.svc.review.report(reader, id, reason).await?;
    Ok(StatusCode::ACCEPTED)
}

/// The comment's author appeals a decision about it (once). 202 whatever the comment's
/// status; anyone else gets a 404.
#[utoipa::path(post, path = "/v1/comments/{comment_id}/appeal", operation_id = "appeal_comment", tag = "comments",
    params(("comment_id" = String, Path)), request_body(content = AppealCreate, description = "Optional: the body, and the message in it, may be left out."),
    responses((status = 202), (status = 400, body = crate::error::ErrorBody), (status = 401, body = crate::error::ErrorBody),
        (status = 404, body = crate::error::ErrorBody), (status = 409, body = crate::error::ErrorBody),
        (status = 422, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn appeal(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    PathParams(id): PathParams<CommentId>,
    BodyBytes(body): BodyBytes,
) -> ApiResult<StatusCode> {
    // The message is optional, and so is the body that carries it.
    let body: AppealCreate =
        if body.iter().all(u8::is_ascii_whitespace) { AppealCreate::default() } else { parse_json(&body)? };
    state.svc.review.appeal(viewer.0.user, id, body.message.as_deref()).await?;
    Ok(StatusCode::ACCEPTED)
}

/// The post's author approves a restricted or pending comment.
#[utoipa::path(post, path = "/v1/comments/{comment_id}/approve", operation_id = "approve_comment", tag = "comments",
    params(("comment_id" = String, Path)),
    responses((status = 200, body = CommentDto), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 403, body = crate::error::ErrorBody),
        (status = 404, body = crate::error::ErrorBody), (status = 409, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn approve(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    PathParams(id): PathParams<CommentId>,
) -> ApiResult<Json<CommentDto>> {
    Ok(Json(to_dto(state.svc.review.approve(viewer.0.user, id).await?)))
}

async fn pin_impl(
    state: &AppState,
    viewer: Viewer,
    post: PostId,
    id: CommentId,
    on: bool,
) -> ApiResult<StatusCode> {
    state.svc.review.set_pin(viewer.0.user, post, id, on).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Pin a comment on my post (at most 3).
#[utoipa::path(put, path = "/v1/posts/{post_id}/pins/{comment_id}", operation_id = "pin_comment", tag = "comments",
    params(("post_id" = String, Path), ("comment_id" = String, Path)),
    responses((status = 204), (status = 400, body = crate::error::ErrorBody), (status = 401, body = crate::error::ErrorBody),
        (status = 403, body = crate::error::ErrorBody), (status = 404, body = crate::error::ErrorBody),
        (status = 409, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn pin(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    PathParams((post, id)): PathParams<(PostId, CommentId)>,
) -> ApiResult<StatusCode> {
    pin_impl(&state, viewer, post, id, true).await
}

/// Unpin a comment.
#[utoipa::path(delete, path = "/v1/posts/{post_id}/pins/{comment_id}", operation_id = "unpin_comment", tag = "comments",
    params(("post_id" = String, Path), ("comment_id" = String, Path)),
    responses((status = 204), (status = 400, body = crate::error::ErrorBody), (status = 401, body = crate::error::ErrorBody),
        (status = 403, body = crate::error::ErrorBody), (status = 404, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn unpin(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    PathParams((post, id)): PathParams<(PostId, CommentId)>,
) -> ApiResult<StatusCode> {
    pin_impl(&state, viewer, post, id, false).await
}

/// The review queue (service role).
#[utoipa::path(get, path = "/v1/moderation/queue", operation_id = "list_moderation_queue", tag = "moderation", params(PageQuery),
    responses((status = 200, body = QueuePage), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 403, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn queue(
    State(state): State<Arc<AppState>>,
    svc: Service,
    QueryParams(q): QueryParams<PageQuery>,
) -> ApiResult<Json<QueuePage>> {
    let limit = parse_limit(q.limit.as_deref())?;
    let after = match q.cursor.as_deref() {
        None => None,
        Some(c) => {
            let p = state.cursors.open(QUEUE_CURSOR, c)?;
            let a: [u8; 8] = p.as_slice().try_into().map_err(|_| ApiError::invalid("invalid cursor"))?;
            Some(CommentId(u64::from_be_bytes(a)))
        }
    };
    let (items, next) = state.svc.review.queue(svc.0.user, after, limit).await?;
    Ok(Json(QueuePage {
        items: items
            .into_iter()
            .map(|e| QueueItem {
                comment: to_dto(e.view),
                report_count: e.report_count,
                held_by: e.note.held_by.map(Into::into),
                appealed: e.note.appeal.is_some(),
                appeal_message: e.note.appeal,
            })
            .collect(),
        next_cursor: next.map(|n| state.cursors.seal(QUEUE_CURSOR, &n.0.to_be_bytes())),
    }))
}

/// Approve or hide a comment (service role).
#[utoipa::path(post, path = "/v1/moderation/comments/{comment_id}", operation_id = "moderate_comment", tag = "moderation",
    params(("comment_id" = String, Path)), request_body = ModerationDecision,
    responses((status = 200, body = CommentDto), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 403, body = crate::error::ErrorBody),
        (status = 404, body = crate::error::ErrorBody), (status = 409, body = crate::error::ErrorBody),
        (status = 422, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn decide(
    State(state): State<Arc<AppState>>,
    svc: Service,
    PathParams(id): PathParams<CommentId>,
    JsonBody(body): JsonBody<ModerationDecision>,
) -> ApiResult<Json<CommentDto>> {
    let d = match body.action {
        ModerationAction::Approve => Decision::Approve,
        ModerationAction::Hide => Decision::Hide,
    };
    Ok(Json(to_dto(state.svc.review.moderate(svc.0.user, id, d).await?)))
}
