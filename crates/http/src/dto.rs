//! JSON shapes of the API (`API.md`), with their OpenAPI schemas. IDs are decimal strings.

use likewise_core::ids::{CommentId, PostId, UserId};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Answer to a like or unlike.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LikeResponse {
    /// State after the call.
    pub liked: bool,
    /// True only when this call created (or removed) the like.
    pub changed: bool,
}

/// A comment (comments arrive with the comments feature; the shape is fixed by the contract).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CommentDto {
    #[schema(value_type = String, example = "7260000000000001")]
    pub comment_id: CommentId,
    #[schema(value_type = String)]
    pub post_id: PostId,
    #[schema(value_type = String)]
    pub author_id: UserId,
    pub author_username: String,
    #[schema(value_type = Option<String>)]
    pub parent_id: Option<CommentId>,
    #[schema(value_type = Option<String>)]
    pub reply_to_user_id: Option<UserId>,
    pub text: String,
    /// `visible`, `pending`, `hidden_by_filter`, `restricted` or `deleted`.
    pub status: String,
    pub like_count: i64,
    pub reply_count: i64,
    pub viewer_has_liked: bool,
    pub pinned: bool,
    /// RFC 3339 UTC.
    pub created_at: String,
}

/// `POST /v1/posts/{post_id}/comments` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CommentCreate {
    /// 1 to 2,200 characters after trimming.
    pub text: String,
    /// Reply to this comment (a reply to a reply goes under the same top-level parent).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub parent_id: Option<CommentId>,
}

/// `PUT /v1/me/hidden-words` body and answer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HiddenWordsDto {
    /// Up to 1,000 words or phrases of up to 64 characters.
    pub words: Vec<String>,
}

/// Why a comment is reported.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReportReasonDto {
    Spam,
    Bullying,
    Other,
}

/// `POST /v1/comments/{comment_id}/reports` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportCreate {
    pub reason: ReportReasonDto,
}

/// A moderator's action.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ModerationAction {
    Approve,
    Hide,
}

/// `POST /v1/moderation/comments/{comment_id}` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModerationDecision {
    pub action: ModerationAction,
}

/// A comment awaiting a decision, with its real status and report count.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct QueueItem {
    #[serde(flatten)]
    pub comment: CommentDto,
    pub report_count: u32,
}

/// The review queue.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct QueuePage {
    pub items: Vec<QueueItem>,
    /// Opaque; null on the last page.
    pub next_cursor: Option<String>,
}

/// A page of comments.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CommentsPage {
    pub items: Vec<CommentDto>,
    /// Opaque; null on the last page.
    pub next_cursor: Option<String>,
}

/// A post as one viewer sees it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PostViewDto {
    #[schema(value_type = String, example = "42")]
    pub post_id: PostId,
    #[schema(value_type = String, example = "7")]
    pub author_id: UserId,
    /// Null when the count is hidden from this viewer.
    pub like_count: Option<i64>,
    /// Rounded count ("12.3K"); null when hidden.
    pub like_count_text: Option<String>,
    /// Visible comments only.
    pub comment_count: i64,
    /// True right after this viewer's own like (read-your-writes).
    pub viewer_has_liked: bool,
    /// Up to three likers, people the viewer follows first.
    pub liked_by: Vec<String>,
    /// Top comments for this viewer.
    pub preview_comments: Vec<CommentDto>,
    /// May this viewer comment.
    pub comments_enabled: bool,
}

/// `GET /v1/posts` answer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PostsResponse {
    pub posts: Vec<PostViewDto>,
}

/// One liker.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LikerDto {
    #[schema(value_type = String)]
    pub user_id: UserId,
    pub username: String,
    /// RFC 3339 UTC.
    pub liked_at: String,
}

/// A page of likers.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LikersPage {
    pub items: Vec<LikerDto>,
    /// Opaque; null on the last page.
    pub next_cursor: Option<String>,
}

/// `PUT /v1/users/{user_id}` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UserPut {
    /// 1 to 64 characters, no control characters.
    pub username: String,
    #[serde(default)]
    pub verified: bool,
}

/// Who may comment on a post.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum CommentsSetting {
    #[default]
    Everyone,
    Followers,
    Off,
}

/// `PUT /v1/posts/{post_id}` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PostPut {
    #[schema(value_type = String)]
    pub author_id: UserId,
    #[serde(default)]
    pub hide_like_count: bool,
    #[serde(default)]
    pub comments: CommentsSetting,
}

/// Stored upstream record, echoed back.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PostRecord {
    #[schema(value_type = String)]
    pub post_id: PostId,
    #[schema(value_type = String)]
    pub author_id: UserId,
    pub hide_like_count: bool,
    pub comments: CommentsSetting,
}

/// Stored user, echoed back.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct UserRecord {
    #[schema(value_type = String)]
    pub user_id: UserId,
    pub username: String,
    pub verified: bool,
}

/// A viewer's settings (`PUT /v1/me/settings` body and answer).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SettingsDto {
    pub hide_like_counts: bool,
}

/// A post's insights (its author only).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct InsightsDto {
    /// Exact like count, also when hidden from others.
    pub like_count: i64,
    /// Visible comments.
    pub comment_count: i64,
    /// Distinct viewers, approximate (HyperLogLog, standard error under 1%).
    pub unique_viewers: u64,
}

/// An inbox item.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct NotificationDto {
    pub id: String,
    /// `post_liked`, `comment_liked`, `commented` or `replied`.
    pub kind: String,
    #[schema(value_type = String)]
    pub post_id: PostId,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub comment_id: Option<CommentId>,
    /// Up to two names, people the recipient follows first.
    pub actors: Vec<String>,
    /// Distinct actors.
    pub actor_count: u64,
    /// "alice, bob and 22 others liked your post".
    pub text: String,
    /// RFC 3339 UTC.
    pub updated_at: String,
}

/// A page of notifications.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct NotificationsPage {
    pub items: Vec<NotificationDto>,
    /// Opaque; null on the last page.
    pub next_cursor: Option<String>,
}

/// `/healthz` answer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok`, or `unavailable` with a 503.
    pub status: String,
}

/// Milliseconds since the epoch as RFC 3339 UTC.
pub fn rfc3339_ms(ms: u64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_ms(1_795_000_000_123), "2026-11-18T11:06:40.123Z");
    }
}
