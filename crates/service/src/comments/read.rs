//! Reading comments: keyset pages of a post's top-level comments and of a comment's replies,
//! as one viewer may see them, and the batched decoration of records into views.

use super::{CommentPage, CommentView, Comments, Order, Reader, as_seen_by};
use crate::{ServiceError, ServiceResult};
use likewise_core::comment::record::CommentRecord;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::like::{Target, TargetKind};
use std::collections::{BTreeSet, HashMap, HashSet};

/// Replies read to decide whether a placeholder is shown: a thread whose first replies are
/// all hidden from the reader is rare, and past these it is not shown.
const PLACEHOLDER_SCAN: usize = 50;

/// Most of a viewer's own held replies one page reads.
const OWN_HELD_REPLIES: usize = 200;

/// Replies counted for one viewer alone, where they see them as ordinary ones: in their
/// post's `comment_count` and their parent's `reply_count`. The viewer's own held replies
/// (see [`Comments::own_held_replies`]), and the visible replies under the viewer's own held
/// top-level comments (see [`Comments::replies_under_own_held`]).
#[derive(Debug, Clone, Default)]
pub struct OwnReplies {
    /// By post.
    pub by_post: HashMap<PostId, i64>,
    /// By top-level parent.
    pub by_parent: HashMap<CommentId, i64>,
    /// The viewer's own held replies counted (those of [`Comments::own_held_replies`]).
    pub held: HashSet<CommentId>,
}

impl OwnReplies {
    /// Count `n` replies under `parent` on `post` (`n` < 0: count fewer).
    pub(crate) fn add(&mut self, post: PostId, parent: CommentId, n: i64) {
        *self.by_post.entry(post).or_default() += n;
        *self.by_parent.entry(parent).or_default() += n;
    }

    /// Count `other`'s replies too.
    pub fn extend(&mut self, other: OwnReplies) {
        for (post, n) in other.by_post {
            *self.by_post.entry(post).or_default() += n;
        }
        for (parent, n) in other.by_parent {
            *self.by_parent.entry(parent).or_default() += n;
        }
        self.held.extend(other.held);
    }
}

/// The result of one of the reads that count a viewer's held comments for them alone, or
/// nothing when it failed: the viewer then sees the counts everyone sees, and the failure is
/// logged and counted (`likewise_own_held_failed_total`).
pub(crate) fn or_everyones<T: Default>(read: ServiceResult<T>, what: &str) -> T {
    read.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "reading {what} failed; serving everyone's counts");
        metrics::counter!("likewise_own_held_failed_total").increment(1);
        T::default()
    })
}

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

    /// The viewer's own held replies on `posts` that count for them: those under a parent
    /// the viewer sees opening its thread (`likewise_core::comment::thread::counted`, with
    /// the parent as the viewer is shown it: visible or a placeholder, their own held parent
    /// included). Their author sees them as ordinary replies (shadow visibility), so their
    /// counts include them for their author alone: the shared counters count visible
    /// comments only. One
    /// lookup of the store's by-author index (one seek for a viewer with none); the parents
    /// come through the record cache. Moderators see real statuses: nothing is added for them.
    pub async fn own_held_replies(&self, reader: Reader, posts: &[PostId]) -> ServiceResult<OwnReplies> {
        let mut own = OwnReplies::default();
        if reader.moderator || posts.is_empty() {
            return Ok(own);
        }
        let recs = self.shared.stores.comments.held_replies_by(reader.user, posts, OWN_HELD_REPLIES).await?;
        // The records decide: one changed since the index was read is left out.
        let held: Vec<(PostId, CommentId, CommentId)> = recs
            .into_iter()
            .filter(|r| r.author == reader.user && r.status.is_held())
            .filter_map(|r| Some((r.post, r.parent?, r.id)))
            .collect();
        if held.is_empty() {
            return Ok(own);
        }
        let parents: Vec<CommentId> =
            held.iter().map(|(_, p, _)| *p).collect::<BTreeSet<_>>().into_iter().collect();
        let open: HashMap<CommentId, bool> = parents
            .iter()
            .copied()
            .zip(self.upstream.comment_records(&parents).await?)
            .map(|(id, r)| {
                let seen = r.and_then(|p| as_seen_by(reader, &p));
                (id, seen.is_some_and(|p| p.status.opens_thread()))
            })
            .collect();
        for (post, parent, reply) in held {
            if open.get(&parent).copied().unwrap_or(false) {
                own.add(post, parent, 1);
                own.held.insert(reply);
            }
        }
        Ok(own)
    }

    /// The visible replies under the viewer's own held top-level comments `held` (each with
    /// its post; held from others, shown to their author as ordinary comments). Others do not
    /// see the thread of a held comment, so the shared counters leave its replies out
    /// (`likewise_core::comment::thread`); its author sees the thread open, and counts them.
    /// Their own held replies under it are in [`Comments::own_held_replies`] already. One
    /// batched store read, none when `held` is empty (the usual case).
    pub async fn replies_under_own_held(&self, held: &[(PostId, CommentId)]) -> ServiceResult<OwnReplies> {
        let mut own = OwnReplies::default();
        if held.is_empty() {
            return Ok(own);
        }
        let ids: Vec<CommentId> = held.iter().map(|(_, c)| *c).collect();
        let counts = self.shared.stores.comments.visible_reply_counts(&ids).await?;
        for ((post, parent), n) in held.iter().zip(counts) {
            if n > 0 {
                own.add(*post, *parent, n);
            }
        }
        Ok(own)
    }

    /// [`Comments::replies_under_own_held`], or none when the read fails: then the viewer
    /// sees the counts everyone sees for those threads.
    pub async fn replies_under_own_held_or_none(&self, held: &[(PostId, CommentId)]) -> OwnReplies {
        or_everyones(self.replies_under_own_held(held).await, "the replies under the viewer's held comments")
    }

    /// Of `recs` (as `reader` sees them), the reader's own top-level comments held back from
    /// others, with their posts: their stored statuses come through the record cache, read
    /// only when the reader wrote one of `recs`. Nothing for a moderator (real statuses).
    async fn own_held_among(&self, reader: Reader, recs: &[CommentRecord]) -> Vec<(PostId, CommentId)> {
        let mine: Vec<CommentId> = recs
            .iter()
            .filter(|r| !reader.moderator && r.parent.is_none() && r.author == reader.user)
            .map(|r| r.id)
            .collect();
        if mine.is_empty() {
            return Vec::new();
        }
        or_everyones(self.upstream.comment_records(&mine).await, "the viewer's own comments")
            .into_iter()
            .flatten()
            .filter(|r| r.parent.is_none() && r.author == reader.user && r.status.is_held())
            .map(|r| (r.post, r.id))
            .collect()
    }

    /// [`Comments::own_held_replies`], or none when the read fails: then the viewer sees the
    /// counts everyone sees.
    pub async fn own_held_replies_or_none(&self, reader: Reader, posts: &[PostId]) -> OwnReplies {
        or_everyones(self.own_held_replies(reader, posts).await, "the viewer's held replies")
    }

    /// Decorate records with counts, liked state and names (batched). A top-level comment's
    /// `reply_count` includes the replies counted for the reader alone ([`OwnReplies`]): their
    /// own held replies under it, and, under their own held comment, the visible replies.
    pub async fn decorate(
        &self,
        reader: Reader,
        recs: Vec<CommentRecord>,
    ) -> ServiceResult<Vec<CommentView>> {
        self.decorate_with(reader, recs, None).await
    }

    /// [`Comments::decorate`], with the replies counted for the reader alone already read
    /// for the records' posts (`own`: a feed page reads them once for its counts and its
    /// previews).
    pub async fn decorate_with(
        &self,
        reader: Reader,
        recs: Vec<CommentRecord>,
        own: Option<&OwnReplies>,
    ) -> ServiceResult<Vec<CommentView>> {
        if recs.is_empty() {
            return Ok(Vec::new());
        }
        let targets: Vec<Target> = recs.iter().map(|r| Target::comment(r.id.0)).collect();
        let ids: Vec<u64> = recs.iter().map(|r| r.id.0).collect();
        let authors: Vec<UserId> = recs.iter().map(|r| r.author).collect();
        let parents_on: Vec<PostId> = match own {
            Some(_) => Vec::new(),
            None => recs
                .iter()
                .filter(|r| r.parent.is_none())
                .map(|r| r.post)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect(),
        };
        let own_threads = async {
            match own {
                Some(_) => OwnReplies::default(),
                None => {
                    let held = self.own_held_among(reader, &recs).await;
                    self.replies_under_own_held_or_none(&held).await
                }
            }
        };
        let (counts, liked, names, mut read, threads) = tokio::join!(
            self.shared.counts.get_many(&targets),
            self.shared.stores.likes.liked_among(reader.user, TargetKind::Comment, &ids),
            self.upstream.usernames(&authors),
            self.own_held_replies_or_none(reader, &parents_on),
            own_threads,
        );
        read.extend(threads);
        let own = own.unwrap_or(&read);
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
                let own_replies = own.by_parent.get(&record.id).copied().unwrap_or(0);
                CommentView {
                    record: if deleted { CommentRecord { text: String::new(), ..record } } else { record },
                    author_username,
                    like_count,
                    reply_count: c.counts.replies.max(0) + own_replies,
                    viewer_has_liked,
                    pinned: false,
                }
            })
            .collect())
    }
}
