//! Per-user rate limits in fixed memory: a GCRA (the "leaky bucket as a meter") whose state,
//! one 64-bit word per user, lives in a set-associative table of atomics.
//!
//! Why not `governor`'s keyed limiter, which we used before: a viral post is liked by a new
//! user every few microseconds, so the limiter inserts a key per like. `governor` keeps one
//! map entry per user in a sharded hash map that grows until a sweep drops the idle users
//! and shrinks it again: a lock, a probe that misses the cache, and a rehash now and then,
//! 6% of the CPU of the in-process hot-post benchmark (`docs/benchmarks.md`, "What we tried").
//! Here a check is one hash, one cache line (a bucket of 8 words) and one compare-and-swap,
//! and memory never grows: idle users are simply overwritten.
//!
//! What the fixed size gives up, and why it is safe:
//! - A user whose state is lost is treated as new (allowed). An entry is only overwritten by
//!   choice of the bucket's entry closest to expiry, and an entry that has expired carries no
//!   state (a user whose theoretical arrival time has passed is indistinguishable from a new
//!   one). A user hammering the limit holds an entry far in the future, so only a bucket
//!   full of such users can lose one; `likewise_rate_limit_evictions_total` counts live
//!   entries overwritten.
//! - Two users share state only when both their bucket and their 24-bit tag collide (one in
//!   16 million lookups within a bucket's few live entries).
//! - A user's first two actions racing on two threads may both insert an entry; the second
//!   is never found again and expires, so that user gets at most one extra action.
//!
//! Times are milliseconds since the table was made, in 40 bits (34 years).

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Entries per bucket: one 64-byte cache line.
const WAYS: usize = 8;
const TAT_BITS: u32 = 40;
const TAT_MASK: u64 = (1 << TAT_BITS) - 1;

#[repr(align(64))]
struct Bucket([AtomicU64; WAYS]);

/// A per-user GCRA limiter: `burst` actions at once, then one per `interval`.
pub struct RateTable {
    buckets: Box<[Bucket]>,
    mask: usize,
    hasher: foldhash::fast::RandomState,
    /// Emission interval (ms per action at the sustained rate).
    interval_ms: u64,
    /// How far ahead of now the theoretical arrival time may run: (burst - 1) intervals.
    tau_ms: u64,
    started: Instant,
    metric: &'static str,
    /// `likewise_rate_limit_evictions_total{limit}`, registered at the first eviction: with
    /// a table smaller than a viral post's likers a second, that is nearly every check, and a
    /// registry lookup each time is what the service's other hot-path metrics avoid.
    evictions: std::sync::OnceLock<metrics::Counter>,
}

impl RateTable {
    /// A limiter allowing `per_minute` actions a minute after a burst of `burst`, holding at
    /// least `users` entries (rounded up to a power of two, in buckets of 8). The interval has
    /// millisecond resolution: rates above 60,000 a minute count as 60,000. `metric` names
    /// the limiter in `likewise_rate_limit_evictions_total`.
    pub fn new(per_minute: u32, burst: u32, users: usize, metric: &'static str) -> Self {
        let interval_ms = (60_000 / u64::from(per_minute.max(1))).max(1);
        let buckets = users.div_ceil(WAYS).next_power_of_two().max(1);
        RateTable {
            buckets: (0..buckets).map(|_| Bucket(Default::default())).collect(),
            mask: buckets - 1,
            hasher: Default::default(),
            interval_ms,
            tau_ms: interval_ms.saturating_mul(u64::from(burst.max(1) - 1)),
            started: Instant::now(),
            metric,
            evictions: std::sync::OnceLock::new(),
        }
    }

    /// Entries the table holds.
    pub fn capacity(&self) -> usize {
        self.buckets.len() * WAYS
    }

    /// Count one action of `key` now; `Err(wait)` when it is over its allowance, with the
    /// time until the next action is allowed.
    pub fn check(&self, key: u64) -> Result<(), Duration> {
        let now = self.started.elapsed().as_millis() as u64;
        self.check_at(key, now).map_err(Duration::from_millis)
    }

    /// [`RateTable::check`] at `now_ms` (ms since the table was made); `Err` holds the wait in
    /// ms. Tests drive the clock.
    pub fn check_at(&self, key: u64, now_ms: u64) -> Result<(), u64> {
        let now = now_ms & TAT_MASK;
        let h = self.hasher.hash_one(key);
        // The bucket from the high bits, the tag from the low ones: independent bits.
        let bucket = &self.buckets[(h >> 32) as usize & self.mask].0;
        let tag = h & ((1 << (64 - TAT_BITS)) - 1);
        loop {
            let mut words = [0u64; WAYS];
            let mut mine = None;
            // Otherwise the entry closest to expiry (an empty word has TAT 0, expired).
            let mut victim = 0;
            for (i, slot) in bucket.iter().enumerate() {
                words[i] = slot.load(Ordering::Acquire);
                if words[i] >> TAT_BITS == tag && words[i] & TAT_MASK != 0 {
                    mine = Some(i);
                    break;
                }
                if words[i] & TAT_MASK < words[victim] & TAT_MASK {
                    victim = i;
                }
            }
            let (i, tat) = match mine {
                Some(i) => (i, words[i] & TAT_MASK),
                // A user without an entry starts fresh.
                None => (victim, 0),
            };
            let tat = tat.max(now);
            if tat - now > self.tau_ms {
                return Err(tat - now - self.tau_ms);
            }
            let next = (tag << TAT_BITS) | ((tat + self.interval_ms) & TAT_MASK);
            if bucket[i].compare_exchange(words[i], next, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                if mine.is_none() && words[i] & TAT_MASK > now {
                    self.evictions
                        .get_or_init(|| {
                            metrics::counter!("likewise_rate_limit_evictions_total", "limit" => self.metric)
                        })
                        .increment(1);
                }
                return Ok(());
            }
            // Another action changed the slot between the load and the swap: look again.
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allows_the_burst_then_one_per_interval_per_user() {
        // 600 a minute: one per 100 ms, after a burst of 3.
        let t = RateTable::new(600, 3, 1024, "test");
        for n in 0..3 {
            assert_eq!(t.check_at(1, 1_000), Ok(()), "action {n} of the burst");
        }
        assert_eq!(t.check_at(1, 1_000), Err(100), "the burst is spent");
        assert_eq!(t.check_at(2, 1_000), Ok(()), "another user has their own allowance");
        assert_eq!(t.check_at(1, 1_099), Err(1));
        assert_eq!(t.check_at(1, 1_100), Ok(()), "one interval later, one more");
        assert_eq!(t.check_at(1, 1_100), Err(100));
        // Idle long enough, the whole burst is back.
        for n in 0..3 {
            assert_eq!(t.check_at(1, 5_000), Ok(()), "action {n} of the refilled burst");
        }
        assert!(t.check_at(1, 5_000).is_err());
    }

    #[test]
    fn memory_is_fixed_and_a_storm_of_new_users_keeps_the_limited_ones() {
        // One a minute after a burst of 5.
        let t = RateTable::new(1, 5, 4096, "test");
        assert_eq!(t.capacity(), 4096);
        // Ten users spend their burst (each now held far in the future).
        for u in 0..10 {
            for _ in 0..5 {
                assert_eq!(t.check_at(u, 0), Ok(()));
            }
            assert!(t.check_at(u, 0).is_err());
        }
        // A storm of a million one-time users, 100 per ms for 10 s: every entry stays live a
        // minute, so the table is full of live entries, far more than it holds.
        for n in 0..1_000_000u64 {
            assert_eq!(t.check_at(1_000 + n, n / 100), Ok(()), "a new user is always allowed");
        }
        // Each eviction took the entry closest to expiry (a storm user, live until at most
        // 70 s), never a user held back (live until 300 s): they are still limited.
        for u in 0..10 {
            assert!(t.check_at(u, 10_000).is_err(), "user {u} lost their state");
        }
    }

    #[test]
    fn concurrent_actions_of_one_user_are_counted_once_each() {
        let t = std::sync::Arc::new(RateTable::new(1, 1_000, 1024, "test"));
        // Settle the user's entry first (the first-insert race is documented above).
        assert_eq!(t.check_at(7, 0), Ok(()));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let t = t.clone();
                std::thread::spawn(move || (0..1_000).filter(|_| t.check_at(7, 0).is_ok()).count())
            })
            .collect();
        let allowed: usize = threads.into_iter().map(|h| h.join().expect("thread")).sum();
        assert_eq!(allowed, 999, "the burst is 1,000 actions, one was taken before");
    }
}
