//! Top comments (docs/architecture.md, "Top comments"): a rank index per post, walked per viewer at read time.
//!
//! Every top-level comment that others can see (and the placeholder of a deleted one whose
//! replies are still shown) has an entry in the store's rank index (`RankIndex`), scored by
//! `likewise_core::comment::rank::base_score`: engagement, the post author's likes and
//! replies, verified authors and an integrity penalty, plus its creation time as the time
//! decay. That score only moves when an event touches its comment, so the aggregator keeps the
//! index from events (`rank_index.rs`, written before the counts it read are
//! committed): nothing rescans a post, and a post's millionth comment ranks like its first.
//! Held, hidden and removed comments have no entry, so they take no place in anyone's order.
//!
//! Per viewer: comments the viewer may not see are dropped, authors the viewer follows are
//! boosted (`viewer_score`: a constant added to the score), and up to three pinned comments
//! come first on the first page.
//!
//! Paging is stateless, so any node continues any cursor, after restarts too: the cursor is
//! the last comment's viewer score and ID, the time of the first page and the post's index
//! version then (`RankIndex::rank_version`). The next page is the viewer's order strictly
//! below that point, read from the index as it was at that version (`RankIndex::ranked_at`:
//! the store keeps where entries were before likes or moderation moved them), so a walk shows
//! every comment of its first page's moment once, ranked as of that moment, however scores
//! change while it pages. An entry's viewer score is its score or its score plus the boost,
//! so the walk reads the index from the cursor down until no entry further down can beat the
//! page's last one. Comments written after the first page are left out. The store remembers
//! moves for `RANK_HISTORY_MS` (15 minutes): a walk paged for longer sees later moves, and a
//! comment whose score crossed its cursor after that can be missed or seen twice.
//!
//! Feed previews come from [`TopCache`]: the best `TOP_K` entries of a post with the authors
//! and statuses a viewer's filter needs, recomputed by the ranker when events touch the post.
//! The cache holds listed entries only, the same for every viewer; a viewer's own held
//! comments (which they see as ordinary ones) join their previews from [`Ranking::own_held`],
//! read through the store's by-author index of unlisted entries: one lookup for a viewer with
//! none, whatever the page's size.

pub use crate::cache::top::{Candidate, TopCache, TopList};
use crate::comments::{CommentView, Comments, OwnReplies, Reader, as_seen_by, seen_by};
use crate::review::Review;
use crate::shared::Shared;
use crate::upstream::Upstream;
use crate::{ServiceResult, now_ms};
use likewise_core::comment::id::first_id_at;
use likewise_core::comment::rank::{FOLLOW_BOOST, order_top, viewer_score};
use likewise_core::comment::record::CommentRecord;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::ports::RankEntry;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// How many of a post's best entries the cache keeps for previews.
pub const TOP_K: usize = 200;

/// Most index entries one page reads before it stops looking further down (a post whose
/// best entries the viewer mostly cannot see gets a shorter page, never a slow one).
const MAX_WALK: usize = 5_000;

/// Most of a viewer's own held comments one feed page reads.
const OWN_HELD: usize = 200;

/// Where a top-comments page continues: strictly below this point of the viewer's order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TopCursor {
    /// The last comment's viewer score.
    pub score: f64,
    /// The last comment.
    pub id: CommentId,
    /// Comments with this ID or higher (written after the first page) are left out.
    pub bound: u64,
    /// The post's index version at the first page: later pages rank as of it. `None` for
    /// cursors issued before versions existed (they rank as of each page).
    pub version: Option<u64>,
}

/// A page of top comments.
#[derive(Debug, Clone)]
pub struct TopPage {
    /// The comments.
    pub items: Vec<CommentView>,
    /// The next page, if any.
    pub next: Option<TopCursor>,
}

/// See the module documentation.
pub struct Ranking {
    shared: Arc<Shared>,
    upstream: Arc<Upstream>,
    comments: Arc<Comments>,
    review: Arc<Review>,
}

/// Where a walk of the viewer's order runs.
#[derive(Debug, Clone, Copy)]
struct Walk {
    reader: Reader,
    post: PostId,
    post_author: UserId,
    /// Strictly below this (viewer score, ID); `None`: from the top.
    after: Option<(f64, CommentId)>,
    /// Comments with this ID or higher are left out.
    bound: u64,
    /// Rank as of this index version (`None`: as of now).
    version: Option<u64>,
}

/// `(score, id)` after `(cursor score, cursor id)` in best-first order?
fn below(score: f64, id: CommentId, c: (f64, CommentId)) -> bool {
    score < c.0 || score == c.0 && id < c.1
}

impl Ranking {
    /// The ranking service (its cache of rankings is [`Shared::top`]).
    pub fn new(
        shared: Arc<Shared>,
        upstream: Arc<Upstream>,
        comments: Arc<Comments>,
        review: Arc<Review>,
    ) -> Self {
        Ranking { shared, upstream, comments, review }
    }

    /// Compute the head of a post's ranking from the index (and cache it).
    pub async fn compute(&self, post: PostId) -> ServiceResult<Arc<TopList>> {
        let meta = self.upstream.require_post(post).await?;
        let mut entries = self.shared.stores.ranks.ranked(post, None, TOP_K).await?;
        if entries.is_empty() {
            self.comments.indexer.backfill(post).await?;
            entries = self.shared.stores.ranks.ranked(post, None, TOP_K).await?;
        }
        let ids: Vec<CommentId> = entries.iter().map(|e| e.comment).collect();
        let recs = self.upstream.comment_records(&ids).await?;
        let ranked = entries
            .iter()
            .zip(recs)
            .filter_map(|(e, r)| {
                let r = r?;
                Some(Candidate { id: r.id, author: r.author, base: e.score, status: r.status })
            })
            .collect();
        let list = Arc::new(TopList { post_author: meta.author, ranked });
        self.shared.top.put(post, list.clone());
        Ok(list)
    }

    async fn top_list(&self, post: PostId) -> ServiceResult<Arc<TopList>> {
        match self.shared.top.get(post) {
            Some(l) => Ok(l),
            None => self.compute(post).await,
        }
    }

    /// Of the pins that are not among their post's candidates (older than the ranked window),
    /// those the viewer may see: one batched record read for every post given.
    async fn pins_seen_outside(
        &self,
        reader: Reader,
        posts: &[(&TopList, &Vec<CommentId>)],
    ) -> ServiceResult<HashSet<CommentId>> {
        let outside: Vec<CommentId> = posts
            .iter()
            .flat_map(|(list, pins)| pins.iter().filter(|p| !list.ranked.iter().any(|c| c.id == **p)))
            .copied()
            .collect();
        if outside.is_empty() {
            return Ok(HashSet::new());
        }
        let recs = self.upstream.comment_records(&outside).await?;
        Ok(outside
            .into_iter()
            .zip(recs)
            .filter(|(_, r)| r.as_ref().is_some_and(|r| as_seen_by(reader, r).is_some()))
            .map(|(id, _)| id)
            .collect())
    }

    /// The viewer's order of a ranking head (pins first) once pins, their visibility and the
    /// followees are known, and the pins the viewer may see.
    async fn order_for(
        &self,
        reader: Reader,
        list: &TopList,
        pins: Vec<CommentId>,
        outside_seen: &HashSet<CommentId>,
        followees: &HashSet<UserId>,
    ) -> ServiceResult<(Vec<CommentId>, Vec<CommentId>)> {
        // At most three pins: found among the candidates by a scan.
        let candidate = |p: &CommentId| list.ranked.iter().find(|c| c.id == *p);
        let seen = |c: &Candidate| seen_by(reader, c.author, list.post_author, c.status);
        let mut scored: Vec<(CommentId, f64)> = Vec::with_capacity(list.ranked.len());
        for c in list.ranked.iter().filter(|c| seen(c)) {
            if c.status.is_deleted() {
                // Rare: a deleted comment shown as a placeholder while it has visible replies.
                let r = self.upstream.comment_records(&[c.id]).await?.pop().flatten();
                let Some(r) = r else { continue };
                if !self.comments.placeholder_shown(reader, &r).await? {
                    continue;
                }
            }
            scored.push((c.id, viewer_score(c.base, followees.contains(&c.author))));
        }
        let pins: Vec<CommentId> =
            pins.into_iter().filter(|p| candidate(p).map_or(outside_seen.contains(p), seen)).collect();
        Ok((order_top(&pins, &scored), pins))
    }

    /// A page of top comments for the viewer (see the module documentation for paging).
    pub async fn list_top(
        &self,
        reader: Reader,
        post: PostId,
        cursor: Option<TopCursor>,
        limit: usize,
    ) -> ServiceResult<TopPage> {
        let meta = self.upstream.require_post(post).await?;
        let (pins, followees) = tokio::join!(self.review.pins(post), self.upstream.followees(reader.user));
        let (pins, followees) = (pins?, followees?);
        let (after, bound, mut version) = match cursor {
            Some(c) => (Some((c.score, c.id)), c.bound, c.version),
            None => (None, first_id_at(now_ms() + 1), None),
        };
        let mut recs: Vec<CommentRecord> = Vec::with_capacity(limit);
        if after.is_none() {
            // The first page leads with the pins the viewer may see, in pin order.
            if self.shared.stores.ranks.ranked(post, None, 1).await?.is_empty() {
                self.comments.indexer.backfill(post).await?;
            }
            // Read after any backfill, so the walk's moment includes what it indexed.
            version = Some(self.shared.stores.ranks.rank_version(post).await?);
            for r in self.upstream.comment_records(&pins).await?.into_iter().flatten() {
                if let Some(seen) = as_seen_by(reader, &r)
                    && (!seen.status.is_deleted() || self.comments.placeholder_shown(reader, &seen).await?)
                    && recs.len() < limit.min(likewise_core::comment::rank::MAX_PINS)
                {
                    recs.push(seen);
                }
            }
        }
        let want = limit - recs.len();
        let (walked, more) = if want == 0 {
            // A page of pins only: the next one starts at the top of the walk.
            (Vec::new(), true)
        } else {
            let walk = Walk { reader, post, post_author: meta.author, after, bound, version };
            self.walk(&walk, &pins, &followees, want).await?
        };
        let next = match (more, walked.last()) {
            (true, Some((score, r))) => Some(TopCursor { score: *score, id: r.id, bound, version }),
            (true, None) => Some(TopCursor { score: f64::INFINITY, id: CommentId(u64::MAX), bound, version }),
            (false, _) => None,
        };
        recs.extend(walked.into_iter().map(|(_, r)| r));
        let mut items = self.comments.decorate(reader, recs).await?;
        Self::mark_pins(&pins, &mut items);
        Ok(TopPage { items, next })
    }

    /// Up to `want` comments of the viewer's order strictly below `after`, with their viewer
    /// scores, and whether more may follow.
    async fn walk(
        &self,
        w: &Walk,
        pins: &[CommentId],
        followees: &HashSet<UserId>,
        want: usize,
    ) -> ServiceResult<(Vec<(f64, CommentRecord)>, bool)> {
        let Walk { reader, post, post_author, after, bound, version } = *w;
        let ranks = &self.shared.stores.ranks;
        let mut found: Vec<(f64, CommentRecord)> = Vec::new();
        // Unlisted entries (held, hidden) this viewer may see: their own, or all of them for
        // the post's author and moderators. Few, and all read at once.
        let everyone = reader.moderator || reader.user == post_author;
        let by = (!everyone).then_some(reader.user);
        let held = match version {
            Some(v) => ranks.held_ranks_at(post, v, by, MAX_WALK).await?,
            None => ranks.held_ranks(post, by, MAX_WALK).await?,
        };
        self.take_seen(reader, &held, after, bound, pins, followees, &mut found).await?;
        // No entry further down the index can beat the page's last one by more than this.
        let reach = if followees.is_empty() { 0.0 } else { FOLLOW_BOOST.log10() };
        let chunk = (want * 2).clamp(32, 500);
        // The index keyset starts at the cursor: entries above it are above it for the viewer
        // too (a boost only raises).
        let mut index_after = after;
        let mut read = 0usize;
        let exhausted = loop {
            let entries = match version {
                Some(v) => ranks.ranked_at(post, v, index_after, chunk).await?,
                None => ranks.ranked(post, index_after, chunk).await?,
            };
            read += entries.len();
            let end = entries.len() < chunk;
            let Some(last) = entries.last() else { break true };
            index_after = Some((last.score, last.comment));
            let next_max = last.score + reach;
            self.take_seen(reader, &entries, after, bound, pins, followees, &mut found).await?;
            found.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.id.cmp(&a.1.id)));
            if end {
                break true;
            }
            if found.len() >= want && found[want.saturating_sub(1)].0 > next_max || read >= MAX_WALK {
                break false;
            }
        };
        found.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.id.cmp(&a.1.id)));
        let more = !exhausted || found.len() > want;
        found.truncate(want);
        Ok((found, more && want > 0))
    }

    /// Of `entries`, those the viewer may see and that belong on a page after `after`: pushed
    /// to `found` with their viewer scores.
    #[allow(clippy::too_many_arguments)]
    async fn take_seen(
        &self,
        reader: Reader,
        entries: &[RankEntry],
        after: Option<(f64, CommentId)>,
        bound: u64,
        pins: &[CommentId],
        followees: &HashSet<UserId>,
        found: &mut Vec<(f64, CommentRecord)>,
    ) -> ServiceResult<()> {
        let wanted: Vec<&RankEntry> =
            entries.iter().filter(|e| e.comment.0 < bound && !pins.contains(&e.comment)).collect();
        if wanted.is_empty() {
            return Ok(());
        }
        let ids: Vec<CommentId> = wanted.iter().map(|e| e.comment).collect();
        let recs = self.upstream.comment_records(&ids).await?;
        for (e, r) in wanted.into_iter().zip(recs) {
            let Some(seen) = r.as_ref().and_then(|r| as_seen_by(reader, r)) else { continue };
            if seen.status.is_deleted() && !self.comments.placeholder_shown(reader, &seen).await? {
                continue;
            }
            let score = viewer_score(e.score, followees.contains(&seen.author));
            if after.is_some_and(|c| !below(score, seen.id, c)) {
                continue; // above the cursor (boosted past it): an earlier page had it
            }
            found.push((score, seen));
        }
        Ok(())
    }

    /// Set `pinned` on views of pinned comments.
    fn mark_pins(pins: &[CommentId], items: &mut [CommentView]) {
        for v in items.iter_mut() {
            v.pinned = pins.contains(&v.record.id);
        }
    }

    /// The viewer's own held top-level comments on `posts` (held, hidden or restricted: they
    /// see them as ordinary comments), as preview candidates by post. The store's by-author
    /// index answers a viewer with none in one lookup; the others' records come through the
    /// record cache. The record decides: an entry an aggregator batch has not caught up with
    /// yet (a comment approved or deleted a moment ago) is left out.
    pub async fn own_held(
        &self,
        viewer: UserId,
        posts: &[PostId],
    ) -> ServiceResult<HashMap<PostId, Vec<Candidate>>> {
        let entries = self.shared.stores.ranks.held_by_author(viewer, posts, OWN_HELD).await?;
        let mut out: HashMap<PostId, Vec<Candidate>> = HashMap::new();
        if entries.is_empty() {
            return Ok(out);
        }
        let ids: Vec<CommentId> = entries.iter().map(|e| e.comment).collect();
        let recs = self.upstream.comment_records(&ids).await?;
        let reader = Reader { user: viewer, moderator: false };
        for (e, r) in entries.iter().zip(recs) {
            let Some(r) = r else { continue };
            let held = r.parent.is_none() && !r.status.counts_as_visible() && !r.status.is_deleted();
            if held && r.post == e.post && as_seen_by(reader, &r).is_some() {
                out.entry(e.post).or_default().push(Candidate {
                    id: r.id,
                    author: r.author,
                    base: e.score,
                    status: r.status,
                });
            }
        }
        Ok(out)
    }

    /// The top two comments of each post for the viewer (feed previews). Only the best ten
    /// ranked candidates, the viewer's own held comments (`own`, from [`Ranking::own_held`]:
    /// ranked by their scores as if listed) and the pins are considered, to keep a feed page
    /// cheap. `own_replies` are the viewer's held replies on the posts (in the `reply_count`s
    /// they see). `posts` pairs each post with the count the viewer sees: posts at 0 are skipped.
    ///
    /// Batched over the whole page: one read of every post's pins, one record read of the
    /// pins outside the candidates, one of the previews, and one decoration (counts, the
    /// viewer's likes, names) for all of them. Rankings come from the cache; a post whose
    /// ranking is not cached costs its computation (the ranker keeps read posts cached).
    pub async fn previews(
        &self,
        reader: Reader,
        posts: &[(PostId, i64)],
        own: &HashMap<PostId, Vec<Candidate>>,
        own_replies: &OwnReplies,
    ) -> ServiceResult<Vec<Vec<CommentView>>> {
        let with: Vec<PostId> = posts.iter().filter(|(_, n)| *n > 0).map(|(p, _)| *p).collect();
        let mut out: Vec<Vec<CommentView>> = vec![Vec::new(); posts.len()];
        if with.is_empty() {
            return Ok(out);
        }
        let lists = futures::future::try_join_all(with.iter().map(|p| self.top_list(*p))).await?;
        let shorts: Vec<TopList> = lists
            .iter()
            .zip(&with)
            .map(|(list, post)| {
                let mut ranked: Vec<Candidate> = list.ranked.iter().take(10).copied().collect();
                if let Some(mine) = own.get(post) {
                    let new: Vec<Candidate> =
                        mine.iter().filter(|c| !ranked.iter().any(|r| r.id == c.id)).copied().collect();
                    ranked.extend(new);
                    ranked.sort_by(|a, b| b.base.total_cmp(&a.base).then(b.id.cmp(&a.id)));
                }
                TopList { post_author: list.post_author, ranked }
            })
            .collect();
        let (pins, followees) =
            tokio::join!(self.shared.stores.moderation.pins_of(&with), self.upstream.followees(reader.user));
        let (pins, followees) = (pins?, followees?);
        let pairs: Vec<(&TopList, &Vec<CommentId>)> = shorts.iter().zip(&pins).collect();
        let outside_seen = self.pins_seen_outside(reader, &pairs).await?;
        let mut chosen: Vec<(PostId, Vec<CommentId>, Vec<CommentId>)> = Vec::with_capacity(with.len());
        for ((post, short), pins) in with.iter().zip(&shorts).zip(pins) {
            let (order, pins) = self.order_for(reader, short, pins, &outside_seen, &followees).await?;
            chosen.push((*post, order.into_iter().take(2).collect(), pins));
        }
        let ids: Vec<CommentId> = chosen.iter().flat_map(|(_, ids, _)| ids.iter().copied()).collect();
        let recs: Vec<_> = self
            .upstream
            .comment_records(&ids)
            .await?
            .into_iter()
            .flatten()
            .filter_map(|r| as_seen_by(reader, &r))
            .collect();
        let mut views: HashMap<CommentId, CommentView> = self
            .comments
            .decorate_with(reader, recs, Some(own_replies))
            .await?
            .into_iter()
            .map(|v| (v.record.id, v))
            .collect();
        let mut previews: HashMap<PostId, Vec<CommentView>> = HashMap::with_capacity(chosen.len());
        for (post, ids, pins) in chosen {
            let mut list: Vec<CommentView> = ids.iter().filter_map(|id| views.remove(id)).collect();
            Self::mark_pins(&pins, &mut list);
            previews.insert(post, list);
        }
        for (slot, (post, _)) in out.iter_mut().zip(posts) {
            if let Some(list) = previews.remove(post) {
                *slot = list;
            }
        }
        Ok(out)
    }
}
