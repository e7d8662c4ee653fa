//! Like and unlike: validate, hand the operation to the group-commit write path, and record
//! the committed outcome in the viewer's liked set before answering (read-your-writes).

use crate::{Engagement, ServiceError, ServiceResult, now_ms};
use likewise_core::ids::{PostId, UserId};
use likewise_core::like::{LikeAction, LikeOp, Target};
use likewise_core::ports::Liker;

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

impl Engagement {
    /// Like or unlike a post as `viewer`. Durable before it returns.
    pub async fn set_post_like(
        &self,
        viewer: UserId,
        post: PostId,
        action: LikeAction,
    ) -> ServiceResult<LikeResult> {
        self.check_like_rate(viewer)?;
        let meta = self.post_meta(post).await?.ok_or(ServiceError::NotFound("post"))?;
        self.check_not_blocked(meta.author, viewer).await?;
        let op = LikeOp {
            target: Target::post(post.0),
            user: viewer,
            action,
            target_author: meta.author,
            post: post.0,
            ts_ms: now_ms(),
        };
        let committed = self.stores.writer.submit(op).await?;
        self.viewer_likes.record(viewer, post, committed.outcome.liked, committed.order);
        self.record_own_like(viewer, Target::post(post.0), committed.outcome.liked).await;
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
        self.post_meta(post).await?.ok_or(ServiceError::NotFound("post"))?;
        let mut likers = self.stores.likes.likers(Target::post(post.0), after, limit + 1).await?;
        let more = likers.len() > limit;
        likers.truncate(limit);
        let names = self.usernames(&likers.iter().map(|l| l.user).collect::<Vec<_>>()).await?;
        let next = if more { likers.last().copied() } else { None };
        Ok(LikersPage { items: likers.into_iter().zip(names).collect(), next })
    }
}

impl Engagement {
    /// Tell the other API nodes about the viewer's own write before answering (read-your-
    /// writes across nodes). The like is durable already: a failure here is logged, and the
    /// reverse index answers once it catches up.
    pub(crate) async fn record_own_like(&self, viewer: UserId, target: Target, liked: bool) {
        if let Some(own) = &self.stores.own_likes
            && let Err(e) = own.record(viewer, target, liked).await
        {
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
