//! Writing comments: create (a reply goes under its top-level parent) and delete.

use super::{CommentView, Comments, Reader, as_seen_by, retries, seen_in_thread};
use crate::{ServiceError, ServiceResult};
use likewise_core::comment::idempotency::{IdempotencyKey, KeyRecord, Keyed, Replay, fingerprint, replay};
use likewise_core::comment::simhash::simhash64;
use likewise_core::comment::status::CommentStatus;
use likewise_core::comment::text::normalize_text;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::model::CommentsPolicy;
use likewise_core::write::{CommentOp, CommentOutcome, CommentRecord};

impl Comments {
    /// Write a comment (or a reply, with `parent`). With an `Idempotency-Key` (`key`), a
    /// repeat of the same request answers what the first call answered and creates nothing;
    /// the key with another request is refused (422), and a repeat while the first call is
    /// still running on this node is a 409.
    pub async fn create(
        &self,
        viewer: UserId,
        post: PostId,
        raw_text: &str,
        parent: Option<CommentId>,
        key: Option<IdempotencyKey>,
    ) -> ServiceResult<CommentView> {
        let keyed =
            key.map(|key| Keyed { caller: viewer, fingerprint: fingerprint(post, parent, raw_text), key });
        let _claim = keyed.as_ref().map(|k| self.in_flight.claim(viewer, &k.key)).transpose()?;
        if let Some(k) = &keyed {
            // Before any check: a repeat answers as the first call did, even if the rate
            // limit or the post's settings would refuse a new comment now.
            let stored = self.shared.stores.idempotency.find_key(viewer, &k.key, post).await?;
            if let Some(view) = self.repeat(viewer, stored.as_ref(), k).await? {
                return Ok(view);
            }
        }
        let meta = self.upstream.require_post(post).await?;
        self.moderation.check_not_blocked(meta.author, viewer).await?;
        match meta.comments {
            CommentsPolicy::Off => {
                return Err(ServiceError::Forbidden("comments are turned off for this post".into()));
            }
            CommentsPolicy::Followers
                if viewer != meta.author
                    && !self.upstream.followees(viewer).await?.contains(&meta.author) =>
            {
                return Err(ServiceError::Forbidden(
                    "only the author's followers may comment on this post".into(),
                ));
            }
            _ => {}
        }
        let text = normalize_text(raw_text).map_err(|e| ServiceError::Invalid(e.to_string()))?;
        self.moderation.check_comment_rate(viewer).await?;
        let (parent_id, reply_to_user) = match parent {
            None => (None, None),
            Some(pid) => self.reply_target(viewer, post, pid).await?,
        };
        let simhash = simhash64(&text);
        let (status, held_by) = self.moderation.initial_status(viewer, meta.author, &text, simhash).await?;
        let rec = CommentRecord {
            id: CommentId(0),
            post,
            author: viewer,
            post_author: meta.author,
            parent: parent_id,
            reply_to_user,
            status,
            simhash,
            text,
        };
        // The moderation state goes with the comment, in its own atomic write: its author's
        // fingerprint and, when held, why and its review-queue entry. Written after the
        // comment, a crash in between would leave a held comment that never reaches the
        // queue, and a failure would answer an error for a comment that exists.
        let held_by = held_by.filter(|_| status != CommentStatus::Visible);
        let writer = &self.shared.stores.writer;
        let committed = match &keyed {
            Some(k) => writer.submit_keyed_comment(rec, held_by, k.clone()).await?,
            None => writer.submit_comment(CommentOp::Create(rec, held_by)).await?,
        };
        let stored = match committed.outcome {
            CommentOutcome::Done(Some(r)) => r,
            // Another node stored the key first (or this batch held the same key twice).
            CommentOutcome::Replayed(r) => {
                if let Some(k) = &keyed
                    && let Some(view) = self.repeat(viewer, Some(&r), k).await?
                {
                    return Ok(view);
                }
                return Err(ServiceError::Store(likewise_core::StoreError::Engine(
                    "a replayed key matched no request".into(),
                )));
            }
            // The parent was deleted between the check above and the write (the write path
            // read it again, serialized with the delete).
            CommentOutcome::NotFound if parent_id.is_some() => {
                return Err(ServiceError::NotFound("parent comment"));
            }
            _ => {
                return Err(ServiceError::Store(likewise_core::StoreError::Engine(
                    "comment not stored".into(),
                )));
            }
        };
        metrics::counter!("likewise_comments_total", "kind" => if stored.parent.is_some() { "reply" } else { "top" })
            .increment(1);
        self.indexer.reindex(&touched(&stored)).await;
        if stored.status != CommentStatus::Visible
            && let Some(marks) = &self.shared.stores.held_marks
        {
            // Before the answer: the commenter's next page, on any node, reads their held
            // comments again (the rank index tells the marks too, when it has the entry).
            marks.changed(&[viewer]).await;
        }
        if let Some(layer) = held_by {
            metrics::counter!("likewise_comments_held_total", "layer" => layer.as_str()).increment(1);
        }
        // The commenter sees their comment as ordinary even when it was held (shadow).
        let reader = Reader { user: viewer, moderator: false };
        let shown = as_seen_by(reader, &stored).ok_or(ServiceError::NotFound("comment"))?;
        self.decorate(reader, vec![shown]).await?.pop().ok_or(ServiceError::NotFound("comment"))
    }

    /// What a keyed create answers when its key is stored: `None` for a new key, the first
    /// answer for the same request, a 422 for another one.
    async fn repeat(
        &self,
        viewer: UserId,
        stored: Option<&KeyRecord>,
        keyed: &Keyed,
    ) -> ServiceResult<Option<CommentView>> {
        match replay(stored, &keyed.fingerprint) {
            Replay::Fresh => Ok(None),
            Replay::OtherRequest => Err(retries::other_request()),
            Replay::Same(created) => {
                metrics::counter!("likewise_comment_key_replays_total").increment(1);
                let name = self.upstream.usernames(&[viewer]).await?.pop().unwrap_or_default();
                retries::first_answer(viewer, &created, name).map(Some)
            }
        }
    }

    /// Where a reply of `viewer` to `pid` goes on `post`: the top-level parent, and the user
    /// it @mentions (for a reply to a reply). A parent the replier cannot see, in its thread,
    /// does not exist for them: answering otherwise would confirm a held comment, and hang
    /// a reply under it that its own author could not find.
    async fn reply_target(
        &self,
        viewer: UserId,
        post: PostId,
        pid: CommentId,
    ) -> ServiceResult<(Option<CommentId>, Option<UserId>)> {
        let reader = Reader { user: viewer, moderator: false };
        let p = self.upstream.comment_record(pid).await?;
        let p = p.filter(|p| !p.status.is_deleted() && as_seen_by(reader, p).is_some());
        let p = match p {
            Some(p) if p.post == post => p,
            Some(_) => return Err(ServiceError::Invalid("parent_id belongs to another post".into())),
            None => return Err(ServiceError::NotFound("parent comment")),
        };
        // No reply to the comment of someone who blocked the replier (nor under it: the
        // top-level comment's author is notified of every reply).
        self.moderation.check_not_blocked_by_commenter(p.author, viewer).await?;
        let Some(top) = p.parent else { return Ok((Some(p.id), None)) };
        // A reply to a reply goes under the same top-level parent, @mentioning; the replier
        // must see that parent (a placeholder still standing counts), or the reply would
        // hang where they cannot see it.
        let t = self.upstream.comment_record(top).await?;
        let t =
            t.filter(|t| as_seen_by(reader, t).is_some()).ok_or(ServiceError::NotFound("parent comment"))?;
        self.moderation.check_not_blocked_by_commenter(t.author, viewer).await?;
        Ok((Some(top), Some(p.author)))
    }

    /// Delete a comment (its author or the post's author).
    pub async fn delete(&self, reader: Reader, id: CommentId) -> ServiceResult<()> {
        let r = self.upstream.comment_record(id).await?.ok_or(ServiceError::NotFound("comment"))?;
        if seen_in_thread(&self.upstream, reader, &r).await?.is_none() {
            return Err(ServiceError::NotFound("comment"));
        }
        if reader.user != r.author && reader.user != r.post_author && !reader.moderator {
            return Err(ServiceError::Forbidden(
                "only the comment's author or the post's author may delete it".into(),
            ));
        }
        self.shared.stores.writer.submit_comment(CommentOp::Delete { id, actor: reader.user }).await?;
        // A deleted comment gives its pin slot back (`comment_changed` below drops the post's
        // cached ranking). Read first: most deleted comments were never pinned.
        if r.parent.is_none() && self.shared.stores.moderation.pins(r.post).await?.contains(&id) {
            self.shared.stores.moderation.change_pin(r.post, id, false).await?;
        }
        self.shared.comment_changed(&r);
        self.indexer.reindex(&touched(&r)).await;
        // Nothing is left to decide about a deleted comment.
        self.shared.stores.moderation.set_queued(id, false).await?;
        Ok(())
    }
}

/// The top-level comments a write of `r` moves in the rank index: itself, or its parent.
pub(crate) fn touched(r: &CommentRecord) -> Vec<(CommentId, likewise_core::ids::PostId)> {
    std::iter::once(r.id).chain(r.parent).map(|c| (c, r.post)).collect()
}
