//! Read-path caches. None of them is invalidated per like: counts are refreshed on a timer and
//! written by the aggregator; a viewer's own writes update their liked set synchronously.
//!
//! - [`counts`]: counts and recent likers per target, single-flight loads, stale-while-refresh.
//! - [`viewer_likes`]: per-viewer recent likes and Bloom filter for "has the viewer liked?".
//! - [`ttl`]: a small sharded TTL map for upstream data.
//! - [`records`]: comment records by ID for previews and top pages, forgotten on change.
//! - [`top`]: the heads of posts' rankings (feed previews), refreshed by the ranker.
//! - [`snapshot`]: the integrity consumer's snapshot (discounts of displayed like counts).

pub mod counts;
pub mod records;
pub mod snapshot;
pub mod top;
pub mod ttl;
pub mod viewer_likes;

use std::hash::{BuildHasher, Hash};

/// Estimated memory of cached values, for `likewise_cache_bytes{cache}`: heap bytes a value
/// owns beyond its inline size. An estimate (allocator overhead and sharing are ignored), good
/// enough to tell a cache filling toward its cap from a leak.
pub trait Weigh {
    /// Heap bytes owned by the value.
    fn heap_bytes(&self) -> usize {
        0
    }
}

impl Weigh for bool {}
impl Weigh for likewise_core::model::PostMeta {}
impl Weigh for likewise_core::model::ViewerSettings {}

impl<T: Weigh> Weigh for Option<T> {
    fn heap_bytes(&self) -> usize {
        self.as_ref().map_or(0, T::heap_bytes)
    }
}

/// Reference count header of an `Arc` allocation.
const ARC_HEADER: usize = 16;

impl Weigh for std::sync::Arc<str> {
    fn heap_bytes(&self) -> usize {
        ARC_HEADER + self.len()
    }
}

impl<T: Weigh> Weigh for std::sync::Arc<T> {
    fn heap_bytes(&self) -> usize {
        ARC_HEADER + std::mem::size_of::<T>() + T::heap_bytes(self)
    }
}

impl<T> Weigh for Vec<T> {
    fn heap_bytes(&self) -> usize {
        self.capacity() * std::mem::size_of::<T>()
    }
}

impl<T, S> Weigh for std::collections::HashSet<T, S> {
    fn heap_bytes(&self) -> usize {
        // hashbrown: one control byte per bucket, buckets = capacity * 8 / 7.
        self.capacity() * 8 / 7 * (std::mem::size_of::<T>() + 1)
    }
}

impl Weigh for likewise_core::comment::hidden_words::HiddenWords {
    fn heap_bytes(&self) -> usize {
        likewise_core::comment::hidden_words::HiddenWords::heap_bytes(self)
    }
}

impl Weigh for likewise_core::comment::record::CommentRecord {
    fn heap_bytes(&self) -> usize {
        self.text.capacity()
    }
}

/// One cache's size, for `/metrics` (`likewise_cache_entries`, `_capacity`, `_bytes`).
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    /// The cache's name.
    pub cache: &'static str,
    /// Entries held.
    pub entries: usize,
    /// Most entries it holds.
    pub capacity: usize,
    /// Estimated bytes.
    pub bytes: usize,
}

/// Bytes of a hash map's table holding `len` entries of `entry` bytes each.
pub fn table_bytes(len: usize, entry: usize) -> usize {
    len * 8 / 7 * (entry + 1)
}

/// Walk a sharded cache for [`Usage`]: entries, and bytes of the tables plus what `heap`
/// says each value owns.
pub(crate) fn sharded_usage<K, V>(
    cache: &'static str,
    shards: &[parking_lot::Mutex<std::collections::HashMap<K, V>>],
    per_shard: usize,
    heap: impl Fn(&V) -> usize,
) -> Usage {
    let entry = std::mem::size_of::<(K, V)>();
    let (mut entries, mut bytes) = (0, 0);
    for s in shards {
        let s = s.lock();
        entries += s.len();
        bytes += table_bytes(s.capacity(), entry) + s.values().map(&heap).sum::<usize>();
    }
    Usage { cache, entries, capacity: per_shard * shards.len(), bytes }
}

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
