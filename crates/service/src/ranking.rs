//! Top comments (design 9.2): a precomputed top-K per post, re-ranked per viewer at read time.
//!
//! The base ranking of a post's newest `TOP_K` top-level comments (score: engagement with
//! time decay, the post author's likes and replies, verified authors, an integrity penalty;
//! see `likewise_core::comment::rank`) is kept in [`TopCache`]. The ranker worker recomputes it
//! when comment or comment-like events touch the post; a miss computes it on read. Per viewer:
//! comments the viewer may not see are dropped, authors the viewer follows are boosted, and up
//! to three pinned comments come first.
//!
//! Paging: the first page freezes the viewer's ranked list in a short-lived snapshot; the
//! cursor walks it, then continues newest-first strictly below the oldest ranked candidate,
//! skipping pinned comments, so nothing repeats. If a snapshot expired (10 minutes), the walk
//! resumes at the chronological part.

use crate::cache::ttl::TtlMap;
use crate::comments::{CommentView, Comments, Order, Reader, as_seen_by, seen_by};
use crate::review::Review;
use crate::shared::Shared;
use crate::upstream::Upstream;
use crate::{ServiceResult, now_ms};
use likewise_core::comment::id::id_timestamp_ms;
use likewise_core::comment::rank::{RankInput, base_score, order_top, viewer_score};
use likewise_core::comment::spam::{SpamSignals, spam_score};
use likewise_core::comment::status::CommentStatus;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::like::{Target, TargetKind};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How many of a post's newest top-level comments are ranked.
pub const TOP_K: usize = 200;

/// A ranked comment, with what deciding its visibility to a viewer needs: re-ranking per
/// viewer must not load every candidate's record from the store on every request (the soak
/// showed it taking 41% of the CPU once posts had many comments). The status may lag a
/// change by one ranker round elsewhere in a cluster; pages still re-read the records they
/// return and filter them, so a stale status can shorten a page but never show a comment.
#[derive(Debug, Clone, Copy)]
pub struct Candidate {
    /// The comment.
    pub id: CommentId,
    /// Its author.
    pub author: UserId,
    /// Base score (higher first).
    pub base: f64,
    /// Moderation status when ranked.
    pub status: CommentStatus,
}

impl crate::cache::Weigh for TopList {
    fn heap_bytes(&self) -> usize {
        self.ranked.capacity() * std::mem::size_of::<Candidate>()
    }
}

/// A post's base ranking.
#[derive(Debug, Clone)]
pub struct TopList {
    /// The post's author (every candidate's `post_author`).
    pub post_author: UserId,
    /// Candidates, best first.
    pub ranked: Vec<Candidate>,
    /// The oldest candidate (the chronological continuation starts below it).
    pub floor: Option<CommentId>,
    /// True when the post may have comments older than the candidates.
    pub more: bool,
}

/// Precomputed rankings and viewers' frozen snapshots.
pub struct TopCache {
    lists: TtlMap<PostId, Arc<TopList>>,
    snapshots: TtlMap<u64, Arc<Vec<CommentId>>>,
    next_snapshot: AtomicU64,
    computed: AtomicU64,
}

impl TopCache {
    /// A cache for about `capacity` posts.
    pub fn new(capacity: usize) -> Self {
        TopCache {
            lists: TtlMap::new("top_comments", Duration::from_secs(60), capacity),
            snapshots: TtlMap::new("top_snapshots", Duration::from_secs(600), capacity),
            next_snapshot: AtomicU64::new(now_ms().wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            computed: AtomicU64::new(0),
        }
    }

    /// Forget a post's ranking (pins or a ranked comment's status changed).
    pub fn invalidate(&self, post: PostId) {
        self.lists.remove(&post);
    }

    /// Is the post's ranking cached (the ranker only refreshes those)?
    pub fn is_cached(&self, post: PostId) -> bool {
        self.lists.get(&post).is_some()
    }

    /// Usage of the rankings and snapshots maps (for `/metrics`).
    pub fn usage(&self) -> [crate::cache::Usage; 2] {
        [self.lists.usage(), self.snapshots.usage()]
    }

    /// How many rankings have been computed (benchmarks, tests).
    pub fn computed(&self) -> u64 {
        self.computed.load(Ordering::Relaxed)
    }
}

/// Where a top-comments page starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopCursor {
    /// Inside a frozen ranked snapshot.
    Ranked {
        /// The snapshot.
        snapshot: u64,
        /// Position of the next item.
        pos: u32,
        /// The oldest ranked candidate.
        floor: u64,
    },
    /// In the chronological continuation, strictly below this ID.
    Chrono {
        /// Last ID scanned.
        after: u64,
    },
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

    /// Compute a post's base ranking from storage and the counters.
    pub async fn compute(&self, post: PostId) -> ServiceResult<Arc<TopList>> {
        let meta = self.upstream.require_post(post).await?;
        let recs = self.shared.stores.comments.top_level(post, true, None, TOP_K + 1).await?;
        let more = recs.len() > TOP_K;
        // Placeholders stay candidates: a deleted parent keeps its replies reachable from
        // every order while they are visible (each viewer's order checks that).
        let recs: Vec<_> = recs.into_iter().take(TOP_K).collect();
        let floor = recs.last().map(|r| r.id);
        let targets: Vec<Target> = recs.iter().map(|r| Target::comment(r.id.0)).collect();
        let ids: Vec<u64> = recs.iter().map(|r| r.id.0).collect();
        let authors: Vec<UserId> = recs.iter().map(|r| r.author).collect();
        let (counts, author_liked, profiles) = tokio::join!(
            self.shared.counts.get_many(&targets),
            self.shared.stores.likes.liked_among(meta.author, TargetKind::Comment, &ids),
            self.shared.stores.meta.users(&authors),
        );
        let (counts, author_liked, profiles) = (counts?, author_liked?, profiles?);
        let now = now_ms();
        let mut ranked = Vec::with_capacity(recs.len());
        for (((r, c), liked), profile) in recs.iter().zip(&counts).zip(author_liked).zip(profiles) {
            let replied_by_author = c.counts.replies > 0
                && self
                    .shared
                    .stores
                    .comments
                    .replies(r.id, None, 50)
                    .await?
                    .iter()
                    .any(|x| x.author == meta.author);
            let input = RankInput {
                likes: c.counts.likes,
                replies: c.counts.replies,
                age_secs: now.saturating_sub(id_timestamp_ms(r.id)) / 1000,
                liked_by_post_author: liked,
                replied_by_post_author: replied_by_author,
                by_post_author: r.author == meta.author,
                author_verified: profile.is_some_and(|p| p.verified),
                integrity: spam_score(&SpamSignals::of(&r.text), 0),
            };
            ranked.push(Candidate { id: r.id, author: r.author, base: base_score(&input), status: r.status });
        }
        ranked.sort_by(|a, b| b.base.total_cmp(&a.base).then(b.id.cmp(&a.id)));
        let list = Arc::new(TopList { post_author: meta.author, ranked, floor, more });
        self.shared.top.lists.put(post, list.clone());
        self.shared.top.computed.fetch_add(1, Ordering::Relaxed);
        Ok(list)
    }

    async fn top_list(&self, post: PostId) -> ServiceResult<Arc<TopList>> {
        match self.shared.top.lists.get(&post) {
            Some(l) => Ok(l),
            None => self.compute(post).await,
        }
    }

    /// The viewer's ordering of a post's ranked comments (pins first), without paging, and the
    /// pins the viewer may see.
    async fn viewer_order(
        &self,
        reader: Reader,
        post: PostId,
        list: &TopList,
    ) -> ServiceResult<(Vec<CommentId>, Vec<CommentId>)> {
        let pins = self.review.pins(post).await?;
        let outside_seen = self.pins_seen_outside(reader, &[(list, &pins)]).await?;
        let followees = self.upstream.followees(reader.user).await?;
        self.order_for(reader, list, pins, &outside_seen, &followees).await
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

    /// [`Ranking::viewer_order`] once pins, their visibility and the followees are known.
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

    /// A page of top comments for the viewer.
    pub async fn list_top(
        &self,
        reader: Reader,
        post: PostId,
        cursor: Option<TopCursor>,
        limit: usize,
    ) -> ServiceResult<TopPage> {
        self.upstream.require_post(post).await?;
        // The first page reads the pins while ordering; later pages read them once here.
        let (order, pins, pos, floor, snapshot) = match cursor {
            None => {
                let list = self.top_list(post).await?;
                let (order, pins) = self.viewer_order(reader, post, &list).await?;
                let order = Arc::new(order);
                let snap = self.shared.top.next_snapshot.fetch_add(1, Ordering::Relaxed);
                self.shared.top.snapshots.put(snap, order.clone());
                let floor = if list.more { list.floor.map_or(0, |f| f.0) } else { 0 };
                (Some(order), pins, 0usize, floor, snap)
            }
            Some(TopCursor::Ranked { snapshot, pos, floor }) => (
                self.shared.top.snapshots.get(&snapshot),
                self.review.pins(post).await?,
                pos as usize,
                floor,
                snapshot,
            ),
            Some(TopCursor::Chrono { after }) => return self.top_chrono(reader, post, after, limit).await,
        };
        let Some(order) = order else {
            // The snapshot expired: resume with the chronological part.
            return if floor == 0 {
                Ok(TopPage { items: Vec::new(), next: None })
            } else {
                self.top_chrono(reader, post, floor, limit).await
            };
        };
        let slice: Vec<CommentId> = order.iter().skip(pos).take(limit).copied().collect();
        let recs: Vec<_> = self
            .upstream
            .comment_records(&slice)
            .await?
            .into_iter()
            .flatten()
            .filter_map(|r| as_seen_by(reader, &r))
            .collect();
        let mut items = self.comments.decorate(reader, recs).await?;
        Self::mark_pins(&pins, &mut items);
        let end = pos + slice.len();
        let next = if end < order.len() {
            Some(TopCursor::Ranked { snapshot, pos: end as u32, floor })
        } else if floor != 0 {
            Some(TopCursor::Chrono { after: floor })
        } else {
            None
        };
        Ok(TopPage { items, next })
    }

    async fn top_chrono(
        &self,
        reader: Reader,
        post: PostId,
        after: u64,
        limit: usize,
    ) -> ServiceResult<TopPage> {
        let pins = self.review.pins(post).await?;
        let page = self.comments.list(reader, post, Order::Newest, Some(CommentId(after)), limit).await?;
        let items = page.items.into_iter().filter(|v| !pins.contains(&v.record.id)).collect();
        Ok(TopPage { items, next: page.next_after.map(|a| TopCursor::Chrono { after: a.0 }) })
    }

    /// Set `pinned` on views of pinned comments.
    fn mark_pins(pins: &[CommentId], items: &mut [CommentView]) {
        for v in items.iter_mut() {
            v.pinned = pins.contains(&v.record.id);
        }
    }

    /// The top two comments of each post for the viewer (feed previews). Only the best ten
    /// ranked candidates and the pins are considered, to keep a feed page cheap.
    ///
    /// Batched over the whole page: one read of every post's pins, one record read of the
    /// pins outside the candidates, one of the previews, and one decoration (counts, the
    /// viewer's likes, names) for all of them. Rankings come from the cache; a post whose
    /// ranking is not cached costs its computation (the ranker keeps read posts cached).
    pub async fn previews(
        &self,
        reader: Reader,
        posts: &[(PostId, i64)],
    ) -> ServiceResult<Vec<Vec<CommentView>>> {
        let with: Vec<PostId> = posts.iter().filter(|(_, n)| *n > 0).map(|(p, _)| *p).collect();
        let mut out: Vec<Vec<CommentView>> = vec![Vec::new(); posts.len()];
        if with.is_empty() {
            return Ok(out);
        }
        let lists = futures::future::try_join_all(with.iter().map(|p| self.top_list(*p))).await?;
        let shorts: Vec<TopList> = lists
            .iter()
            .map(|list| TopList {
                post_author: list.post_author,
                ranked: list.ranked.iter().take(10).copied().collect(),
                floor: list.floor,
                more: list.more,
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
        let mut views: HashMap<CommentId, CommentView> =
            self.comments.decorate(reader, recs).await?.into_iter().map(|v| (v.record.id, v)).collect();
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
