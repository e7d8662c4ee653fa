//! A sharded map whose entries expire after a TTL, with a size cap. Used for upstream data
//! (post metadata, usernames, follows, settings) that changes rarely and is pushed through
//! this process, which also updates the cache on every push.

use super::{SHARDS, shard_of};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// A TTL map. `get` returns only fresh entries.
pub struct TtlMap<K, V> {
    name: &'static str,
    counters: super::LookupCounters,
    ttl: Duration,
    per_shard: usize,
    hasher: RandomState,
    shards: Vec<Mutex<HashMap<K, (V, Instant)>>>,
}

impl<K: Hash + Eq + Clone, V: Clone> TtlMap<K, V> {
    /// A map named `name` (for metrics) holding about `capacity` entries for `ttl` each.
    pub fn new(name: &'static str, ttl: Duration, capacity: usize) -> Self {
        TtlMap {
            name,
            counters: super::LookupCounters::new(name),
            ttl,
            per_shard: capacity.div_ceil(SHARDS).max(1),
            hasher: RandomState::new(),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }

    /// The fresh value for `key`, if any.
    pub fn get(&self, key: &K) -> Option<V> {
        let shard = self.shards[shard_of(&self.hasher, key)].lock();
        let hit = shard.get(key).filter(|(_, at)| at.elapsed() < self.ttl).map(|(v, _)| v.clone());
        if hit.is_some() {
            self.counters.hit.increment(1)
        } else {
            self.counters.miss.increment(1)
        }
        hit
    }

    /// Insert or replace.
    pub fn put(&self, key: K, value: V) {
        let mut shard = self.shards[shard_of(&self.hasher, &key)].lock();
        if shard.len() >= self.per_shard && !shard.contains_key(&key) {
            // Drop expired entries first; if still full, drop an arbitrary one (hash order is
            // effectively random, which approximates random eviction).
            let ttl = self.ttl;
            shard.retain(|_, (_, at)| at.elapsed() < ttl);
            if shard.len() >= self.per_shard {
                super::evict_some(&mut shard);
            }
        }
        shard.insert(key, (value, Instant::now()));
    }

    /// Name, entries, capacity and estimated bytes, for `/metrics`.
    pub fn usage(&self) -> super::Usage
    where
        V: super::Weigh,
    {
        super::sharded_usage(self.name, &self.shards, self.per_shard, |(v, _)| v.heap_bytes())
    }

    /// Forget `key`.
    pub fn remove(&self, key: &K) {
        self.shards[shard_of(&self.hasher, key)].lock().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn entries_expire_after_their_ttl() {
        let m = TtlMap::new("t", Duration::from_millis(0), 10);
        m.put(1, "a");
        assert_eq!(m.get(&1), None);
        let m = TtlMap::new("t", Duration::from_secs(60), 10);
        m.put(1, "a");
        assert_eq!(m.get(&1), Some("a"));
        m.remove(&1);
        assert_eq!(m.get(&1), None);
    }

    #[test]
    fn usage_counts_entries_and_their_heap_bytes() {
        // Room for several entries per shard: with one per shard, the two keys below would
        // share a shard (and evict each other) once in 64 runs.
        let m: TtlMap<u64, Option<Arc<str>>> = TtlMap::new("t", Duration::from_secs(60), 8 * SHARDS);
        let empty = m.usage();
        assert_eq!((empty.cache, empty.entries, empty.capacity), ("t", 0, 8 * SHARDS));
        m.put(1, Some("a name of twenty-four b".into()));
        m.put(2, None);
        let u = m.usage();
        assert_eq!(u.entries, 2);
        assert!(u.bytes >= 16 + 23 + 2 * std::mem::size_of::<(u64, (Option<Arc<str>>, Instant))>(), "{u:?}");
    }

    #[test]
    fn size_stays_bounded() {
        let m = TtlMap::new("t", Duration::from_secs(60), 64);
        for i in 0..10_000 {
            m.put(i, i);
        }
        let total: usize = m.shards.iter().map(|s| s.lock().len()).sum();
        assert!(total <= 64, "{total}");
    }
}
