//! Writing the rank index (`RankIndex`): entries recomputed from stored state, for the
//! aggregator (every event touching a top-level comment, before the counts it read are
//! committed) and for the comment write path (its own comment, at once, so a new comment is in
//! its author's top order on the next read). Every write is a full recomputation, never an
//! increment, so the two writers and any replay converge on the same entry.

use crate::ServiceResult;
use crate::shared::Shared;
use crate::upstream::Upstream;
use likewise_core::comment::id::id_timestamp_ms;
use likewise_core::comment::rank::{self, RankInput, base_score};
use likewise_core::comment::record::CommentRecord;
use likewise_core::comment::spam::{SpamSignals, spam_score};
use likewise_core::comment::status::CommentStatus;
use likewise_core::counter::{CounterField, CounterKey};
use likewise_core::event::{Event, EventKind};
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::like::{Target, TargetKind};
use likewise_core::ports::{RankChange, RankEntry};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// See the module documentation.
pub struct RankIndexer {
    shared: Arc<Shared>,
    upstream: Arc<Upstream>,
}

impl RankIndexer {
    /// The indexer.
    pub fn new(shared: Arc<Shared>, upstream: Arc<Upstream>) -> Self {
        RankIndexer { shared, upstream }
    }

    /// Recompute the entries of these comments (top-level ones; a reply's parent is recomputed
    /// when the reply is given) after a write the service made, and store them. A failure is
    /// logged: the aggregator recomputes them from the write's event.
    pub async fn reindex(&self, touched: &[(CommentId, PostId)]) {
        let ids: Vec<CommentId> = touched.iter().map(|(c, _)| *c).collect();
        let post_of: BTreeMap<u64, u64> = touched.iter().map(|(c, p)| (c.0, p.0)).collect();
        let run = async {
            let changes = self.changes_for(&ids, &post_of, &HashMap::new(), &[]).await?;
            self.shared.stores.ranks.change_ranks(&changes).await?;
            Ok::<_, crate::ServiceError>(())
        };
        if let Err(e) = run.await {
            tracing::warn!(error = %e, "updating the rank index after a comment write failed; the aggregator will");
            metrics::counter!("likewise_rank_index_write_failures_total").increment(1);
        }
    }

    /// The rank index changes for the top-level comments `events` touch (an aggregator
    /// batch), scored with the counts they will have once `deltas` are committed. Written
    /// before the counts, so a crash in between replays the batch and recomputes the same
    /// entries (every entry is recomputed from stored state, never incremented).
    pub async fn changes(
        &self,
        events: &[Event],
        deltas: &[(CounterKey, i64)],
    ) -> ServiceResult<Vec<RankChange>> {
        let mut post_of: BTreeMap<u64, u64> = BTreeMap::new();
        // Comments whose record, author or flags may have changed: recomputed in full. The
        // others only gained or lost likes: rescored from their stored entry and new count.
        let mut full: BTreeSet<u64> = BTreeSet::new();
        let mut likers: Vec<(u64, UserId, PostId)> = Vec::new();
        let mut replies_by: Vec<(u64, UserId)> = Vec::new();
        for e in events {
            match e.kind {
                EventKind::LikeCreated | EventKind::LikeRemoved => {
                    if e.target.kind == TargetKind::Comment {
                        post_of.insert(e.target.id, e.post);
                        likers.push((e.target.id, e.actor, PostId(e.post)));
                    }
                }
                EventKind::CommentCreated | EventKind::CommentStatusChanged | EventKind::CommentDeleted => {
                    post_of.insert(e.target.id, e.post);
                    full.insert(e.target.id);
                    if e.parent != 0 {
                        // A reply moves its parent's reply count.
                        post_of.insert(e.parent, e.post);
                        full.insert(e.parent);
                        if e.kind == EventKind::CommentCreated {
                            replies_by.push((e.parent, e.actor));
                        }
                    }
                }
            }
        }
        if post_of.is_empty() {
            return Ok(Vec::new());
        }
        // A like or unlike by the post's author moves a flag: in full.
        let posts: Vec<PostId> = likers.iter().map(|l| l.2).collect::<BTreeSet<_>>().into_iter().collect();
        let authors: HashMap<PostId, UserId> = posts
            .iter()
            .zip(self.upstream.posts_meta(&posts).await?)
            .filter_map(|(p, m)| Some((*p, m?.author)))
            .collect();
        for (id, actor, post) in &likers {
            if authors.get(post) == Some(actor) {
                full.insert(*id);
            }
        }
        let pending: HashMap<CounterKey, i64> = deltas.iter().copied().collect();
        let mut changes = Vec::new();
        let light: Vec<(u64, u64)> =
            post_of.iter().filter(|(id, _)| !full.contains(id)).map(|(id, p)| (*id, *p)).collect();
        for missing in self.rescore(&light, &pending, &mut changes).await? {
            full.insert(missing);
        }
        let ids: Vec<CommentId> = full.iter().map(|id| CommentId(*id)).collect();
        changes.extend(self.changes_for(&ids, &post_of, &pending, &replies_by).await?);
        Ok(changes)
    }

    /// New scores for comments whose likes alone changed, from their stored entries and
    /// counts (one read of each per post): no record, profile or text is read. Returns the
    /// comments that have no entry (replies, or comments to index in full).
    async fn rescore(
        &self,
        light: &[(u64, u64)],
        pending: &HashMap<CounterKey, i64>,
        changes: &mut Vec<RankChange>,
    ) -> ServiceResult<Vec<u64>> {
        let mut by_post: BTreeMap<u64, Vec<CommentId>> = BTreeMap::new();
        for (id, post) in light {
            by_post.entry(*post).or_default().push(CommentId(*id));
        }
        let mut missing = Vec::new();
        for (post, ids) in by_post {
            let targets: Vec<Target> = ids.iter().map(|c| Target::comment(c.0)).collect();
            let (entries, counts) = tokio::join!(
                self.shared.stores.ranks.ranks_of(PostId(post), &ids),
                self.shared.stores.counters.counts(&targets),
            );
            for ((id, entry), (t, c)) in ids.iter().zip(entries?).zip(targets.iter().zip(counts?)) {
                let Some(e) = entry else {
                    missing.push(id.0);
                    continue;
                };
                let delta = |field| pending.get(&CounterKey { target: *t, field }).copied().unwrap_or(0);
                let input = RankInput {
                    likes: c.likes + delta(CounterField::Likes),
                    replies: c.replies + delta(CounterField::Replies),
                    liked_by_post_author: e.author_liked,
                    replied_by_post_author: e.author_replied,
                    ..RankInput::default()
                };
                let score = rank::score(rank::points(&input), e.factor, id_timestamp_ms(*id));
                if score != e.score {
                    changes.push(RankChange::Put(RankEntry { score, ..e }));
                }
            }
        }
        Ok(missing)
    }

    /// The changes for `ids` (their posts in `post_of`): records read from the store (the
    /// truth, not the record cache: statuses decide what enters the index).
    async fn changes_for(
        &self,
        ids: &[CommentId],
        post_of: &BTreeMap<u64, u64>,
        pending: &HashMap<CounterKey, i64>,
        replies_by: &[(u64, UserId)],
    ) -> ServiceResult<Vec<RankChange>> {
        let recs = self.shared.stores.comments.comments(ids).await?;
        let recs = self.upstream.with_current_authors(recs).await?;
        let mut changes = Vec::new();
        let mut tops = Vec::new();
        for (id, r) in ids.iter().zip(recs) {
            match r {
                Some(r) if r.parent.is_none() => tops.push(r),
                Some(_) => {}
                None => changes.push(RankChange::Remove { post: PostId(post_of[&id.0]), comment: *id }),
            }
        }
        changes.extend(self.entries_for(tops, pending, replies_by).await?);
        Ok(changes)
    }

    /// Rank entries for top-level comment records: listed for those others may see (and
    /// placeholders), unlisted for the rest. `pending` are counter deltas not yet stored;
    /// `replies_by` are (parent, author) of replies seen in the same events.
    async fn entries_for(
        &self,
        tops: Vec<CommentRecord>,
        pending: &HashMap<CounterKey, i64>,
        replies_by: &[(u64, UserId)],
    ) -> ServiceResult<Vec<RankChange>> {
        let mut changes = Vec::with_capacity(tops.len());
        let ranked = tops;
        if ranked.is_empty() {
            return Ok(changes);
        }
        let targets: Vec<Target> = ranked.iter().map(|r| Target::comment(r.id.0)).collect();
        let authors: Vec<UserId> = ranked.iter().map(|r| r.author).collect();
        let (counts, profiles) = tokio::join!(
            self.shared.stores.counters.counts(&targets),
            self.shared.stores.meta.users(&authors)
        );
        let (counts, profiles) = (counts?, profiles?);
        // Per post (usually one): what its author liked, and what the index already knows.
        let mut by_post: BTreeMap<PostId, Vec<usize>> = BTreeMap::new();
        for (i, r) in ranked.iter().enumerate() {
            by_post.entry(r.post).or_default().push(i);
        }
        let mut author_liked = vec![false; ranked.len()];
        let mut replied = vec![false; ranked.len()];
        for (post, idx) in &by_post {
            let author = ranked[idx[0]].post_author;
            let ids: Vec<u64> = idx.iter().map(|i| ranked[*i].id.0).collect();
            let cids: Vec<CommentId> = ids.iter().map(|id| CommentId(*id)).collect();
            let (liked, known) = tokio::join!(
                self.shared.stores.likes.liked_among(author, TargetKind::Comment, &ids),
                self.shared.stores.ranks.ranks_of(*post, &cids),
            );
            for ((i, l), k) in idx.iter().zip(liked?).zip(known?) {
                author_liked[*i] = l;
                replied[*i] = k.is_some_and(|k| k.author_replied)
                    || replies_by.iter().any(|(p, by)| *p == ranked[*i].id.0 && *by == author);
            }
        }
        for (i, r) in ranked.iter().enumerate() {
            let delta = |field| pending.get(&CounterKey { target: targets[i], field }).copied().unwrap_or(0);
            let input = RankInput {
                likes: counts[i].likes + delta(CounterField::Likes),
                replies: counts[i].replies + delta(CounterField::Replies),
                created_ms: id_timestamp_ms(r.id),
                liked_by_post_author: author_liked[i],
                replied_by_post_author: replied[i],
                by_post_author: r.author == r.post_author,
                author_verified: profiles[i].as_ref().is_some_and(|p| p.verified),
                integrity: spam_score(&SpamSignals::of(&r.text), 0),
            };
            changes.push(RankChange::Put(RankEntry {
                post: r.post,
                comment: r.id,
                author: r.author,
                score: base_score(&input),
                author_replied: replied[i],
                author_liked: author_liked[i],
                factor: rank::weight_factor(&input),
                // In everyone's order: visible comments, and placeholders (a stored deleted
                // record always has replies). The rest only for those who may see them.
                listed: r.status == CommentStatus::Visible || r.status.is_deleted(),
            }));
        }
        Ok(changes)
    }

    /// Index a post's comments from their records: for posts whose comments were written
    /// before the rank index existed (an upgrade). Runs when a post has visible comments but
    /// no entry; the aggregator writes entries before it commits the counts, so a post with
    /// counted comments has entries unless they predate the index.
    pub async fn backfill(&self, post: PostId) -> ServiceResult<()> {
        let counts = self.shared.counts.get_many(&[Target::post(post.0)]).await?;
        if counts.first().is_none_or(|c| c.counts.comments <= 0) {
            return Ok(());
        }
        let mut after = None;
        let mut indexed = 0usize;
        loop {
            let recs = self.shared.stores.comments.top_level(post, true, after, 1_000).await?;
            let Some(last) = recs.last() else { break };
            after = Some(last.id);
            let n = recs.len();
            let recs = self.upstream.with_current_authors(recs.into_iter().map(Some).collect()).await?;
            let changes =
                self.entries_for(recs.into_iter().flatten().collect(), &HashMap::new(), &[]).await?;
            indexed += changes.iter().filter(|c| matches!(c, RankChange::Put(_))).count();
            self.shared.stores.ranks.change_ranks(&changes).await?;
            if n < 1_000 {
                break;
            }
        }
        tracing::info!(
            post = post.0,
            indexed,
            "indexed the comments of a post written before the rank index"
        );
        metrics::counter!("likewise_rank_backfills_total").increment(1);
        Ok(())
    }
}
