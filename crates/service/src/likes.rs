//! Likes of posts and comments: validate, hand the operation to the group-commit write path,
//! and record the committed outcome in the viewer's liked set before answering
//! (read-your-writes). Also the likers list ("who liked this").

use crate::comments::{Reader, standing_for};
use crate::moderation::Moderation;
use crate::shared::Shared;
use crate::upstream::Upstream;
use crate::{ServiceError, ServiceResult, now_ms};
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::like::{LikeAction, LikeOp, LikeOutcome, Target};
use likewise_core::ports::Liker;
use std::sync::Arc;

/// The answer to a like/unlike request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LikeResult {
    /// State after the call.
    pub liked: bool,
    /// True only when this call changed the state.
    pub changed: bool,
}

/// One page of likers.
#[derive(Debug, Clone)]
pub struct LikersPage {
    /// Likers with their display names, newest first.
    pub items: Vec<(Liker, String)>,
    /// Where the next page starts, if there may be one.
    pub next: Option<Liker>,
}

/// See the module documentation.
pub struct Likes {
    shared: Arc<Shared>,
    upstream: Arc<Upstream>,
    moderation: Arc<Moderation>,
}

impl Likes {
    /// The like service.
    pub fn new(shared: Arc<Shared>, upstream: Arc<Upstream>, moderation: Arc<Moderation>) -> Self {
        Likes { shared, upstream, moderation }
    }

    /// Like or unlike a post as `viewer`: a like (not an unlike) is refused when the post's
    /// author blocked them. Durable before it returns.
    pub async fn set_post_like(
        &self,
        viewer: UserId,
        post: PostId,
        action: LikeAction,
    ) -> ServiceResult<LikeResult> {
        self.moderation.check_like_rate(viewer)?;
        let meta = self.upstream.require_post(post).await?;
        // A block stops new likes; undoing an earlier one is always allowed, or the like
        // would go on counting and naming the blocked user.
        if action == LikeAction::Like {
            self.moderation.check_not_blocked(meta.author, viewer).await?;
        }
        let op = LikeOp {
            target: Target::post(post.0),
            user: viewer,
            action,
            target_author: meta.author,
            post: post.0,
            ts_ms: now_ms(),
            trace: None,
        };
        let committed = self.shared.stores.writer.submit(op).await?;
        self.shared.viewer_likes.record(viewer, post, committed.outcome.liked, committed.order);
        self.record_own_like(viewer, Target::post(post.0), committed.outcome).await;
        like_counter(action, committed.outcome.changed).increment(1);
        Ok(LikeResult { liked: committed.outcome.liked, changed: committed.outcome.changed })
    }

    /// Likers of a post, newest first.
    pub async fn post_likers(
        &self,
        post: PostId,
        after: Option<Liker>,
        limit: usize,
    ) -> ServiceResult<LikersPage> {
        self.upstream.require_post(post).await?;
        let mut likers = self.shared.stores.likes.likers(Target::post(post.0), after, limit + 1).await?;
        let more = likers.len() > limit;
        likers.truncate(limit);
        let names = self.upstream.usernames(&likers.iter().map(|l| l.user).collect::<Vec<_>>()).await?;
        let next = if more { likers.last().copied() } else { None };
        Ok(LikersPage { items: likers.into_iter().zip(names).collect(), next })
    }

    /// Like or unlike a comment as `viewer`: only a comment the viewer can see; a like (not
    /// an unlike) is refused on a post whose author, or by a commenter who, blocked them.
    pub async fn set_comment_like(
        &self,
        viewer: UserId,
        id: CommentId,
        action: LikeAction,
    ) -> ServiceResult<LikeResult> {
        self.moderation.check_like_rate(viewer)?;
        let reader = Reader { user: viewer, moderator: false };
        // Unliking is always allowed, also of a comment hidden since the like: the like row
        // would otherwise stay, and count again if the comment is approved. One the
        // viewer may not see is answered as not found unless their like was there to remove,
        // so the answer tells nobody else that it exists.
        let (r, seen) = match standing_for(&self.upstream, reader, id).await {
            Ok(r) => (r, true),
            Err(ServiceError::NotFound(what)) if action == LikeAction::Unlike => {
                match self.upstream.comment_record(id).await? {
                    Some(r) => (r, false),
                    None => return Err(ServiceError::NotFound(what)),
                }
            }
            Err(e) => return Err(e),
        };
        if action == LikeAction::Like {
            // As for posts: a block refuses a like, never an unlike.
            self.moderation.check_not_blocked(r.post_author, viewer).await?;
            self.moderation.check_not_blocked_by_commenter(r.author, viewer).await?;
        }
        let op = LikeOp {
            target: Target::comment(id.0),
            user: viewer,
            action,
            target_author: r.author,
            post: r.post.0,
            ts_ms: now_ms(),
            trace: None,
        };
        let committed = self.shared.stores.writer.submit(op).await?;
        self.record_own_like(viewer, Target::comment(id.0), committed.outcome).await;
        if !seen && !committed.outcome.changed {
            return Err(ServiceError::NotFound("comment"));
        }
        Ok(LikeResult { liked: committed.outcome.liked, changed: committed.outcome.changed })
    }

    /// Tell the other API nodes about the viewer's own change before answering (read-your-
    /// writes across nodes), with the position of its commit so that a record of an earlier
    /// commit landing later cannot replace it. An operation that changed nothing records
    /// nothing: the state it saw is that of an earlier change, whose record is there already
    /// (or the reverse index has it). The like is durable already: a failure here is logged,
    /// and the reverse index answers once it catches up.
    async fn record_own_like(&self, viewer: UserId, target: Target, outcome: LikeOutcome) {
        let (Some(own), Some(position)) = (&self.shared.stores.own_likes, outcome.event_seq) else {
            return;
        };
        if let Err(e) = own.record(viewer, target, outcome.liked, position).await {
            tracing::warn!(error = %e, user = viewer.0, "recording an own like in the shared cache failed");
            metrics::counter!("likewise_own_like_record_failures_total").increment(1);
        }
    }
}

/// `likewise_likes_total{action, changed}` handles, registered once (this runs per like).
fn like_counter(action: LikeAction, changed: bool) -> &'static metrics::Counter {
    static COUNTERS: std::sync::OnceLock<[metrics::Counter; 4]> = std::sync::OnceLock::new();
    let c = COUNTERS.get_or_init(|| {
        [
            metrics::counter!("likewise_likes_total", "action" => "like", "changed" => "false"),
            metrics::counter!("likewise_likes_total", "action" => "like", "changed" => "true"),
            metrics::counter!("likewise_likes_total", "action" => "unlike", "changed" => "false"),
            metrics::counter!("likewise_likes_total", "action" => "unlike", "changed" => "true"),
        ]
    });
    let i = match action {
        LikeAction::Like => 0,
        LikeAction::Unlike => 2,
    } + usize::from(changed);
    &c[i]
}
