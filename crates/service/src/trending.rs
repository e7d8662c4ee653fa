//! `GET /v1/trending`: the rankings the trending consumer (`likewise_workers::trending`)
//! saves in its snapshot, read by every API node (cached for a second), with unregistered
//! posts left out and like counts hidden from the viewers a post's like count is hidden from
//! everywhere else (the rankings are shared; hiding is decided per viewer when they are read).

use crate::ServiceResult;
use crate::shared::Shared;
use crate::upstream::Upstream;
use likewise_core::ids::{PostId, UserId};
use likewise_core::trending::{Window, decode_ranking};
use likewise_core::visibility::like_count_visible;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Snapshot name (and consumer offset name) of the trending consumer.
pub const TRENDING: &str = "trending";

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

/// Trending posts.
pub struct Trending {
    shared: Arc<Shared>,
    upstream: Arc<Upstream>,
    cached: Mutex<Option<(Instant, Arc<Vec<u8>>)>>,
}

impl Trending {
    /// The trending reader.
    pub fn new(shared: Arc<Shared>, upstream: Arc<Upstream>) -> Self {
        Trending { shared, upstream, cached: Mutex::new(None) }
    }

    /// The best `limit` posts of `window`, best first, as `viewer` sees them.
    pub async fn top(
        &self,
        viewer: UserId,
        window: Window,
        limit: usize,
    ) -> ServiceResult<Vec<TrendingPost>> {
        let body = self.snapshot().await?;
        let Some((_, ranked)) = decode_ranking(&body, window) else {
            return Ok(Vec::new());
        };
        let settings = self.upstream.viewer_settings(viewer).await?;
        // Unregistered posts never appear: look them up a page at a time until `limit` remain.
        let mut out = Vec::with_capacity(limit);
        for chunk in ranked.chunks(limit.max(1) * 2) {
            let ids: Vec<PostId> = chunk.iter().map(|r| PostId(r.post)).collect();
            let metas = self.upstream.posts_meta(&ids).await?;
            out.extend(chunk.iter().zip(metas).filter_map(|(r, m)| {
                let m = m?;
                let visible =
                    like_count_visible(viewer, m.author, m.hide_like_count, settings.hide_like_counts);
                Some(TrendingPost {
                    post: PostId(r.post),
                    likes: visible.then_some(r.likes),
                    comments: r.comments,
                    score: r.score,
                })
            }));
            if out.len() >= limit {
                break;
            }
        }
        out.truncate(limit);
        Ok(out)
    }

    /// The consumer's snapshot, read again once it is older than [`FRESH_FOR`].
    async fn snapshot(&self) -> ServiceResult<Arc<Vec<u8>>> {
        let fresh =
            self.cached.lock().as_ref().filter(|(at, _)| at.elapsed() < FRESH_FOR).map(|(_, b)| b.clone());
        if let Some(b) = fresh {
            return Ok(b);
        }
        let b = Arc::new(
            self.shared.stores.snapshots.load_snapshot(TRENDING).await?.map(|(_, b)| b).unwrap_or_default(),
        );
        *self.cached.lock() = Some((Instant::now(), b.clone()));
        Ok(b)
    }
}
