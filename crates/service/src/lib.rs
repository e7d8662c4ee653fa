//! The application layer between HTTP and storage.
//!
//! - [`Engagement`]: the facade the HTTP layer and the workers hold.
//! - [`likes`]: like/unlike through the group-commit write path, with read-your-writes.
//! - [`posts`]: feed hydration: a page of [`posts::PostView`]s from caches and one batched
//!   lookup per concern.
//! - [`comments`]: comments and replies with shadow visibility, comment likes.
//! - [`moderation`]: the synchronous layers (blocks, rate limits, hidden words, restrict,
//!   classifier, near-duplicates) deciding a new comment's status.
//! - [`review`]: reports, the review queue, approvals, pins.
//! - [`ranking`]: top comments: precomputed top-K per post, re-ranked per viewer.
//! - [`views`]: unique viewers per post (HyperLogLog) and the author's insights.
//! - [`notifications`]: inboxes and the live feed for SSE.
//! - [`upstream`]: users, posts, follows and settings pushed by their owners.
//! - [`cache`]: the read-path caches (counts with single-flight, per-viewer liked sets with
//!   Bloom filters, upstream data with TTLs).
//! - [`cluster`]: keeping several API nodes' caches in step (invalidations, live pushes).
//! - [`error`]: [`ServiceError`], classified by kind.

pub mod cache;
pub mod cluster;
pub mod comments;
pub mod error;
pub mod likes;
pub mod moderation;
pub mod notifications;
pub mod posts;
pub mod ranking;
pub mod rate;
pub mod review;
pub mod upstream;
pub mod views;

pub use error::{ServiceError, ServiceResult};

use cache::counts::CountCache;
use cache::ttl::TtlMap;
use cache::viewer_likes::ViewerLikes;
use likewise_core::ids::{PostId, UserId};
use likewise_core::model::{PostMeta, ViewerSettings};
use likewise_store::Stores;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Read-path tuning.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// How long a cached count is served before a background refresh (single-flight) reloads
    /// it. The in-process aggregator also writes new values straight into the cache.
    pub count_refresh: Duration,
    /// Most targets with cached counts.
    pub count_capacity: usize,
    /// TTL of cached upstream data (posts, users, follows, settings).
    pub meta_ttl: Duration,
    /// Most entries per upstream cache.
    pub meta_capacity: usize,
    /// Most viewers with a cached liked set.
    pub viewer_capacity: usize,
    /// A viewer with more likes than this gets no Bloom filter (lookups go to storage).
    pub bloom_max_items: usize,
    /// How many recent likers of a post are kept for "liked by".
    pub recent_likers: usize,
    /// Most followees considered when putting followed likers first.
    pub max_followees: usize,
    /// Moderation tuning.
    pub moderation: moderation::ModerationOptions,
    /// Keep viewers' liked sets in process (recent writes + Bloom filters). Only right when
    /// this process sees every like write: off on scaled-out API nodes, where the shared
    /// cache (Redis) answers instead.
    pub local_viewer_cache: bool,
}

impl Default for ServiceOptions {
    fn default() -> Self {
        ServiceOptions {
            count_refresh: Duration::from_secs(5),
            count_capacity: 200_000,
            meta_ttl: Duration::from_secs(30),
            meta_capacity: 200_000,
            viewer_capacity: 100_000,
            bloom_max_items: 100_000,
            recent_likers: 32,
            max_followees: 5_000,
            moderation: moderation::ModerationOptions::default(),
            local_viewer_cache: true,
        }
    }
}

/// The engagement service: storage ports plus read-path caches.
pub struct Engagement {
    stores: Stores,
    opts: ServiceOptions,
    counts: Arc<CountCache>,
    viewer_likes: Arc<ViewerLikes>,
    posts: TtlMap<PostId, Option<PostMeta>>,
    usernames: TtlMap<UserId, Option<Arc<str>>>,
    settings: TtlMap<UserId, ViewerSettings>,
    followees: TtlMap<UserId, Arc<HashSet<UserId>>>,
    moderation: moderation::Moderation,
    top: ranking::TopCache,
    records: cache::records::RecordCache,
    views: views::Views,
    live: notifications::LiveFeed,
    broadcast: std::sync::OnceLock<Arc<dyn cluster::Broadcast>>,
    remote_events: Arc<cluster::LocalLog>,
}

impl Engagement {
    /// Build the service over opened stores.
    pub fn new(stores: Stores, opts: ServiceOptions) -> Arc<Self> {
        let counts = CountCache::new(
            stores.counters.clone(),
            stores.likes.clone(),
            opts.count_refresh,
            opts.count_capacity,
            opts.recent_likers,
        );
        Arc::new(Engagement {
            viewer_likes: Arc::new(ViewerLikes::new(
                stores.likes.clone(),
                opts.viewer_capacity,
                opts.bloom_max_items,
                opts.local_viewer_cache,
            )),
            posts: TtlMap::new("posts", opts.meta_ttl, opts.meta_capacity),
            usernames: TtlMap::new("users", opts.meta_ttl, opts.meta_capacity),
            settings: TtlMap::new("settings", opts.meta_ttl, opts.meta_capacity),
            followees: TtlMap::new("followees", opts.meta_ttl, opts.meta_capacity / 10 + 1),
            moderation: moderation::Moderation::new(
                opts.moderation.clone(),
                opts.meta_ttl,
                opts.meta_capacity,
            ),
            top: ranking::TopCache::new(opts.count_capacity / 10 + 1),
            records: cache::records::RecordCache::new(opts.meta_capacity / 4 + 1, opts.meta_ttl),
            views: views::Views::default(),
            live: notifications::LiveFeed::default(),
            broadcast: std::sync::OnceLock::new(),
            remote_events: Arc::default(),
            counts,
            stores,
            opts,
        })
    }

    /// The storage ports (workers read the log and counters through them).
    pub fn stores(&self) -> &Stores {
        &self.stores
    }

    /// The count cache (the aggregator writes new values into it).
    pub fn counts(&self) -> &Arc<CountCache> {
        &self.counts
    }

    /// The top-comments cache (the ranker worker refreshes it).
    pub fn top(&self) -> &ranking::TopCache {
        &self.top
    }

    /// Whether the viewer's liked-set Bloom filter has been built (tests, diagnostics).
    pub fn viewer_filter_ready(&self, viewer: UserId) -> bool {
        self.viewer_likes.filter_ready(viewer)
    }

    /// Size of every in-process cache (`likewise_cache_entries`, `_capacity` and `_bytes`,
    /// by `cache`): each is bounded by its capacity; the gauges let an operator (and the soak)
    /// see them fill. Walks every entry: call it per scrape, not per request.
    pub fn cache_usage(&self) -> Vec<cache::Usage> {
        let mut out = vec![
            self.counts.usage(),
            self.viewer_likes.usage(),
            self.views.usage(),
            self.posts.usage(),
            self.usernames.usage(),
            self.settings.usage(),
            self.followees.usage(),
            self.moderation.blocks.usage(),
            self.moderation.restricts.usage(),
            self.moderation.hidden.usage(),
            self.records.usage(),
        ];
        out.extend(self.top.usage());
        out
    }

    /// Liveness of the storage, for `/healthz`.
    pub async fn ping(&self) -> ServiceResult<()> {
        Ok(self.stores.meta.ping().await?)
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
