//! Read-path caches. None of them is invalidated per like: counts are refreshed on a timer and
//! written by the aggregator; a viewer's own writes update their liked set synchronously.
//!
//! - [`counts`]: counts and recent likers per target, single-flight loads, stale-while-refresh.
//! - [`viewer_likes`]: per-viewer recent likes and Bloom filter for "has the viewer liked?".
//! - [`ttl`]: a small sharded TTL map for upstream data.
//! - [`records`]: comment records by ID for previews and top pages, forgotten on change.

pub mod counts;
pub mod records;
pub mod ttl;
pub mod viewer_likes;

use std::hash::{BuildHasher, Hash};

/// Number of lock shards in each cache: enough to keep two cores from contending.
pub(crate) const SHARDS: usize = 64;

/// `likewise_cache_lookups_total{cache, result}` handles of one cache, registered once:
/// looking a labelled metric up on every call cost more than many of the lookups it measures
/// (the in-process like path got 20-50% faster when these were hoisted).
pub(crate) struct LookupCounters {
    pub(crate) hit: metrics::Counter,
    pub(crate) stale: metrics::Counter,
    pub(crate) miss: metrics::Counter,
}

impl LookupCounters {
    pub(crate) fn new(cache: &'static str) -> Self {
        LookupCounters {
            hit: metrics::counter!("likewise_cache_lookups_total", "cache" => cache, "result" => "hit"),
            stale: metrics::counter!("likewise_cache_lookups_total", "cache" => cache, "result" => "stale"),
            miss: metrics::counter!("likewise_cache_lookups_total", "cache" => cache, "result" => "miss"),
        }
    }
}

/// Pick a shard for a key.
pub(crate) fn shard_of<K: Hash>(hasher: &std::collections::hash_map::RandomState, key: &K) -> usize {
    (hasher.hash_one(key) as usize) % SHARDS
}

/// Make room in a full shard by dropping about an eighth of its entries (at least one), in
/// hash order (effectively random). One pass per n/8 inserts: O(1) amortised, unlike removing
/// "the first key" on every insert, which rescans the table's empty buckets each time.
pub(crate) fn evict_some<K: Hash + Eq + Clone, V>(shard: &mut std::collections::HashMap<K, V>) {
    let n = (shard.len() / 8).max(1);
    let victims: Vec<K> = shard.keys().take(n).cloned().collect();
    for k in victims {
        shard.remove(&k);
    }
}
