//! Reading comments: keyset pages of a post's top-level comments and of a comment's replies,
//! as one viewer may see them, and the batched decoration of records into views.

use super::{CommentPage, CommentView, Comments, Order, Reader, as_seen_by};
use crate::{ServiceError, ServiceResult};
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::like::{Target, TargetKind};
use likewise_core::write::CommentRecord;

/// Replies read to decide whether a placeholder is shown: a thread whose first replies are
/// all hidden from the reader is rare, and past these it is not shown.
const PLACEHOLDER_SCAN: usize = 50;

impl Comments {
    /// Top-level comments of a post, keyset-paged by ID, as `reader` may see them.
    pub async fn list(
        &self,
        reader: Reader,
        post: PostId,
        order: Order,
        after: Option<CommentId>,
        limit: usize,
    ) -> ServiceResult<CommentPage> {
        let meta = self.upstream.require_post(post).await?;
        let newest = order == Order::Newest;
        self.page(reader, limit, after, |after, n| async move {
            let rows = self.shared.stores.comments.top_level(post, newest, after, n).await?;
            Ok(rows.into_iter().map(|r| CommentRecord { post_author: meta.author, ..r }).collect())
        })
        .await
    }

    /// Replies under a top-level comment, oldest first.
    pub async fn replies(
        &self,
        reader: Reader,
        parent: CommentId,
        after: Option<CommentId>,
        limit: usize,
    ) -> ServiceResult<CommentPage> {
        let p = self.upstream.comment_record(parent).await?;
        let p = p.filter(|p| as_seen_by(reader, p).is_some()).ok_or(ServiceError::NotFound("comment"))?;
        let post_author = p.post_author;
        self.page(reader, limit, after, |after, n| async move {
            let rows = self.shared.stores.comments.replies(p.id, after, n).await?;
            Ok(rows.into_iter().map(|r| CommentRecord { post_author, ..r }).collect())
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
                if let Some(seen) = as_seen_by(reader, &r)
                    && (!seen.status.is_deleted() || self.placeholder_shown(reader, &r).await?)
                {
                    shown.push(seen);
                }
            }
            if shown.len() == limit || exhausted {
                break;
            }
        }
        let items = self.decorate(reader, shown).await?;
        Ok(CommentPage { items, next_after: if exhausted { None } else { after } })
    }

    /// Is the deleted placeholder `r` shown to `reader`? Only while it has a reply this reader
    /// can see: a placeholder keeps a thread's shape, and over replies hidden from the reader
    /// it would only reveal that they exist. Read from storage, not the counts, so it goes
    /// with its last visible reply at once.
    pub(crate) async fn placeholder_shown(&self, reader: Reader, r: &CommentRecord) -> ServiceResult<bool> {
        let replies = self.shared.stores.comments.replies(r.id, None, PLACEHOLDER_SCAN).await?;
        Ok(replies
            .into_iter()
            .any(|x| as_seen_by(reader, &CommentRecord { post_author: r.post_author, ..x }).is_some()))
    }

    /// Decorate records with counts, liked state and names (batched).
    pub async fn decorate(
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
            self.shared.counts.get_many(&targets),
            self.shared.stores.likes.liked_among(reader.user, TargetKind::Comment, &ids),
            self.upstream.usernames(&authors),
        );
        let (counts, liked, names) = (counts?, liked?, names?);
        let discount = self.shared.integrity.discount().await;
        Ok(recs
            .into_iter()
            .zip(counts)
            .zip(liked)
            .zip(names)
            .map(|(((record, c), viewer_has_liked), author_username)| {
                let deleted = record.status.is_deleted();
                let like_count = discount.apply(Target::comment(record.id.0), c.counts.likes);
                CommentView {
                    record: if deleted { CommentRecord { text: String::new(), ..record } } else { record },
                    author_username,
                    like_count,
                    reply_count: c.counts.replies.max(0),
                    viewer_has_liked,
                    pinned: false,
                }
            })
            .collect())
    }
}
