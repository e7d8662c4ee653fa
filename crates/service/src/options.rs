//! The services' tuning ([`ServiceOptions`], with moderation's [`ModerationOptions`]): plain
//! values the configuration fills in and every service reads.

use std::time::Duration;

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
    pub moderation: ModerationOptions,
    /// Keep viewers' liked sets in process (recent writes + Bloom filters). Only right when
    /// this process sees every like write: off on scaled-out API nodes, where the shared
    /// cache (Redis) answers instead.
    pub local_viewer_cache: bool,
    /// New likers per minute on one notification item past which its live pushes stop (the
    /// inbox item still updates); 0: no limit.
    pub live_push_max_likes_per_minute: u64,
    /// Leave confirmed accounts' likes out of displayed like counts
    /// (`integrity.discount_flagged`).
    pub discount_flagged: bool,
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
            moderation: ModerationOptions::default(),
            local_viewer_cache: true,
            live_push_max_likes_per_minute: 1_000,
            discount_flagged: false,
        }
    }
}

/// Moderation tuning.
#[derive(Debug, Clone)]
pub struct ModerationOptions {
    /// Sustained likes and unlikes (posts and comments) per minute per user; 0 turns the
    /// like limit off.
    pub likes_per_minute: u32,
    /// Likes a user may make in a quick burst before the rate applies.
    pub like_burst: u32,
    /// Sustained comments per minute per user.
    pub comments_per_minute: u32,
    /// Comments a user may post in a quick burst before the rate applies.
    pub comment_burst: u32,
    /// Distinct reporters that auto-hide a comment pending review.
    pub report_threshold: u32,
    /// Near-duplicate copies by one user within `duplicate_window` that are let through;
    /// the next one is held back.
    pub duplicate_copies: usize,
    /// How far back near-duplicates count.
    pub duplicate_window: Duration,
}

impl Default for ModerationOptions {
    fn default() -> Self {
        ModerationOptions {
            likes_per_minute: 120,
            like_burst: 300,
            comments_per_minute: 20,
            comment_burst: 20,
            report_threshold: 5,
            duplicate_copies: 4,
            duplicate_window: Duration::from_secs(86_400),
        }
    }
}
