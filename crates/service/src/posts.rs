//! Feed hydration: a page of posts for one viewer, in one pass.
//!
//! Per page: post metadata (cache, one batched read for misses), counts and recent likers
//! (count cache, single-flight), "viewer liked?" (viewer cache + Bloom filter, one batched
//! lookup for the rest), the viewer's settings and followees (cached), and the viewer's own
//! held comments and replies (one lookup of a by-author index each; more only for a viewer
//! who has some on the page's posts) - all concurrently. No per-post storage round trip, no
//! COUNT(*).
//!
//! The viewer's own held comments count for them on top of the shared counter. An approval
//! or a hold of one of them moves it across that line before the counter follows: the
//! moves the counter has not taken in yet, read with the count after the held comments,
//! decide for those comments (`likewise_core::comment::uncounted`), so their author never
//! sees the count move because of them.

use crate::comments::{Comments, OwnReplies};
use crate::ranking::{Candidate, Ranking};
use crate::shared::Shared;
use crate::upstream::Upstream;
use crate::{ServiceError, ServiceResult};
use likewise_core::comment::uncounted::Move;
use likewise_core::counter::COUNTERS_CONSUMER;
use likewise_core::display::count_text;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::like::Target;
use likewise_core::model::{CommentsPolicy, PostMeta};
use likewise_core::ports::HeldMark;
use likewise_core::visibility::like_count_visible;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// How many likers `liked_by` names.
pub const LIKED_BY: usize = 3;

/// A post as one viewer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostView {
    /// The post.
    pub post_id: PostId,
    /// Its author.
    pub author_id: UserId,
    /// Like count; `None` when hidden from this viewer.
    pub like_count: Option<i64>,
    /// Rounded like count text; `None` when hidden.
    pub like_count_text: Option<String>,
    /// Visible comments, and the viewer's own held ones (they see them as ordinary).
    pub comment_count: i64,
    /// Has the viewer liked it (read-your-writes).
    pub viewer_has_liked: bool,
    /// Up to three likers' names, people the viewer follows first.
    pub liked_by: Vec<String>,
    /// May this viewer comment.
    pub comments_enabled: bool,
    /// The top two comments for this viewer.
    pub preview_comments: Vec<crate::comments::CommentView>,
}

/// See the module documentation.
pub struct Posts {
    shared: Arc<Shared>,
    upstream: Arc<Upstream>,
    ranking: Arc<Ranking>,
    comments: Arc<Comments>,
}

impl Posts {
    /// The feed-hydration service.
    pub fn new(
        shared: Arc<Shared>,
        upstream: Arc<Upstream>,
        ranking: Arc<Ranking>,
        comments: Arc<Comments>,
    ) -> Self {
        Posts { shared, upstream, ranking, comments }
    }

    /// Views of the posts asked for, in request order; unknown posts (and repeats) left out.
    pub async fn post_views(&self, viewer: UserId, ids: &[PostId]) -> ServiceResult<Vec<PostView>> {
        let mut seen = HashSet::with_capacity(ids.len());
        let ids: Vec<PostId> = ids.iter().copied().filter(|id| seen.insert(*id)).collect();
        let metas = self.upstream.posts_meta(&ids).await?;
        let known: Vec<(PostId, PostMeta)> =
            ids.iter().zip(metas).filter_map(|(id, m)| m.map(|m| (*id, m))).collect();
        if known.is_empty() {
            return Ok(Vec::new());
        }
        let post_ids: Vec<PostId> = known.iter().map(|(id, _)| *id).collect();
        let targets: Vec<Target> = post_ids.iter().map(|p| Target::post(p.0)).collect();

        let reader = crate::comments::Reader { user: viewer, moderator: false };
        let (counts, liked, settings, followees, (own, mut own_replies)) = tokio::join!(
            self.shared.counts.get_many(&targets),
            self.shared.viewer_likes.liked(viewer, &post_ids),
            self.upstream.viewer_settings(viewer),
            self.upstream.followees(viewer),
            self.own_held_all(reader, &post_ids),
        );
        let (counts, liked, settings, followees) = (counts?, liked?, settings?, followees?);
        // Read after the held comments: the posts' comment counts with the moves of the
        // viewer's comments they do not have yet, which decide for those comments whatever
        // their records said.
        let now = self.shared.counts.own_comment_counts(viewer, &post_ids);
        let mut own_top: HashMap<PostId, Vec<CommentId>> =
            own.iter().map(|(p, cs)| (*p, cs.iter().map(|c| c.id).collect())).collect();
        for (p, c) in post_ids.iter().zip(&now) {
            count_moves(*p, &c.moves, &mut own_top, &mut own_replies);
        }
        // Under the viewer's own held comments, the replies they see count for them too: to
        // them the thread is open. Read only when they have held comments on the page.
        let held: Vec<(PostId, CommentId)> =
            own_top.iter().flat_map(|(p, cs)| cs.iter().map(move |c| (*p, *c))).collect();
        let (threads, fresh) = tokio::join!(
            self.comments.replies_under_own_held_or_none(&held),
            self.authors_fresh_likes(viewer, &known),
        );
        own_replies.extend(threads);

        // Pick likers to name: followed ones first, then the most recent others.
        let picks: Vec<Vec<UserId>> = counts
            .iter()
            .map(|c| {
                let mut chosen: Vec<UserId> = c
                    .recent_likers
                    .iter()
                    .copied()
                    .filter(|u| followees.contains(u))
                    .take(LIKED_BY)
                    .collect();
                for u in c.recent_likers.iter() {
                    if chosen.len() >= LIKED_BY {
                        break;
                    }
                    if !chosen.contains(u) {
                        chosen.push(*u);
                    }
                }
                chosen
            })
            .collect();
        let all_users: Vec<UserId> = picks.iter().flatten().copied().collect();
        let mut names = self.upstream.usernames(&all_users).await?.into_iter();

        // The viewer's own held comments and replies, and the replies under their held
        // comments, count for them: they see them as ordinary ones.
        let own_count = |p: &PostId| {
            own_top.get(p).map_or(0, |v| v.len() as i64) + own_replies.by_post.get(p).copied().unwrap_or(0)
        };
        let with_counts: Vec<(PostId, i64)> = post_ids
            .iter()
            .zip(counts.iter().zip(&now))
            .map(|(p, (c, n))| (*p, n.cached.unwrap_or(c.counts.comments).max(0) + own_count(p)))
            .collect();
        let mut previews = self.ranking.previews(reader, &with_counts, &own, &own_replies).await?.into_iter();
        let discount = self.shared.integrity.discount().await;
        let mut out = Vec::with_capacity(known.len());
        for ((((id, meta), (c, has_liked)), pick), (_, comment_count)) in
            known.iter().zip(counts.iter().zip(liked)).zip(&picks).zip(&with_counts)
        {
            let visible =
                like_count_visible(viewer, meta.author, meta.hide_like_count, settings.hide_like_counts);
            let likes = discount.apply(Target::post(id.0), fresh.get(id).copied().unwrap_or(c.counts.likes));
            let comments_enabled = match meta.comments {
                CommentsPolicy::Everyone => true,
                CommentsPolicy::Off => false,
                CommentsPolicy::Followers => viewer == meta.author || followees.contains(&meta.author),
            };
            out.push(PostView {
                post_id: *id,
                author_id: meta.author,
                like_count: visible.then_some(likes),
                like_count_text: visible.then(|| count_text(likes)),
                comment_count: *comment_count,
                viewer_has_liked: has_liked,
                liked_by: pick.iter().filter_map(|_| names.next()).collect(),
                comments_enabled,
                preview_comments: previews.next().unwrap_or_default(),
            });
        }
        Ok(out)
    }

    /// The viewer's own held comments and held replies on `posts`. Where a shared cache
    /// keeps held marks ([`likewise_core::ports::HeldMarks`]), a viewer known to have nothing held costs no store
    /// read; one not known costs one lookup of whether they have anything held anywhere,
    /// whose answer is kept for every node until something of theirs changes.
    async fn own_held_all(
        &self,
        reader: crate::comments::Reader,
        posts: &[PostId],
    ) -> (HashMap<PostId, Vec<Candidate>>, crate::comments::OwnReplies) {
        let viewer = reader.user;
        if let Some(marks) = &self.shared.stores.held_marks {
            let version = match marks.get(viewer).await {
                Ok(HeldMark::Nothing) => {
                    held_mark_answer(0).increment(1);
                    return Default::default();
                }
                Ok(HeldMark::Some) => None,
                Ok(HeldMark::Unknown(v)) => Some(v),
                Err(e) => {
                    tracing::debug!(error = %e, "reading a held mark failed; reading the store");
                    None
                }
            };
            if let Some(v) = version {
                let stores = &self.shared.stores;
                if let (Ok(top), Ok(replies)) = tokio::join!(
                    stores.ranks.any_held_by(viewer),
                    stores.comments.any_held_replies_by(viewer)
                ) {
                    let any = top || replies;
                    if let Err(e) = marks.set(viewer, &v, any).await {
                        tracing::debug!(error = %e, "setting a held mark failed");
                    }
                    if !any {
                        held_mark_answer(1).increment(1);
                        return Default::default();
                    }
                }
            }
            held_mark_answer(2).increment(1);
        }
        tokio::join!(self.own_held(viewer, posts), self.comments.own_held_replies_or_none(reader, posts))
    }

    /// The viewer's own held comments on `posts` ([`Ranking::own_held`]). Empty when the
    /// read fails: then the viewer sees the counts and previews everyone sees.
    async fn own_held(&self, viewer: UserId, posts: &[PostId]) -> HashMap<PostId, Vec<Candidate>> {
        crate::comments::or_everyones(
            self.ranking.own_held(viewer, posts).await,
            "the viewer's held comments",
        )
    }

    /// The like counts of the viewer's own posts among `known`, including likes the
    /// aggregator has not counted yet (docs/architecture.md, "The read path": the author's view is refreshed more
    /// aggressively than everyone else's cached one). Empty when the viewer wrote none of
    /// them, or when the read fails (then the author sees the cached count, as everyone).
    async fn authors_fresh_likes(
        &self,
        viewer: UserId,
        known: &[(PostId, PostMeta)],
    ) -> HashMap<PostId, i64> {
        let own: Vec<PostId> = known.iter().filter(|(_, m)| m.author == viewer).map(|(id, _)| *id).collect();
        if own.is_empty() {
            return HashMap::new();
        }
        match self.shared.stores.counters.fresh_post_likes(COUNTERS_CONSUMER, &own).await {
            Ok(likes) => own.into_iter().zip(likes).collect(),
            Err(e) => {
                tracing::warn!(error = %e, "fresh like counts for the author failed; serving the cached ones");
                metrics::counter!("likewise_fresh_counts_failed_total").increment(1);
                HashMap::new()
            }
        }
    }

    /// One post as the viewer sees it.
    pub async fn post_view(&self, viewer: UserId, id: PostId) -> ServiceResult<PostView> {
        self.post_views(viewer, &[id]).await?.pop().ok_or(ServiceError::NotFound("post"))
    }
}

/// Count the viewer's comments on `post` that have moves as the moves say (`on_top`: the
/// counter leaves them out, see [`likewise_core::comment::uncounted::Uncounted::own_view`]),
/// whatever their records said: a top-level one among their held comments `top` (the
/// visible replies under it then count for them too), a reply among their held replies
/// `replies`.
fn count_moves(
    post: PostId,
    moves: &[(Move, bool)],
    top: &mut HashMap<PostId, Vec<CommentId>>,
    replies: &mut OwnReplies,
) {
    for (m, on_top) in moves {
        match m.parent {
            None => {
                let list = top.entry(post).or_default();
                let has = list.contains(&m.comment);
                if *on_top && !has {
                    list.push(m.comment);
                } else if !on_top && has {
                    list.retain(|c| *c != m.comment);
                }
            }
            Some(parent) => {
                if *on_top && replies.held.insert(m.comment) {
                    replies.add(post, parent, 1);
                } else if !on_top && replies.held.remove(&m.comment) {
                    replies.add(post, parent, -1);
                }
            }
        }
    }
}

/// `likewise_held_marks_total{answer}`: feed pages whose viewer's held comments were skipped
/// on a mark (`nothing`), skipped after looking once (`looked_nothing`), or read (`read`).
fn held_mark_answer(i: usize) -> &'static metrics::Counter {
    static C: std::sync::OnceLock<[metrics::Counter; 3]> = std::sync::OnceLock::new();
    &C.get_or_init(|| {
        ["nothing", "looked_nothing", "read"]
            .map(|a| metrics::counter!("likewise_held_marks_total", "answer" => a))
    })[i]
}
