//! A Bloom filter over every `user_likes` key, in memory: "this user has certainly never
//! liked this target" without reading the store.
//!
//! Why: the write path must know whether each (user, target) row exists before it decides
//! what a like changes. Most likes are first likes, and with real (scattered) liker IDs each
//! existence read is a cache-missing descent through every memtable of `user_likes`. Skipping
//! those reads entirely measured +27-47% likes/s on the single writer thread
//! (docs/benchmarks.md, "What we tried"); a filter probe costs a few cache misses instead.
//!
//! Exactness: a "no" must never be wrong, a "maybe" just costs the read. Rows are only ever
//! created by the write path (one thread at a time, under the store's write lock), and it
//! inserts every key it writes into the filter before the batch commits. At open, a
//! background thread inserts the keys already stored (`like_filter_build.rs`); only when it has
//! finished does the filter answer "no". Any row is then either one the build read or one
//! the write path stored since, and inserted. Keys are never removed (an unlike leaves its
//! key: a "maybe" for a row that no longer exists is a read, not an error). The same answer
//! serves "has this viewer liked these posts" (`liked_among`).
//!
//! Layout: a blocked Bloom filter with one 64-bit word per key. A key's hash picks a word
//! and 4 bits in it, so a probe or an insert is one cache miss and one atomic operation, and
//! the write path's "was it there? put it there" for a like is a single `fetch_or`
//! ([`LikeFilter::check_and_insert`]). The classic layout (the fastbloom crate, used before)
//! spends a cache miss per hash, twice per like (probe, then insert): 7% of the CPU of the
//! in-process benchmark, most of it on the writer thread.
//!
//! Size: 10 bits per key for twice the keys stored at open (at least 4M keys, 5 MiB; at most
//! 256 MiB, enough for about 100M likes). With 4 bits in one word that is 0.3% false
//! positives at open and 1.8% once the store has doubled (Poisson load per word; the test
//! below measures it). A store that outgrows it sees more false positives (more reads),
//! never a wrong answer; the next open sizes it again, up to the cap.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Keys the filter is sized for, at least.
const MIN_KEYS: u64 = 4 << 20;
/// Bits per key it is sized for.
const BITS_PER_KEY: u64 = 10;
/// The most memory the filter takes (a bigger store just sees more false positives).
const MAX_BYTES: u64 = 256 << 20;

/// See the module docs.
pub(super) struct LikeFilter {
    words: Box<[AtomicU64]>,
    hasher: foldhash::fast::FixedState,
    /// Set once every key stored at open is in `words`; until then every answer is "maybe".
    ready: AtomicBool,
}

impl LikeFilter {
    /// An empty filter for a store holding about `stored` keys; not ready until built.
    pub(super) fn sized_for(stored: u64) -> Self {
        LikeFilter {
            words: (0..bits_for(stored).div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            hasher: foldhash::fast::FixedState::with_seed(0x6c_696b_6577),
            ready: AtomicBool::new(false),
        }
    }

    /// The key's word and its 4 bits: the word from the hash's high bits (multiply-shift),
    /// the bits from 24 bits of a second mix of it.
    fn slot(&self, key: &[u8; 17]) -> (&AtomicU64, u64) {
        let h = self.hasher.hash_one(key);
        let word = ((u128::from(h) * self.words.len() as u128) >> 64) as usize;
        let g = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mask = (1u64 << (g >> 58))
            | (1u64 << ((g >> 52) & 63))
            | (1u64 << ((g >> 46) & 63))
            | (1u64 << ((g >> 40) & 63));
        (&self.words[word], mask)
    }

    /// Record a key the write path is about to store.
    pub(super) fn insert(&self, key: &[u8; 17]) {
        let (word, mask) = self.slot(key);
        word.fetch_or(mask, Ordering::Relaxed);
    }

    /// False only when `key` is certainly not stored.
    pub(super) fn may_contain(&self, key: &[u8; 17]) -> bool {
        // Acquire pairs with the build's Release: its inserts are visible once `ready` is.
        if !self.ready.load(Ordering::Acquire) {
            return true;
        }
        let (word, mask) = self.slot(key);
        word.load(Ordering::Relaxed) & mask == mask
    }

    /// [`insert`](Self::insert), answering what [`may_contain`](Self::may_contain) would
    /// have answered just before: for a like, which stores the key unless it exists.
    pub(super) fn check_and_insert(&self, key: &[u8; 17]) -> bool {
        let (word, mask) = self.slot(key);
        let before = word.fetch_or(mask, Ordering::Relaxed);
        !self.ready.load(Ordering::Acquire) || before & mask == mask
    }

    /// Let the filter answer "no": every key stored at open has been inserted.
    pub(super) fn mark_ready(&self) {
        // Release pairs with the Acquire of the probes: the build's inserts are visible to them.
        self.ready.store(true, Ordering::Release);
    }

    /// Whether the build has finished.
    pub(super) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Bytes of the bit vector.
    pub(super) fn bytes(&self) -> u64 {
        self.words.len() as u64 * 8
    }
}

/// Bits of the filter for a store holding about `stored` keys (module docs).
fn bits_for(stored: u64) -> usize {
    let keys = stored.saturating_mul(2).max(MIN_KEYS);
    usize::try_from(keys.saturating_mul(BITS_PER_KEY).min(MAX_BYTES * 8)).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embedded::{EmbeddedOptions, EmbeddedStore};
    use likewise_core::ids::UserId;
    use likewise_core::like::{LikeAction, LikeOp, LikeOutcome, Target, TargetKind};
    use likewise_core::ports::WriteEngine;
    use likewise_core::write::{WriteOp, WriteOutcome};

    fn like_ops(users: std::ops::Range<u64>, action: LikeAction) -> Vec<WriteOp> {
        users
            .map(|u| {
                WriteOp::Like(LikeOp {
                    target: Target { kind: TargetKind::Post, id: 7 },
                    user: UserId(u.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 20),
                    action,
                    target_author: UserId(1),
                    post: 7,
                    ts_ms: 1_000 + u,
                    trace: None,
                })
            })
            .collect()
    }

    fn changed(out: &[WriteOutcome]) -> usize {
        out.iter().filter(|o| matches!(o, WriteOutcome::Like(LikeOutcome { changed: true, .. }))).count()
    }

    /// Writes that land while the filter is still being built from disk (chunk by chunk)
    /// must not leave it with a false "no": every like stored before, during or after the
    /// build is then found again (a re-like changes nothing), and new likes still change.
    #[test]
    fn likes_written_during_the_build_are_never_missed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = EmbeddedOptions::default();
        {
            let store = EmbeddedStore::open(dir.path(), &opts).expect("open");
            for chunk in 0..10u64 {
                let ops = like_ops(chunk * 10_000..(chunk + 1) * 10_000, LikeAction::Like);
                assert_eq!(changed(&store.apply(&ops).expect("apply")), 10_000);
            }
            store.persist().expect("persist");
        }
        let store = EmbeddedStore::open(dir.path(), &opts).expect("reopen");
        // While the build reads the 100,000 stored keys: unlike some, like new ones.
        let building = !store.inner.like_filter.is_ready();
        assert_eq!(changed(&store.apply(&like_ops(0..5_000, LikeAction::Unlike)).expect("apply")), 5_000);
        assert_eq!(
            changed(&store.apply(&like_ops(100_000..160_000, LikeAction::Like)).expect("apply")),
            60_000
        );
        assert_eq!(changed(&store.apply(&like_ops(2_000..4_000, LikeAction::Like)).expect("apply")), 2_000);
        assert!(store.wait_like_filter(std::time::Duration::from_secs(30)), "the filter was not built");
        // Every like now stored is found: re-liking them all changes nothing.
        let stored: Vec<WriteOp> = like_ops(2_000..4_000, LikeAction::Like)
            .into_iter()
            .chain(like_ops(5_000..160_000, LikeAction::Like))
            .collect();
        assert_eq!(changed(&store.apply(&stored).expect("apply")), 0);
        // Those unliked and not liked again are gone; likes of new users still count.
        assert_eq!(changed(&store.apply(&like_ops(0..2_000, LikeAction::Like)).expect("apply")), 2_000);
        assert_eq!(
            changed(&store.apply(&like_ops(160_000..170_000, LikeAction::Like)).expect("apply")),
            10_000
        );
        eprintln!("writes began while the filter was building: {building}");
    }

    fn key(user: u64, target: u64) -> [u8; 17] {
        crate::keys::user_like_key(
            likewise_core::ids::UserId(user),
            likewise_core::like::TargetKind::Post,
            target,
        )
    }

    #[test]
    fn says_maybe_to_everything_until_built_then_never_no_to_an_inserted_key() {
        assert_eq!(bits_for(0) as u64, MIN_KEYS * BITS_PER_KEY);
        assert_eq!(bits_for(10_000_000) as u64, 20_000_000 * BITS_PER_KEY);
        assert_eq!(bits_for(u64::MAX) as u64, MAX_BYTES * 8, "capped");
        let f = LikeFilter::sized_for(0);
        assert!(f.bytes() >= MIN_KEYS * BITS_PER_KEY / 8);
        for u in 0..1000 {
            assert!(f.may_contain(&key(u, 7)), "not built yet: every answer is maybe");
        }
        for u in 0..100_000 {
            f.insert(&key(u, 7));
        }
        f.ready.store(true, Ordering::Release);
        assert!((0..100_000).all(|u| f.may_contain(&key(u, 7))), "no false negatives");
        let false_pos = (100_000..200_000).filter(|u| f.may_contain(&key(*u, 7))).count();
        assert!(false_pos < 100, "{false_pos} false positives in 100,000 (sized for 4M keys)");
        // check_and_insert answers as may_contain did just before, and leaves the key in.
        assert!(f.check_and_insert(&key(5, 7)));
        let absent = (300_000..).find(|u| !f.may_contain(&key(*u, 7))).expect("test step");
        assert!(!f.check_and_insert(&key(absent, 7)));
        assert!(f.may_contain(&key(absent, 7)) && f.check_and_insert(&key(absent, 7)));
    }

    /// The false positive rate the module docs state, at the two loads they name.
    #[test]
    fn false_positives_as_documented() {
        // Sized at open for twice what it holds then (the smallest store that is past MIN_KEYS).
        let n = MIN_KEYS / 2;
        let f = LikeFilter::sized_for(n);
        f.ready.store(true, Ordering::Release);
        let probe = |f: &LikeFilter| {
            let fp = (1u64 << 40..(1u64 << 40) + 200_000).filter(|u| f.may_contain(&key(*u, 9))).count();
            fp as f64 / 200_000.0
        };
        for u in 0..n {
            f.insert(&key(u, 9));
        }
        let at_open = probe(&f);
        for u in n..2 * n {
            f.insert(&key(u, 9));
        }
        let doubled = probe(&f);
        assert!(at_open < 0.005, "{at_open} at open");
        assert!(doubled < 0.025, "{doubled} once doubled");
    }
}
