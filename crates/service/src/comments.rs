//! Comments: write (validated, permission-checked, through the group commit), read (keyset
//! pages, replies) with shadow visibility applied per viewer, delete, and comment likes.

use crate::likes::LikeResult;
use crate::{Engagement, ServiceError, ServiceResult, now_ms};
use likewise_core::comment::simhash::simhash64;
use likewise_core::comment::status::{Audience, CommentStatus, shown_as};
use likewise_core::comment::text::normalize_text;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::like::{LikeAction, LikeOp, Target, TargetKind};
use likewise_core::model::CommentsPolicy;
use likewise_core::write::{CommentOp, CommentOutcome, CommentRecord};

/// Who is reading.
#[derive(Debug, Clone, Copy)]
pub struct Reader {
    /// The viewer.
    pub user: UserId,
    /// Moderators (service role) see real statuses.
    pub moderator: bool,
}

/// A comment as one viewer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommentView {
    /// The stored comment (its `status` is the one shown to this viewer).
    pub record: CommentRecord,
    /// The author's display name.
    pub author_username: String,
    /// Likes of the comment.
    pub like_count: i64,
    /// Visible replies (top-level comments).
    pub reply_count: i64,
    /// Has the viewer liked it.
    pub viewer_has_liked: bool,
    /// Pinned by the post's author.
    pub pinned: bool,
}

/// Order of a comments page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Newest first (keyset on the ID).
    Newest,
    /// Oldest first (keyset on the ID).
    Oldest,
}

/// A page of comments and where the next one starts.
#[derive(Debug, Clone)]
pub struct CommentPage {
    /// The comments shown to this viewer.
    pub items: Vec<CommentView>,
    /// The last ID scanned, when there may be more.
    pub next_after: Option<CommentId>,
}

fn audience(reader: Reader, r: &CommentRecord) -> Audience {
    audience_of(reader, r.author, r.post_author)
}

fn audience_of(reader: Reader, author: UserId, post_author: UserId) -> Audience {
    if reader.user == author {
        Audience::CommentAuthor
    } else if reader.moderator {
        Audience::Moderator
    } else if reader.user == post_author {
        Audience::PostAuthor
    } else {
        Audience::Other
    }
}

/// How `reader` sees `r`: `None` when hidden from them; otherwise the record with the status
/// they are shown (a shadow-hidden comment looks visible to its author).
pub fn as_seen_by(reader: Reader, r: &CommentRecord) -> Option<CommentRecord> {
    // A stored Deleted record is always a placeholder that had replies.
    let shown = shown_as(r.status, audience(reader, r), r.status.is_deleted())?;
    Some(CommentRecord { status: shown, ..r.clone() })
}

/// Whether `reader` is shown a comment by `author` on a post by `post_author` in `status`
/// (what [`as_seen_by`] decides, from the fields a ranked candidate keeps).
pub fn seen_by(reader: Reader, author: UserId, post_author: UserId, status: CommentStatus) -> bool {
    shown_as(status, audience_of(reader, author, post_author), status.is_deleted()).is_some()
}

impl Engagement {
    /// Write a comment (or a reply, with `parent`).
    pub async fn create_comment(
        &self,
        viewer: UserId,
        post: PostId,
        raw_text: &str,
        parent: Option<CommentId>,
    ) -> ServiceResult<CommentView> {
        let meta = self.post_meta(post).await?.ok_or(ServiceError::NotFound("post"))?;
        self.check_not_blocked(meta.author, viewer).await?;
        match meta.comments {
            CommentsPolicy::Off => {
                return Err(ServiceError::Forbidden("comments are turned off for this post".into()));
            }
            CommentsPolicy::Followers
                if viewer != meta.author && !self.followees(viewer).await?.contains(&meta.author) =>
            {
                return Err(ServiceError::Forbidden(
                    "only the author's followers may comment on this post".into(),
                ));
            }
            _ => {}
        }
        let text = normalize_text(raw_text).map_err(|e| ServiceError::Invalid(e.to_string()))?;
        self.check_comment_rate(viewer).await?;
        let (parent_id, reply_to_user) = match parent {
            None => (None, None),
            Some(pid) => {
                let p = self.stores.comments.comments(&[pid]).await?.pop().flatten();
                // A parent the replier cannot see does not exist for them: answering otherwise
                // would confirm a held comment, and hang a public reply under it.
                let reader = Reader { user: viewer, moderator: false };
                let p = p.filter(|p| !p.status.is_deleted() && as_seen_by(reader, p).is_some());
                let p = match p {
                    Some(p) if p.post == post => p,
                    Some(p) if p.post != post => {
                        return Err(ServiceError::Invalid("parent_id belongs to another post".into()));
                    }
                    _ => return Err(ServiceError::NotFound("parent comment")),
                };
                match p.parent {
                    // A reply to a reply goes under the same top-level parent, @mentioning.
                    Some(top) => (Some(top), Some(p.author)),
                    None => (Some(p.id), None),
                }
            }
        };
        let simhash = simhash64(&text);
        let (status, layer) = self.initial_status(viewer, meta.author, &text, simhash).await?;
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
        let committed = self.stores.writer.submit_comment(CommentOp::Create(rec)).await?;
        let stored = match committed.outcome {
            CommentOutcome::Done(Some(r)) => r,
            _ => {
                return Err(ServiceError::Store(likewise_core::StoreError::Engine(
                    "comment not stored".into(),
                )));
            }
        };
        metrics::counter!("likewise_comments_total", "kind" => if stored.parent.is_some() { "reply" } else { "top" })
            .increment(1);
        self.stores.moderation.add_fingerprint(viewer, stored.id, simhash).await?;
        if status != CommentStatus::Visible {
            metrics::counter!("likewise_comments_held_total", "layer" => layer).increment(1);
            self.stores.moderation.set_queued(stored.id, true).await?;
        }
        // The commenter sees their comment as ordinary even when it was held (shadow).
        let reader = Reader { user: viewer, moderator: false };
        let shown = as_seen_by(reader, &stored).ok_or(ServiceError::NotFound("comment"))?;
        self.views(reader, vec![shown]).await?.pop().ok_or(ServiceError::NotFound("comment"))
    }

    /// Top-level comments of a post, keyset-paged by ID, as `reader` may see them.
    pub async fn list_comments(
        &self,
        reader: Reader,
        post: PostId,
        order: Order,
        after: Option<CommentId>,
        limit: usize,
    ) -> ServiceResult<CommentPage> {
        self.post_meta(post).await?.ok_or(ServiceError::NotFound("post"))?;
        let newest = order == Order::Newest;
        self.page(reader, limit, after, |after, n| async move {
            self.stores.comments.top_level(post, newest, after, n).await
        })
        .await
    }

    /// Replies under a top-level comment, oldest first.
    pub async fn list_replies(
        &self,
        reader: Reader,
        parent: CommentId,
        after: Option<CommentId>,
        limit: usize,
    ) -> ServiceResult<CommentPage> {
        let p = self.stores.comments.comments(&[parent]).await?.pop().flatten();
        let p = p.filter(|p| as_seen_by(reader, p).is_some()).ok_or(ServiceError::NotFound("comment"))?;
        self.page(reader, limit, after, |after, n| async move {
            self.stores.comments.replies(p.id, after, n).await
        })
        .await
    }

    /// Scan keyset pages until `limit` comments visible to `reader` are found: comments hidden
    /// from this viewer are skipped without leaving a gap or a repeat in the cursor.
    async fn page<F, Fut>(
        &self,
        reader: Reader,
        limit: usize,
        mut after: Option<CommentId>,
        fetch: F,
    ) -> ServiceResult<CommentPage>
    where
        F: Fn(Option<CommentId>, usize) -> Fut,
        Fut: std::future::Future<Output = likewise_core::StoreResult<Vec<CommentRecord>>>,
    {
        let mut shown = Vec::with_capacity(limit);
        let mut exhausted = false;
        // Bounded work per request: at most 10 scans of limit+1 rows.
        for _ in 0..10 {
            let rows = fetch(after, limit + 1).await?;
            exhausted = rows.len() <= limit;
            for r in rows {
                if shown.len() == limit {
                    exhausted = false;
                    break;
                }
                after = Some(r.id);
                if let Some(seen) = as_seen_by(reader, &r) {
                    shown.push(seen);
                }
            }
            if shown.len() == limit || exhausted {
                break;
            }
        }
        let items = self.views(reader, shown).await?;
        Ok(CommentPage { items, next_after: if exhausted { None } else { after } })
    }

    /// Decorate records with counts, liked state and names (batched).
    pub(crate) async fn views(
        &self,
        reader: Reader,
        recs: Vec<CommentRecord>,
    ) -> ServiceResult<Vec<CommentView>> {
        if recs.is_empty() {
            return Ok(Vec::new());
        }
        let targets: Vec<Target> = recs.iter().map(|r| Target::comment(r.id.0)).collect();
        let ids: Vec<u64> = recs.iter().map(|r| r.id.0).collect();
        let authors: Vec<UserId> = recs.iter().map(|r| r.author).collect();
        let (counts, liked, names) = tokio::join!(
            self.counts.get_many(&targets),
            self.stores.likes.liked_among(reader.user, TargetKind::Comment, &ids),
            self.usernames(&authors),
        );
        let (counts, liked, names) = (counts?, liked?, names?);
        Ok(recs
            .into_iter()
            .zip(counts)
            .zip(liked)
            .zip(names)
            .map(|(((record, c), viewer_has_liked), author_username)| {
                let deleted = record.status.is_deleted();
                CommentView {
                    record: if deleted { CommentRecord { text: String::new(), ..record } } else { record },
                    author_username,
                    like_count: c.counts.likes.max(0),
                    reply_count: c.counts.replies.max(0),
                    viewer_has_liked,
                    pinned: false,
                }
            })
            .collect())
    }

    /// Comment records by ID through the record cache (read paths only; see
    /// [`crate::cache::records`]).
    pub(crate) async fn comment_records(
        &self,
        ids: &[CommentId],
    ) -> ServiceResult<Vec<Option<CommentRecord>>> {
        let mut out: Vec<Option<CommentRecord>> = Vec::with_capacity(ids.len());
        let mut missing = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            match self.records.get(*id) {
                Some(r) => out.push(Some((*r).clone())),
                None => {
                    out.push(None);
                    missing.push(i);
                }
            }
        }
        if missing.is_empty() {
            return Ok(out);
        }
        let epoch = self.records.epoch();
        let want: Vec<CommentId> = missing.iter().map(|&i| ids[i]).collect();
        let loaded = self.stores.comments.comments(&want).await?;
        self.records.put_if_unchanged(epoch, loaded.iter().flatten().cloned());
        for (i, r) in missing.into_iter().zip(loaded) {
            out[i] = r;
        }
        Ok(out)
    }

    /// Delete a comment (its author or the post's author).
    pub async fn delete_comment(&self, reader: Reader, id: CommentId) -> ServiceResult<()> {
        let r = self.stores.comments.comments(&[id]).await?.pop().flatten();
        let r = r.filter(|r| as_seen_by(reader, r).is_some()).ok_or(ServiceError::NotFound("comment"))?;
        if reader.user != r.author && reader.user != r.post_author && !reader.moderator {
            return Err(ServiceError::Forbidden(
                "only the comment's author or the post's author may delete it".into(),
            ));
        }
        self.stores.writer.submit_comment(CommentOp::Delete { id, actor: reader.user }).await?;
        self.comment_changed(&r);
        // Nothing is left to decide about a deleted comment.
        self.stores.moderation.set_queued(id, false).await?;
        Ok(())
    }

    /// Like or unlike a comment.
    pub async fn set_comment_like(
        &self,
        viewer: UserId,
        id: CommentId,
        action: LikeAction,
    ) -> ServiceResult<LikeResult> {
        self.check_like_rate(viewer)?;
        let reader = Reader { user: viewer, moderator: false };
        let r = self.stores.comments.comments(&[id]).await?.pop().flatten();
        let r = r
            .filter(|r| !r.status.is_deleted() && as_seen_by(reader, r).is_some())
            .ok_or(ServiceError::NotFound("comment"))?;
        self.check_not_blocked(r.post_author, viewer).await?;
        let op = LikeOp {
            target: Target::comment(id.0),
            user: viewer,
            action,
            target_author: r.author,
            post: r.post.0,
            ts_ms: now_ms(),
        };
        let committed = self.stores.writer.submit(op).await?;
        self.record_own_like(viewer, Target::comment(id.0), committed.outcome.liked).await;
        Ok(LikeResult { liked: committed.outcome.liked, changed: committed.outcome.changed })
    }
}
