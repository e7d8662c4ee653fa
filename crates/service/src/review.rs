//! Human review: reports, the moderators' queue and decisions, the post author's approvals,
//! and pins.

use crate::comments::{CommentView, Reader, as_seen_by};
use crate::{Engagement, ServiceError, ServiceResult};
use likewise_core::comment::rank::MAX_PINS;
use likewise_core::comment::status::CommentStatus;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::ports::ReportReason;
use likewise_core::write::{CommentOp, CommentOutcome, CommentRecord};

/// A moderator's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Make it visible.
    Approve,
    /// Hide it.
    Hide,
}

impl Engagement {
    /// A comment's status changed or it was deleted (called once the write is durable):
    /// drop its cached record, and a reply's parent's (a deleted placeholder goes when its
    /// last reply does), here and on every node. Rankings keep candidates' statuses, so for
    /// a top-level comment the post's ranking goes too (the ranker would refresh it a round
    /// later).
    pub(crate) fn comment_changed(&self, r: &CommentRecord) {
        for id in std::iter::once(r.id).chain(r.parent) {
            self.records.forget(id);
            self.announce(crate::cluster::Invalidation::Comment(id));
        }
        if r.parent.is_none() {
            self.top.invalidate(r.post);
            self.announce(crate::cluster::Invalidation::Top(r.post));
        }
    }

    async fn comment_record(&self, id: CommentId) -> ServiceResult<Option<CommentRecord>> {
        Ok(self.stores.comments.comments(&[id]).await?.pop().flatten())
    }

    async fn set_status(
        &self,
        id: CommentId,
        status: CommentStatus,
        actor: UserId,
    ) -> ServiceResult<CommentRecord> {
        match self.stores.writer.submit_comment(CommentOp::SetStatus { id, status, actor }).await?.outcome {
            CommentOutcome::Done(Some(r)) => {
                self.comment_changed(&r);
                Ok(r)
            }
            _ => Err(ServiceError::NotFound("comment")),
        }
    }

    /// Report a comment; enough distinct reporters hide it pending review.
    pub async fn report_comment(
        &self,
        reader: Reader,
        id: CommentId,
        reason: ReportReason,
    ) -> ServiceResult<()> {
        let r = self.comment_record(id).await?;
        let r = r.filter(|r| !r.status.is_deleted() && as_seen_by(reader, r).is_some());
        let r = r.ok_or(ServiceError::NotFound("comment"))?;
        let count = self.stores.moderation.add_report(id, reader.user, reason).await?;
        self.stores.moderation.set_queued(id, true).await?;
        metrics::counter!("likewise_comment_reports_total").increment(1);
        if count >= self.report_threshold() && r.status == CommentStatus::Visible {
            self.set_status(id, CommentStatus::Pending, reader.user).await?;
            metrics::counter!("likewise_comments_held_total", "layer" => "reports").increment(1);
        }
        Ok(())
    }

    /// The review queue (moderators): comments awaiting a decision, with real statuses and
    /// their report counts.
    pub async fn review_queue(
        &self,
        moderator: UserId,
        after: Option<CommentId>,
        limit: usize,
    ) -> ServiceResult<(Vec<(CommentView, u32)>, Option<CommentId>)> {
        let ids = self.stores.moderation.queue(after, limit + 1).await?;
        let more = ids.len() > limit;
        let ids: Vec<CommentId> = ids.into_iter().take(limit).collect();
        let next = if more { ids.last().copied() } else { None };
        let recs: Vec<CommentRecord> =
            self.stores.comments.comments(&ids).await?.into_iter().flatten().collect();
        let counts =
            self.stores.moderation.report_counts(&recs.iter().map(|r| r.id).collect::<Vec<_>>()).await?;
        let reader = Reader { user: moderator, moderator: true };
        let views = self.views(reader, recs).await?;
        Ok((views.into_iter().zip(counts).collect(), next))
    }

    /// A moderator approves or hides a comment; it leaves the queue.
    pub async fn moderate(
        &self,
        moderator: UserId,
        id: CommentId,
        decision: Decision,
    ) -> ServiceResult<CommentView> {
        let r = self.comment_record(id).await?.ok_or(ServiceError::NotFound("comment"))?;
        if r.status.is_deleted() {
            return Err(ServiceError::Conflict("the comment was deleted".into()));
        }
        let status = match decision {
            Decision::Approve => CommentStatus::Visible,
            Decision::Hide => CommentStatus::HiddenByFilter,
        };
        let r = self.set_status(id, status, moderator).await?;
        self.stores.moderation.set_queued(id, false).await?;
        let reader = Reader { user: moderator, moderator: true };
        self.views(reader, vec![r]).await?.pop().ok_or(ServiceError::NotFound("comment"))
    }

    /// The post's author approves a restricted or pending comment on their post.
    pub async fn approve_comment(&self, viewer: UserId, id: CommentId) -> ServiceResult<CommentView> {
        let r = self.comment_record(id).await?.ok_or(ServiceError::NotFound("comment"))?;
        let reader = Reader { user: viewer, moderator: false };
        if as_seen_by(reader, &r).is_none() {
            return Err(ServiceError::NotFound("comment"));
        }
        if r.post_author != viewer {
            return Err(ServiceError::Forbidden("only the post's author may approve its comments".into()));
        }
        if !matches!(r.status, CommentStatus::Restricted | CommentStatus::Pending) {
            return Err(ServiceError::Conflict(format!(
                "a {} comment cannot be approved",
                r.status.as_str()
            )));
        }
        let r = self.set_status(id, CommentStatus::Visible, viewer).await?;
        self.stores.moderation.set_queued(id, false).await?;
        self.views(reader, vec![r]).await?.pop().ok_or(ServiceError::NotFound("comment"))
    }

    /// Pin (or unpin) a top-level comment on the viewer's own post; at most three pins.
    pub async fn set_pin(&self, viewer: UserId, post: PostId, id: CommentId, pin: bool) -> ServiceResult<()> {
        let meta = self.post_meta(post).await?.ok_or(ServiceError::NotFound("post"))?;
        if meta.author != viewer {
            return Err(ServiceError::Forbidden("only the post's author may pin comments".into()));
        }
        let mut pins = self.stores.moderation.pins(post).await?;
        if pin {
            let r = self.comment_record(id).await?;
            let ok =
                r.is_some_and(|r| r.post == post && r.parent.is_none() && r.status == CommentStatus::Visible);
            if !ok {
                return Err(ServiceError::NotFound("comment"));
            }
            if pins.contains(&id) {
                return Ok(());
            }
            if pins.len() >= MAX_PINS {
                return Err(ServiceError::Conflict(format!("at most {MAX_PINS} comments can be pinned")));
            }
            pins.push(id);
        } else {
            pins.retain(|p| *p != id);
        }
        self.stores.moderation.set_pins(post, &pins).await?;
        self.top.invalidate(post);
        self.announce(crate::cluster::Invalidation::Top(post));
        Ok(())
    }
}
