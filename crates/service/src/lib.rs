//! The application layer between HTTP and storage.
//!
//! One service per question, composed in [`Engagement`] over one set of stores:
//!
//! - [`likes`]: like/unlike of posts and comments through the group-commit write path, with
//!   read-your-writes; likers lists.
//! - [`posts`]: feed hydration: a page of [`posts::PostView`]s from caches and one batched
//!   lookup per concern.
//! - [`comments`]: comments and replies with shadow visibility.
//! - [`moderation`]: the synchronous layers (blocks, rate limits, hidden words, restrict,
//!   classifier, near-duplicates) deciding a new comment's status.
//! - [`review`]: reports, the review queue, approvals, pins.
//! - [`ranking`]: top comments: precomputed top-K per post, re-ranked per viewer.
//! - [`views`]: unique viewers per post (HyperLogLog) and the author's insights.
//! - [`trending`]: the trending consumer's rankings.
//! - [`integrity`]: flags of like farms and bot rings, verdicts, discounted like counts.
//! - [`notifications`]: inboxes and the live feed for SSE.
//! - [`upstream`]: users, posts, follows and settings pushed by their owners.
//! - [`shared`]: what they share: the stores, the caches several of them read, the bus.
//! - [`cache`]: the read-path caches (counts with single-flight, per-viewer liked sets with
//!   Bloom filters, comment records, ranking heads, the integrity snapshot, upstream data
//!   with TTLs).
//! - [`rate`]: fixed-memory per-user rate limits.
//! - [`ports`]: the small traits the background workers are handed, one per worker.
//! - [`options`]: [`ServiceOptions`], the services' tuning.
//! - [`cluster`]: keeping several API nodes' caches in step (invalidations, live pushes).
//! - [`error`]: [`ServiceError`], classified by kind.

pub mod analytics;
pub mod cache;
pub mod cluster;
pub mod comments;
pub mod error;
pub mod integrity;
pub mod likes;
pub mod moderation;
pub mod notifications;
pub mod options;
pub mod ports;
pub mod posts;
pub mod rank_index;
pub mod ranking;
pub mod rate;
pub mod review;
pub mod shared;
pub mod trending;
pub mod upstream;
pub mod views;

pub use error::{ServiceError, ServiceResult};
pub use options::ServiceOptions;

use comments::Comments;
use likes::Likes;
use likewise_core::ports::cluster::{Broadcast, Invalidation};
use likewise_engine::Stores;
use moderation::Moderation;
use notifications::Notifications;
use posts::Posts;
use ranking::Ranking;
use review::Review;
use shared::Shared;
use std::sync::Arc;
use std::time::Duration;
use upstream::Upstream;
use views::Views;

/// The services of one process, composed over one set of stores. Each field answers one
/// question; the HTTP layer and the workers call the one they need.
pub struct Engagement {
    /// Stores, shared caches and the bus to other nodes.
    pub shared: Arc<Shared>,
    /// Posts, users, follows and settings pushed by their owners (cached reads).
    pub upstream: Arc<Upstream>,
    /// The synchronous moderation layers: rate limits, blocks, restricts, hidden words,
    /// classifier, near-duplicates.
    pub moderation: Arc<Moderation>,
    /// Likes of posts and comments, and likers lists.
    pub likes: Likes,
    /// Comments: writes, pages, replies.
    pub comments: Arc<Comments>,
    /// Reports, the review queue, decisions, approvals, pins.
    pub review: Arc<Review>,
    /// Top comments.
    pub ranking: Arc<Ranking>,
    /// Feed hydration.
    pub posts: Posts,
    /// Unique viewers and insights.
    pub views: Views,
    /// Inboxes and live notifications.
    pub notifications: Notifications,
    /// Trending posts (ranked by the trending consumer).
    pub trending: trending::Trending,
    /// Integrity flags and verdicts.
    pub integrity: integrity::Integrity,
    /// The last `/healthz` answer and when it was taken ([`Engagement::health_cached`]).
    health_cache: tokio::sync::Mutex<Option<(std::time::Instant, Health)>>,
}

/// Each dependency's name and whether it answered.
pub type Health = Vec<(&'static str, bool)>;

/// How long `/healthz` reuses its engine checks: load balancers poll it from every
/// instance every few seconds, and each check is a round trip to every engine.
pub const HEALTH_CACHE: Duration = Duration::from_secs(1);

impl Engagement {
    /// Compose the services over opened stores.
    pub fn new(stores: Stores, opts: ServiceOptions) -> Arc<Self> {
        let shared = Arc::new(Shared::new(stores, opts));
        let upstream = Arc::new(Upstream::new(shared.clone()));
        let moderation = Arc::new(Moderation::new(shared.clone()));
        let indexer = Arc::new(rank_index::RankIndexer::new(shared.clone(), upstream.clone()));
        let comments = Arc::new(Comments::new(shared.clone(), upstream.clone(), moderation.clone(), indexer));
        let review =
            Arc::new(Review::new(shared.clone(), upstream.clone(), moderation.clone(), comments.clone()));
        let ranking =
            Arc::new(Ranking::new(shared.clone(), upstream.clone(), comments.clone(), review.clone()));
        Arc::new(Engagement {
            likes: Likes::new(shared.clone(), upstream.clone(), moderation.clone()),
            posts: Posts::new(shared.clone(), upstream.clone(), ranking.clone(), comments.clone()),
            views: Views::new(shared.clone(), upstream.clone()),
            notifications: Notifications::new(shared.clone(), upstream.clone()),
            trending: trending::Trending::new(shared.clone(), upstream.clone()),
            integrity: integrity::Integrity::new(shared.clone()),
            health_cache: tokio::sync::Mutex::new(None),
            shared,
            upstream,
            moderation,
            comments,
            review,
            ranking,
        })
    }

    /// The storage ports (workers read the log and counters through them).
    pub fn stores(&self) -> &Stores {
        &self.shared.stores
    }

    /// The ranking-relevant events of committed counts (this node's aggregator's and, on an
    /// API node, other nodes'), as the log this node's ranker reads.
    pub fn ranking_events(&self) -> Arc<cluster::LocalLog> {
        self.shared.remote_events()
    }

    /// Join a deployment: announce changes through `b` from now on.
    pub fn set_broadcast(&self, b: Arc<dyn Broadcast>) {
        self.shared.set_broadcast(b);
    }

    /// Another node changed something: drop the local entry, whichever service caches it.
    pub fn apply_invalidation(&self, inv: Invalidation) {
        metrics::counter!("likewise_cluster_invalidations_total").increment(1);
        self.upstream.invalidate(inv);
        self.moderation.invalidate(inv);
        self.shared.invalidate(inv);
    }

    /// Size of every in-process cache (`likewise_cache_entries`, `_capacity` and `_bytes`,
    /// by `cache`): each is bounded by its capacity; the gauges let an operator (and the soak)
    /// see them fill. Walks every entry: call it per scrape, not per request.
    pub fn cache_usage(&self) -> Vec<cache::Usage> {
        let mut out = self.shared.cache_usage();
        out.push(self.views.usage());
        out.extend(self.upstream.cache_usage());
        out.extend(self.moderation.cache_usage());
        out
    }

    /// Liveness of the storage, for `/healthz`.
    pub async fn ping(&self) -> ServiceResult<()> {
        Ok(self.shared.stores.meta.ping().await?)
    }

    /// [`Engagement::health`], reused for `max_age` (`/healthz`: [`HEALTH_CACHE`]): callers
    /// within it share one round of checks, and concurrent callers of an expired answer wait
    /// for the one check taking its place rather than each checking. `/metrics` checks live.
    pub async fn health_cached(&self, within: std::time::Duration, max_age: std::time::Duration) -> Health {
        let mut cached = self.health_cache.lock().await;
        if let Some((at, checks)) = cached.as_ref()
            && at.elapsed() < max_age
        {
            return checks.clone();
        }
        let checks = self.health(within).await;
        *cached = Some((std::time::Instant::now(), checks.clone()));
        checks
    }

    /// `/healthz`: whether each dependency answers within `within`, by name: `storage`
    /// first, then the shared cache and the event stream when the deployment has them. The
    /// probes run at once, so the answer takes at most `within`. Each answer is also the
    /// gauge `likewise_dependency_up{dependency}` (1 or 0), which the alerting rules read.
    pub async fn health(&self, within: std::time::Duration) -> Vec<(&'static str, bool)> {
        let bounded = |f: futures::future::BoxFuture<'static, bool>| async move {
            tokio::time::timeout(within, f).await.unwrap_or(false)
        };
        let meta = self.shared.stores.meta.clone();
        let mut checks: Vec<(&'static str, futures::future::BoxFuture<'static, bool>)> =
            vec![("storage", Box::pin(async move { meta.ping().await.is_ok() }))];
        for p in &self.shared.stores.probes {
            let p = p.clone();
            checks.push((p.name(), Box::pin(async move { p.probe().await.is_ok() })));
        }
        let (names, probes): (Vec<_>, Vec<_>) = checks.into_iter().unzip();
        let results = futures::future::join_all(probes.into_iter().map(bounded)).await;
        for (name, ok) in names.iter().zip(&results) {
            metrics::gauge!("likewise_dependency_up", "dependency" => *name).set(if *ok { 1.0 } else { 0.0 });
        }
        names.into_iter().zip(results).collect()
    }
}

/// Milliseconds since the Unix epoch: the write path's clock, re-exported for the service's
/// callers.
pub use likewise_engine::now_ms;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A dependency that counts its checks.
    struct Counted(Arc<AtomicU64>);

    #[async_trait::async_trait]
    impl likewise_engine::Probe for Counted {
        fn name(&self) -> &'static str {
            "cache"
        }
        async fn probe(&self) -> likewise_core::StoreResult<()> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    /// `/healthz` checks the engines at most once per `max_age`, however often it is polled
    /// (also by many callers at once); `/metrics`' checks stay live.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn health_checks_are_reused_for_their_max_age() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut stores = likewise_store::testing::open_small(dir.path());
        let probes = Arc::new(AtomicU64::new(0));
        stores.probes = vec![Arc::new(Counted(probes.clone()))];
        let svc = Engagement::new(stores, ServiceOptions::default());
        let within = Duration::from_secs(1);
        let max_age = Duration::from_millis(300);
        let polls = (0..50).map(|_| svc.health_cached(within, max_age));
        for checks in futures::future::join_all(polls).await {
            assert_eq!(checks, [("storage", true), ("cache", true)]);
        }
        assert_eq!(probes.load(Ordering::SeqCst), 1, "fifty polls, one check");
        tokio::time::sleep(max_age).await;
        svc.health_cached(within, max_age).await;
        svc.health_cached(within, max_age).await;
        assert_eq!(probes.load(Ordering::SeqCst), 2, "checked again once the answer is old");
        svc.health(within).await;
        svc.health(within).await;
        assert_eq!(probes.load(Ordering::SeqCst), 4, "live checks are not cached");
        svc.stores().close().expect("close");
    }
}
