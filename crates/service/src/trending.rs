//! `GET /v1/trending`: the rankings the trending consumer (`likewise_workers::trending`)
//! saves in its snapshots, read by every API node (cached for a second), with unregistered
//! posts left out and like counts hidden from the viewers a post's like count is hidden from
//! everywhere else (the rankings are shared; hiding is decided per viewer when they are read),
//! and such posts placed by a coarse bucket of their score ([`bucket_floor`]), so that their
//! place gives away no more than the bucket.
//!
//! The rankings are those of the post partitions' snapshots (`trending.p0` ..
//! `trending.p63`, a scaled-out worker role's), merged (`likewise_core::trending::merge`);
//! a partition with no snapshot of its own contributes its posts of the whole-log snapshot
//! (`trending`: the single node's, or that of a deployment from before partitions).

use crate::ServiceResult;
use crate::shared::Shared;
use crate::upstream::Upstream;
use likewise_core::ids::{PostId, UserId};
use likewise_core::ports::cluster::{PARTITIONS, part_consumer, part_of_post};
use likewise_core::trending::{RANKED, Ranked, Window, decode_ranking, merge};
use likewise_core::visibility::like_count_visible;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Snapshot name (and consumer offset name) of the trending consumer.
pub const TRENDING: &str = "trending";

/// The snapshot (and offset, and fence) name of trending's partition `part` (`trending.p7`).
pub fn part_name(part: u16) -> String {
    part_consumer(TRENDING, part)
}

/// Both windows' merged rankings.
#[derive(Debug, Default)]
struct Rankings {
    hour: Vec<Ranked>,
    day: Vec<Ranked>,
}

impl Rankings {
    /// Merged from the whole-log snapshot `whole` and the partitions' `parts` (by partition).
    fn merged(whole: Option<&[u8]>, parts: &[Option<Vec<u8>>]) -> Rankings {
        let mut out = Rankings::default();
        for (w, into) in [(Window::Hour, &mut out.hour), (Window::Day, &mut out.day)] {
            let whole = whole.and_then(|b| decode_ranking(b, w)).map(|(_, r)| r).unwrap_or_default();
            let own: Vec<bool> = parts.iter().map(|p| p.is_some()).collect();
            let mut lists: Vec<Vec<Ranked>> =
                parts.iter().flatten().filter_map(|b| decode_ranking(b, w)).map(|(_, r)| r).collect();
            lists.push(
                whole
                    .into_iter()
                    .filter(|r| !own.get(part_of_post(r.post) as usize).copied().unwrap_or(false))
                    .collect(),
            );
            *into = merge(lists, RANKED);
        }
        out
    }
}

/// How long a node serves the snapshot it read before reading it again.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// One trending post as one viewer sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrendingPost {
    /// The post.
    pub post: PostId,
    /// Net likes in the window; `None` when the post's like count is hidden from this viewer
    /// (as `PostView::like_count`).
    pub likes: Option<u64>,
    /// Net visible comments in the window.
    pub comments: u64,
    /// The weighted score.
    pub score: f64,
}

/// Where a post whose like count is hidden from the viewer is placed in their list: at the
/// power of two at or below its score (`2^floor(log2 score)`), below every post shown with a
/// score in that bucket and above those below it; hidden posts of one bucket by post ID.
///
/// The score weighs the likes, and a list ordered by exact scores would bound a hidden count
/// between its neighbours' shown ones (with 11 and 13 likes around it, and its comments
/// shown, 12). Placed by its bucket, a hidden post's position says only that its score lies
/// in `[2^k, 2^(k+1))`, wherever in it: moving its score within the bucket moves nothing.
/// For a viewer whose `hide_like_counts` setting hides every count but those of their own
/// posts, every other post is placed so: their list is ordered by buckets, then post IDs.
fn bucket_floor(score: f64) -> f64 {
    if score > 0.0 { score.log2().floor().exp2() } else { 0.0 }
}

/// A post and where the viewer's list places it.
struct Placed {
    /// Its score, or [`bucket_floor`] of it where the viewer is not shown its like count.
    at: f64,
    item: TrendingPost,
}

impl Placed {
    /// Higher places first; at one place, posts shown with their score before hidden ones,
    /// then the lower post ID.
    fn order(a: &Placed, b: &Placed) -> std::cmp::Ordering {
        b.at.total_cmp(&a.at)
            .then(a.item.likes.is_none().cmp(&b.item.likes.is_none()))
            .then(a.item.post.cmp(&b.item.post))
    }
}

/// Trending posts.
pub struct Trending {
    shared: Arc<Shared>,
    upstream: Arc<Upstream>,
    cached: Mutex<Option<(Instant, Arc<Rankings>)>>,
}

impl Trending {
    /// The trending reader.
    pub fn new(shared: Arc<Shared>, upstream: Arc<Upstream>) -> Self {
        Trending { shared, upstream, cached: Mutex::new(None) }
    }

    /// The best `limit` posts of `window`, best first, as `viewer` sees them: posts whose like
    /// count is hidden from the viewer placed by [`bucket_floor`].
    pub async fn top(
        &self,
        viewer: UserId,
        window: Window,
        limit: usize,
    ) -> ServiceResult<Vec<TrendingPost>> {
        let rankings = self.rankings().await?;
        let ranked = if window == Window::Hour { &rankings.hour } else { &rankings.day };
        let settings = self.upstream.viewer_settings(viewer).await?;
        // Unregistered posts never appear: look them up a page at a time. A post whose count
        // is hidden from the viewer only moves down (its place is below its score), so once
        // `limit` posts are found, the rest of the ranking matters only while its scores can
        // still reach the `limit`-th place.
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut out: Vec<Placed> = Vec::with_capacity(limit);
        for chunk in ranked.chunks(limit * 2) {
            let ids: Vec<PostId> = chunk.iter().map(|r| PostId(r.post)).collect();
            let metas = self.upstream.posts_meta(&ids).await?;
            out.extend(chunk.iter().zip(metas).filter_map(|(r, m)| {
                let m = m?;
                let visible =
                    like_count_visible(viewer, m.author, m.hide_like_count, settings.hide_like_counts);
                Some(Placed {
                    at: if visible { r.score } else { bucket_floor(r.score) },
                    item: TrendingPost {
                        post: PostId(r.post),
                        likes: visible.then_some(r.likes),
                        comments: r.comments,
                        score: r.score,
                    },
                })
            }));
            if out.len() >= limit {
                out.sort_by(Placed::order);
                let last = chunk.last().map_or(0.0, |r| r.score);
                if last < out[limit - 1].at {
                    break;
                }
            }
        }
        out.sort_by(Placed::order);
        out.truncate(limit);
        Ok(out.into_iter().map(|p| p.item).collect())
    }

    /// The merged rankings of the consumer's snapshots, read again once older than
    /// [`FRESH_FOR`].
    async fn rankings(&self) -> ServiceResult<Arc<Rankings>> {
        let fresh =
            self.cached.lock().as_ref().filter(|(at, _)| at.elapsed() < FRESH_FOR).map(|(_, b)| b.clone());
        if let Some(b) = fresh {
            return Ok(b);
        }
        let snapshots = &self.shared.stores.snapshots;
        let names: Vec<String> = (0..PARTITIONS as u16).map(part_name).collect();
        let parts: Vec<Option<Vec<u8>>> =
            snapshots.load_snapshots(&names).await?.into_iter().map(|s| s.map(|(_, b)| b)).collect();
        // The whole-log snapshot only while some partition has none of its own.
        let whole = if parts.iter().any(Option::is_none) {
            snapshots.load_snapshot(TRENDING).await?.map(|(_, b)| b)
        } else {
            None
        };
        let r = Arc::new(Rankings::merged(whole.as_deref(), &parts));
        *self.cached.lock() = Some((Instant::now(), r.clone()));
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placed(post: u64, score: f64, hidden: bool) -> Placed {
        let at = if hidden { bucket_floor(score) } else { score };
        let item = TrendingPost { post: PostId(post), likes: (!hidden).then_some(1), comments: 0, score };
        Placed { at, item }
    }

    fn order(mut v: Vec<Placed>) -> Vec<u64> {
        v.sort_by(Placed::order);
        v.into_iter().map(|p| p.item.post.0).collect()
    }

    /// Partitions with snapshots of their own are read from them; the others from the
    /// whole-log snapshot (a deployment moving over to partitions).
    #[test]
    fn partitions_without_their_own_snapshot_come_from_the_whole_one() {
        use likewise_core::event::Event;
        use likewise_core::like::Target;
        let now = 1_000 * 60_000;
        let like = |post: u64, n: u64| {
            (0..n).map(move |i| Event::like(0, true, Target::post(post), UserId(i), UserId(0), now, post))
        };
        let mut whole = likewise_core::trending::Trending::default();
        // Posts 1 and 2 (partitions 1, 2) in the old whole-log snapshot.
        like(1, 3).chain(like(2, 5)).for_each(|e| whole.apply(&e));
        // Partition 2 moved over, and saw post 66 (partition 2) and more likes of post 2.
        let mut p2 = whole.clone();
        p2.retain_part(2);
        like(66, 4).chain(like(2, 1)).for_each(|e| p2.apply(&e));
        let mut parts = vec![None; PARTITIONS as usize];
        parts[2] = Some(p2.encode(now));
        let r = Rankings::merged(Some(&whole.encode(now)), &parts);
        let got: Vec<(u64, u64)> = r.hour.iter().map(|r| (r.post, r.likes)).collect();
        assert_eq!(got, [(2, 6), (66, 4), (1, 3)]);
    }

    #[test]
    fn a_hidden_posts_place_depends_on_its_bucket_only() {
        assert_eq!([0.75, 1.0, 1.5, 12.0, 16.0, 31.9].map(bucket_floor), [0.5, 1.0, 1.0, 8.0, 16.0, 16.0]);
        let shown = [(1, 6.0), (2, 7.5), (3, 8.0), (4, 9.0), (5, 11.0), (6, 13.0), (7, 16.5)];
        let with = |hidden: f64| {
            let mut v: Vec<Placed> = shown.iter().map(|(p, s)| placed(*p, *s, false)).collect();
            v.push(placed(9, hidden, true));
            order(v)
        };
        // Anywhere in [8, 16): after every shown post from 8 up, before those below.
        let want = vec![7, 6, 5, 4, 3, 9, 2, 1];
        for s in [8.0, 9.5, 12.0, 13.5, 15.999] {
            assert_eq!(with(s), want, "score {s}");
        }
        assert_eq!(with(16.0), vec![7, 9, 6, 5, 4, 3, 2, 1]);
        // Hidden posts of one bucket: by post ID, whatever their scores.
        let v = vec![placed(3, 9.0, true), placed(1, 15.0, true), placed(2, 8.5, true)];
        assert_eq!(order(v), vec![1, 2, 3]);
    }
}
