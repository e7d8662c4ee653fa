//! JSON shapes of the API (`docs/api.md`), with their OpenAPI schemas. IDs are decimal strings.

use likewise_core::comment::appeal::HeldBy;
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

/// `POST /v1/comments/{comment_id}/appeal` body (it may also be empty).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AppealCreate {
    /// Why the decision should be reconsidered (at most 1,000 characters).
    #[serde(default)]
    pub message: Option<String>,
}

/// The layer (or person) holding a comment back.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum HeldByDto {
    Classifier,
    HiddenWords,
    NearDuplicate,
    Reports,
    Restricted,
    Moderator,
}

impl From<HeldBy> for HeldByDto {
    fn from(h: HeldBy) -> Self {
        match h {
            HeldBy::Classifier => HeldByDto::Classifier,
            HeldBy::HiddenWords => HeldByDto::HiddenWords,
            HeldBy::NearDuplicate => HeldByDto::NearDuplicate,
            HeldBy::Reports => HeldByDto::Reports,
            HeldBy::Restricted => HeldByDto::Restricted,
            HeldBy::Moderator => HeldByDto::Moderator,
        }
    }
}

/// A comment awaiting a decision, with its real status, report count, why it is held and the
/// author's appeal.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct QueueItem {
    #[serde(flatten)]
    pub comment: CommentDto,
    pub report_count: u32,
    /// Which layer holds it; null when none does (reported while still visible).
    pub held_by: Option<HeldByDto>,
    /// The author appealed.
    pub appealed: bool,
    /// The author's appeal message (null without an appeal; may be empty).
    pub appeal_message: Option<String>,
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

/// One trending post.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TrendingItem {
    #[schema(value_type = String)]
    pub post_id: PostId,
    /// Net likes in the window; null when the post's like count is hidden from this viewer
    /// (the post hides it, or the viewer's `hide_like_counts` is on, and the viewer is not its
    /// author), as `like_count` of a post.
    pub likes: Option<u64>,
    /// Net visible comments in the window.
    pub comments: u64,
    /// Engagement velocity: recent engagement weighs more. Null where `likes` is: the score
    /// weighs likes and comments, so with `comments` shown it would give the hidden count
    /// away (the list's order is all such a viewer learns).
    pub score: Option<f64>,
}

/// `GET /v1/trending`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TrendingPage {
    pub items: Vec<TrendingItem>,
    /// Always null: trending is one page.
    pub next_cursor: Option<String>,
}

/// `PUT /v1/users/{user_id}` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UserPut {
    /// 1 to 64 characters, no control characters, no text-direction controls, at least one
    /// visible character; surrounding whitespace is trimmed and the name stored in Unicode NFC.
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

/// Whose actions of one kind notify me.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum NotifPrefDto {
    /// Everyone's (default).
    All,
    /// Only people I follow.
    Following,
    /// No one's.
    Off,
}

impl From<NotifPrefDto> for likewise_core::model::NotifPref {
    fn from(p: NotifPrefDto) -> Self {
        match p {
            NotifPrefDto::All => Self::All,
            NotifPrefDto::Following => Self::Following,
            NotifPrefDto::Off => Self::Off,
        }
    }
}

impl From<likewise_core::model::NotifPref> for NotifPrefDto {
    fn from(p: likewise_core::model::NotifPref) -> Self {
        use likewise_core::model::NotifPref;
        match p {
            NotifPref::All => NotifPrefDto::All,
            NotifPref::Following => NotifPrefDto::Following,
            NotifPref::Off => NotifPrefDto::Off,
        }
    }
}

/// `GET|PUT /v1/me/notification-settings` answer: every kind.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct NotificationSettingsDto {
    pub post_liked: NotifPrefDto,
    pub comment_liked: NotifPrefDto,
    pub commented: NotifPrefDto,
    pub replied: NotifPrefDto,
}

impl From<likewise_core::model::NotifPrefs> for NotificationSettingsDto {
    fn from(n: likewise_core::model::NotifPrefs) -> Self {
        NotificationSettingsDto {
            post_liked: n.post_liked.into(),
            comment_liked: n.comment_liked.into(),
            commented: n.commented.into(),
            replied: n.replied.into(),
        }
    }
}

/// `PUT /v1/me/notification-settings` body: any subset of the kinds.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NotificationSettingsPut {
    pub post_liked: Option<NotifPrefDto>,
    pub comment_liked: Option<NotifPrefDto>,
    pub commented: Option<NotifPrefDto>,
    pub replied: Option<NotifPrefDto>,
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
    /// `ok` while the storage answers, or `unavailable` with a 503.
    pub status: String,
    /// Each dependency, `ok` or `down`: `storage` always; on the scale-out engines also
    /// `cache` (Redis) and `stream` (NATS JetStream). A down cache or stream does not make
    /// the answer a 503: requests still work, slower or with events waiting in the outbox.
    pub checks: std::collections::BTreeMap<String, String>,
}

/// `GET /v1/analytics/hourly`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AnalyticsHourly {
    /// The first hour covered (the `since` given, truncated to its UTC hour).
    pub since: String,
    /// The end of the span, exclusive.
    pub until: String,
    /// Set when the node's event log no longer holds every event of the span (it keeps
    /// `aggregator.retain_events`): the hours before its oldest event are incomplete.
    pub warning: Option<String>,
    /// The identity of the node's embedded store (its data directory's `store.id`); `null`
    /// on the scale-out engines. `likewise export analytics` compares it with its own data
    /// directory's before taking the rows.
    #[serde(default)]
    pub store_id: Option<String>,
    /// One row per post and UTC hour with any activity, sorted by hour, then post.
    pub rows: Vec<AnalyticsRow>,
}

/// One post in one UTC hour (the columns of the analytics export's Parquet file).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AnalyticsRow {
    #[schema(value_type = String)]
    pub post_id: PostId,
    /// The hour's start, RFC 3339 UTC.
    pub hour: String,
    /// Likes created on the post itself.
    pub likes: i64,
    /// Likes removed from the post itself.
    pub unlikes: i64,
    /// Comments written on the post, held ones included.
    pub comments: i64,
    /// Net change of the post's visible comment count.
    pub comments_visible_delta: i64,
    /// Likes created on the post's comments.
    pub comment_likes: i64,
    /// Likes removed from the post's comments.
    pub comment_unlikes: i64,
    /// Distinct viewers, estimated (HyperLogLog).
    pub unique_viewers: i64,
}

impl From<&likewise_service::analytics::HourRow> for AnalyticsRow {
    fn from(r: &likewise_service::analytics::HourRow) -> Self {
        AnalyticsRow {
            post_id: PostId(r.post),
            hour: rfc3339_ms(r.hour_ms),
            likes: r.likes,
            unlikes: r.unlikes,
            comments: r.comments,
            comments_visible_delta: r.comments_visible_delta,
            comment_likes: r.comment_likes,
            comment_unlikes: r.comment_unlikes,
            unique_viewers: r.unique_viewers,
        }
    }
}

impl AnalyticsRow {
    /// The row as the export folds it (a client reading a node's answer).
    pub fn to_row(&self) -> Result<likewise_service::analytics::HourRow, String> {
        Ok(likewise_service::analytics::HourRow {
            post: self.post_id.0,
            hour_ms: likewise_service::analytics::parse_time("hour", &self.hour)?,
            likes: self.likes,
            unlikes: self.unlikes,
            comments: self.comments,
            comments_visible_delta: self.comments_visible_delta,
            comment_likes: self.comment_likes,
            comment_unlikes: self.comment_unlikes,
            unique_viewers: self.unique_viewers,
        })
    }
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

/// Why an account was flagged.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum IntegrityReason {
    /// Many accounts liking the same posts or comments within seconds of each other.
    LockstepRing,
    /// Brand-new accounts acting only together.
    NewAccountsRing,
    /// Likes at a rate no person sustains.
    InhumanRate,
}

/// What the integrity consumer saw. A ring's evidence has `partners`, `shared_targets`,
/// `span_seconds` and `sample_partner_ids`; a rate's `likes`, `window_seconds`,
/// `active_seconds` and `likes_per_minute`.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct IntegrityEvidence {
    /// Other accounts in the ring.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partners: Option<u64>,
    /// This account's likes of the ring's shared posts and comments, in lockstep.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared_targets: Option<u64>,
    /// The widest distance of those likes from the ring's median time for each target.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span_seconds: Option<f64>,
    /// A few other members (decimal strings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample_partner_ids: Option<Vec<String>>,
    /// Likes in the rate window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub likes: Option<u32>,
    /// The rate window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_seconds: Option<u64>,
    /// Seconds of the window with at least one like.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_seconds: Option<u64>,
    /// The window's average rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub likes_per_minute: Option<f64>,
}

/// A moderator's verdict on a flagged account.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum IntegrityAction {
    Clear,
    Confirm,
}

/// `POST /v1/moderation/integrity/{user_id}` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IntegrityDecisionBody {
    pub action: IntegrityAction,
}

/// An account flagged by the integrity consumer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct IntegrityFlagDto {
    #[schema(value_type = String)]
    pub user_id: UserId,
    pub reason: IntegrityReason,
    pub evidence: IntegrityEvidence,
    /// RFC 3339 UTC.
    pub flagged_at: String,
    /// Confirmed, with `integrity.discount_flagged` on: its likes are left out of displayed
    /// counts.
    pub likes_discounted: bool,
    /// The latest verdict (`confirm` or `clear`), null while none was given.
    pub decision: Option<IntegrityAction>,
}

/// `GET /v1/moderation/integrity`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct IntegrityPage {
    pub items: Vec<IntegrityFlagDto>,
    /// Opaque; null on the last page.
    pub next_cursor: Option<String>,
}
