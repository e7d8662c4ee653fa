//! `GET /v1/trending`: the rankings the trending consumer (`likewise_workers::trending`)
//! saves in its snapshot, read by every API node (cached for a second), with unregistered
//! posts left out.

use crate::ServiceResult;
use crate::shared::Shared;
use crate::upstream::Upstream;
use likewise_core::ids::PostId;
use likewise_core::trending::{Ranked, Window, decode_ranking};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Snapshot name (and consumer offset name) of the trending consumer.
pub const TRENDING: &str = "trending";

/// How long a node serves the snapshot it read before reading it again.
const FRESH_FOR: Duration = Duration::from_secs(1);

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

    /// The best `limit` posts of `window`, best first.
    pub async fn top(&self, window: Window, limit: usize) -> ServiceResult<Vec<Ranked>> {
        let fresh =
            self.cached.lock().as_ref().filter(|(at, _)| at.elapsed() < FRESH_FOR).map(|(_, b)| b.clone());
        let body = match fresh {
            Some(b) => b,
            None => {
                let b = Arc::new(
                    self.shared
                        .stores
                        .snapshots
                        .load_snapshot(TRENDING)
                        .await?
                        .map(|(_, b)| b)
                        .unwrap_or_default(),
                );
                *self.cached.lock() = Some((Instant::now(), b.clone()));
                b
            }
        };
        let Some((_, ranked)) = decode_ranking(&body, window) else {
            return Ok(Vec::new());
        };
        // Unregistered posts never appear: look them up a page at a time until `limit` remain.
        let mut out = Vec::with_capacity(limit);
        for chunk in ranked.chunks(limit.max(1) * 2) {
            let ids: Vec<PostId> = chunk.iter().map(|r| PostId(r.post)).collect();
            let metas = self.upstream.posts_meta(&ids).await?;
            out.extend(chunk.iter().zip(metas).filter(|(_, m)| m.is_some()).map(|(r, _)| *r));
            if out.len() >= limit {
                break;
            }
        }
        out.truncate(limit);
        Ok(out)
    }
}
