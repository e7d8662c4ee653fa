//! Human review: reports, the authors' appeals, the moderators' queue (with why each comment
//! is held) and decisions, the post author's approvals, and pins.

use crate::comments::{CommentView, Comments, Reader, seen_in_thread, standing_for};
use crate::moderation::Moderation;
use crate::shared::Shared;
use crate::upstream::Upstream;
use crate::{ServiceError, ServiceResult};
use likewise_core::comment::appeal::{HeldBy, QueueNote, appeal_is_reviewed, appeal_message};
use likewise_core::comment::pins::PinChange;
use likewise_core::comment::rank::MAX_PINS;
use likewise_core::comment::record::CommentRecord;
use likewise_core::comment::report::hides;
use likewise_core::comment::status::CommentStatus;
use likewise_core::comment::uncounted::{Move, planned_move};
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::ports::ReportReason;
use likewise_core::ports::cluster::Invalidation;
use likewise_core::write::{CommentOp, CommentOutcome, QueueChange};
use std::sync::Arc;

/// A moderator's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Make it visible.
    Approve,
    /// Hide it.
    Hide,
}

/// One comment of the review queue.
#[derive(Debug, Clone)]
pub struct QueueEntry {
    /// The comment with its real status.
    pub view: CommentView,
    /// Distinct reporters.
    pub report_count: u32,
    /// Why it is held, and the author's appeal.
    pub note: QueueNote,
}

/// See the module documentation.
pub struct Review {
    shared: Arc<Shared>,
    upstream: Arc<Upstream>,
    moderation: Arc<Moderation>,
    comments: Arc<Comments>,
}

impl Review {
    /// The review service.
    pub fn new(
        shared: Arc<Shared>,
        upstream: Arc<Upstream>,
        moderation: Arc<Moderation>,
        comments: Arc<Comments>,
    ) -> Self {
        Review { shared, upstream, moderation, comments }
    }

    /// Change a comment's status and, in the same atomic write, its review-queue entry
    /// (`queue`): a comment's status and its queue entry never disagree, whatever reports and
    /// decisions race.
    ///
    /// How the change moves the comment's counting is registered before it is written, until
    /// the aggregator commits it (`likewise_core::comment::uncounted`): its author, who sees it
    /// counted whether held or not, never sees the count move because it was approved or
    /// held.
    async fn set_status(
        &self,
        id: CommentId,
        status: CommentStatus,
        actor: UserId,
        queue: QueueChange,
    ) -> ServiceResult<CommentRecord> {
        let op = CommentOp::SetStatus { id, status, actor, queue };
        let moved = self.planned_move(&op).await.filter(|m| self.shared.count_move(*m));
        let written = self.shared.stores.writer.submit_comment(op).await;
        let done = match written.map(|c| c.outcome) {
            Ok(CommentOutcome::Done(Some(r))) => Some(r),
            Ok(_) => None,
            Err(e) => {
                if let Some(m) = moved {
                    self.shared.count_move_withdrawn(m);
                }
                return Err(e.into());
            }
        };
        // The change did not apply (a hold of a comment no longer visible, a comment deleted
        // meanwhile): nothing will count it.
        if let Some(m) = moved
            && done.as_ref().is_none_or(|r| r.status != status)
        {
            self.shared.count_move_withdrawn(m);
        }
        let r = done.ok_or(ServiceError::NotFound("comment"))?;
        self.shared.comment_changed(&r);
        self.comments.indexer.reindex(&crate::comments::touched(&r)).await;
        Ok(r)
    }

    /// How `op` will move its comment's counting, from the comment (and a reply's parent) as
    /// stored now. `None` when it moves nothing, or when they cannot be read (then the author
    /// sees the counter catch up, as everyone does).
    async fn planned_move(&self, op: &CommentOp) -> Option<Move> {
        let id = op.id()?;
        let read = async {
            let Some(r) = self.shared.comment_record(id).await? else { return Ok(None) };
            let parent = match r.parent {
                Some(p) => self.shared.comment_record(p).await?,
                None => None,
            };
            Ok::<_, ServiceError>(planned_move(op, &r, parent.as_ref()))
        };
        read.await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "reading a comment before its status change failed");
            None
        })
    }

    /// Report a comment; enough distinct reporters hide it pending review.
    pub async fn report(&self, reader: Reader, id: CommentId, reason: ReportReason) -> ServiceResult<()> {
        let r = standing_for(&self.upstream, reader, id).await?;
        let outcome = self.shared.stores.moderation.add_report(id, reader.user, reason).await?;
        metrics::counter!("likewise_comment_reports_total").increment(1);
        // A repeat report, or reports an approval already weighed, never hide it again.
        if hides(&outcome, self.moderation.report_threshold()) {
            // Whether it is still visible is decided where the hold is written, with the
            // reason and the queue entry: read here, an approval racing the report could land
            // between the read and the write (or between the status and the queue entry) and
            // leave a pending comment out of the queue.
            let held = QueueChange::Hold(HeldBy::Reports);
            let now = self.set_status(id, CommentStatus::Pending, reader.user, held).await?;
            if r.status == CommentStatus::Visible && now.status == CommentStatus::Pending {
                metrics::counter!("likewise_comments_held_total", "layer" => "reports").increment(1);
            }
        } else {
            // Reported, still shown: it awaits a decision in the queue.
            self.shared.stores.moderation.set_queued(id, true).await?;
        }
        Ok(())
    }

    /// The author appeals a decision about their own comment, once. Answered the same for
    /// every status, so the answer reveals nothing; a held comment enters the review queue
    /// marked appealed. Anyone else is told the comment does not exist.
    pub async fn appeal(&self, viewer: UserId, id: CommentId, message: Option<&str>) -> ServiceResult<()> {
        let r = self.shared.comment_record(id).await?;
        let r = r.filter(|r| r.author == viewer).ok_or(ServiceError::NotFound("comment"))?;
        let message = appeal_message(message).map_err(|e| ServiceError::Invalid(e.to_string()))?;
        if !self.shared.stores.moderation.add_appeal(id, &message).await? {
            return Err(ServiceError::Conflict("this comment was already appealed".into()));
        }
        metrics::counter!("likewise_comment_appeals_total").increment(1);
        if appeal_is_reviewed(r.status) {
            self.shared.stores.moderation.set_queued(id, true).await?;
        }
        Ok(())
    }

    /// The review queue (moderators): comments awaiting a decision, with real statuses, their
    /// report counts, why each is held and the authors' appeals.
    pub async fn queue(
        &self,
        moderator: UserId,
        after: Option<CommentId>,
        limit: usize,
    ) -> ServiceResult<(Vec<QueueEntry>, Option<CommentId>)> {
        let ids = self.shared.stores.moderation.queue(after, limit + 1).await?;
        let more = ids.len() > limit;
        let ids: Vec<CommentId> = ids.into_iter().take(limit).collect();
        let next = if more { ids.last().copied() } else { None };
        let recs: Vec<CommentRecord> =
            self.shared.stores.comments.comments(&ids).await?.into_iter().flatten().collect();
        let found: Vec<CommentId> = recs.iter().map(|r| r.id).collect();
        let m = &self.shared.stores.moderation;
        let (counts, notes) = tokio::join!(m.report_counts(&found), m.queue_notes(&found));
        let (counts, notes) = (counts?, notes?);
        let reader = Reader { user: moderator, moderator: true };
        let views = self.comments.decorate(reader, recs).await?;
        let entries = views
            .into_iter()
            .zip(counts)
            .zip(notes)
            .map(|((view, report_count), note)| QueueEntry { view, report_count, note })
            .collect();
        Ok((entries, next))
    }

    /// A moderator approves or hides a comment; it leaves the queue.
    pub async fn moderate(
        &self,
        moderator: UserId,
        id: CommentId,
        decision: Decision,
    ) -> ServiceResult<CommentView> {
        let r = self.upstream.comment_record(id).await?.ok_or(ServiceError::NotFound("comment"))?;
        if r.status.is_deleted() {
            return Err(ServiceError::Conflict("the comment was deleted".into()));
        }
        let (status, held_by) = match decision {
            Decision::Approve => (CommentStatus::Visible, None),
            Decision::Hide => (CommentStatus::HiddenByFilter, Some(HeldBy::Moderator)),
        };
        self.shared.stores.moderation.set_held_by(id, held_by).await?;
        let r = self.set_status(id, status, moderator, QueueChange::Leave).await?;
        if decision == Decision::Hide {
            // A hidden comment gives its pin slot back, as a deleted one does: it no longer
            // leads the post for anyone, and approving it later does not pin it again.
            self.unpin(r.post, id).await?;
        }
        let reader = Reader { user: moderator, moderator: true };
        self.comments.decorate(reader, vec![r]).await?.pop().ok_or(ServiceError::NotFound("comment"))
    }

    /// The post's author approves a restricted or pending comment on their post.
    pub async fn approve(&self, viewer: UserId, id: CommentId) -> ServiceResult<CommentView> {
        let r = self.upstream.comment_record(id).await?.ok_or(ServiceError::NotFound("comment"))?;
        let reader = Reader { user: viewer, moderator: false };
        if seen_in_thread(&self.upstream, reader, &r).await?.is_none() {
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
        // The reports so far are weighed before it shows again, so none of them can hide it
        // in between (as in `moderate`).
        self.shared.stores.moderation.set_held_by(id, None).await?;
        let r = self.set_status(id, CommentStatus::Visible, viewer, QueueChange::Leave).await?;
        self.comments.decorate(reader, vec![r]).await?.pop().ok_or(ServiceError::NotFound("comment"))
    }

    /// Pin (or unpin) a top-level comment on the viewer's own post; at most three pins.
    pub async fn set_pin(&self, viewer: UserId, post: PostId, id: CommentId, pin: bool) -> ServiceResult<()> {
        let meta = self.upstream.require_post(post).await?;
        if meta.author != viewer {
            return Err(ServiceError::Forbidden("only the post's author may pin comments".into()));
        }
        if pin {
            let r = self.upstream.comment_record(id).await?;
            let ok =
                r.is_some_and(|r| r.post == post && r.parent.is_none() && r.status == CommentStatus::Visible);
            if !ok {
                return Err(ServiceError::NotFound("comment"));
            }
        }
        let mut change = self.shared.stores.moderation.change_pin(post, id, pin).await?;
        if change == PinChange::Full && self.unpin_deleted(post).await? {
            change = self.shared.stores.moderation.change_pin(post, id, pin).await?;
        }
        match change {
            PinChange::Full => {
                return Err(ServiceError::Conflict(format!("at most {MAX_PINS} comments can be pinned")));
            }
            PinChange::Unchanged => return Ok(()),
            PinChange::Changed(_) => {}
        }
        self.shared.top.invalidate(post);
        self.shared.announce(Invalidation::Top(post));
        Ok(())
    }

    /// Unpin `id` if it is pinned on `post` (read first: most comments never were), and drop
    /// the post's cached ranking everywhere.
    async fn unpin(&self, post: PostId, id: CommentId) -> ServiceResult<()> {
        if !self.shared.stores.moderation.pins(post).await?.contains(&id) {
            return Ok(());
        }
        if let PinChange::Changed(_) = self.shared.stores.moderation.change_pin(post, id, false).await? {
            self.shared.top.invalidate(post);
            self.shared.announce(Invalidation::Top(post));
        }
        Ok(())
    }

    /// Free the pin slots of deleted comments and of comments a moderator hid (a delete or a
    /// hide unpins its comment, but a pin racing it, or one stored before they unpinned, can
    /// still hold a slot): read from storage, not the record cache. Whether any slot was
    /// freed. Only a moderator's hide makes a pinned comment `hidden_by_filter`: a comment
    /// is pinned while visible, and the filters decide only a new comment's status.
    async fn unpin_deleted(&self, post: PostId) -> ServiceResult<bool> {
        let pins = self.shared.stores.moderation.pins(post).await?;
        let recs = self.shared.stores.comments.comments(&pins).await?;
        let mut freed = false;
        for (p, r) in pins.into_iter().zip(recs) {
            if r.is_none_or(|r| r.status.is_deleted() || r.status == CommentStatus::HiddenByFilter) {
                freed |= matches!(
                    self.shared.stores.moderation.change_pin(post, p, false).await?,
                    PinChange::Changed(_)
                );
            }
        }
        Ok(freed)
    }

    /// The pinned comments of a post.
    pub async fn pins(&self, post: PostId) -> ServiceResult<Vec<CommentId>> {
        Ok(self.shared.stores.moderation.pins(post).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::Decision;
    use crate::{Engagement, ServiceOptions};
    use likewise_core::comment::status::CommentStatus;
    use likewise_core::ids::{CommentId, PostId, UserId};
    use likewise_core::model::{CommentsPolicy, PostMeta};
    use likewise_core::write::{CommentOp, QueueChange};

    /// A post by 7 with four comments, the first three pinned.
    async fn three_pinned(svc: &Engagement) -> Vec<CommentId> {
        let (post, author) = (PostId(1), UserId(7));
        let meta = PostMeta { author, hide_like_count: false, comments: CommentsPolicy::Everyone };
        svc.upstream.put_post(post, meta).await.expect("post");
        let mut ids: Vec<CommentId> = Vec::new();
        for u in 10..14u64 {
            let v = svc.comments.create(UserId(u), post, &format!("comment by {u}"), None, None).await;
            ids.push(v.expect("comment").record.id);
        }
        for id in &ids[..3] {
            svc.review.set_pin(author, post, *id, true).await.expect("pin");
        }
        ids
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_comment_a_moderator_hides_gives_its_pin_slot_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let svc = Engagement::new(likewise_store::testing::open_small(dir.path()), ServiceOptions::default());
        let ids = three_pinned(&svc).await;
        svc.review.moderate(UserId(99), ids[1], Decision::Hide).await.expect("hide");
        assert_eq!(svc.review.pins(PostId(1)).await.expect("pins"), [ids[0], ids[2]]);
        svc.review
            .set_pin(UserId(7), PostId(1), ids[3], true)
            .await
            .expect("the hidden comment's slot is free");
        // Approved again, it is visible but no longer pinned.
        svc.review.moderate(UserId(99), ids[1], Decision::Approve).await.expect("approve");
        assert_eq!(svc.review.pins(PostId(1)).await.expect("pins"), [ids[0], ids[2], ids[3]]);
        svc.stores().close().expect("close");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pin_left_on_a_hidden_comment_gives_its_slot_to_the_next_pin() {
        let dir = tempfile::tempdir().expect("tempdir");
        let svc = Engagement::new(likewise_store::testing::open_small(dir.path()), ServiceOptions::default());
        let ids = three_pinned(&svc).await;
        // Hidden past the service (as a hide racing a pin, or one stored before hides
        // unpinned): the pin is still in the list.
        let hide = CommentOp::SetStatus {
            id: ids[0],
            status: CommentStatus::HiddenByFilter,
            actor: UserId(99),
            queue: QueueChange::Leave,
        };
        svc.stores().writer.submit_comment(hide).await.expect("hide");
        svc.review
            .set_pin(UserId(7), PostId(1), ids[3], true)
            .await
            .expect("the hidden comment's slot is free");
        assert_eq!(svc.review.pins(PostId(1)).await.expect("pins"), ids[1..]);
        svc.stores().close().expect("close");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pin_left_on_a_deleted_comment_gives_its_slot_to_the_next_pin() {
        let dir = tempfile::tempdir().expect("tempdir");
        let svc = Engagement::new(likewise_store::testing::open_small(dir.path()), ServiceOptions::default());
        let (post, author) = (PostId(1), UserId(7));
        let ids = three_pinned(&svc).await;
        // Deleted past the service (as a delete racing a pin, or one stored before deletes
        // unpinned): the pin is still in the list.
        svc.stores()
            .writer
            .submit_comment(CommentOp::Delete { id: ids[0], actor: UserId(10) })
            .await
            .expect("delete");
        assert_eq!(svc.review.pins(post).await.expect("pins"), ids[..3]);
        svc.review.set_pin(author, post, ids[3], true).await.expect("the deleted comment's slot is free");
        assert_eq!(svc.review.pins(post).await.expect("pins"), ids[1..]);
        svc.stores().close().expect("close");
    }
}
