//! Read-your-writes for comment pages on a replica.
//!
//! A comment's author lists the comments right after writing one (or deleting one). The lag
//! bound alone would let that page come from a replica that has not replayed the write yet,
//! and the author would not see their own comment. So each comment write committed through
//! this process records the time just after its commit under the pages it changes: its
//! post's top-level comments and, for a reply, its thread. A page read under such a fence
//! uses the replica only once the replica is fresh as of a later time, that is, holds the
//! write; until then it reads the primary. A fence older than the bound is forgotten: a
//! replica the bound lets read is fresh as of a later time anyway.
//!
//! The fence is this process's: another API node knows nothing of it and serves the page
//! within the lag bound (docs/architecture.md, "Read replicas").

use super::Clock;
use parking_lot::Mutex;
use std::collections::HashMap;

/// The rows a comment page reads, which a comment write may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Fence {
    /// A post's top-level comments.
    Post(u64),
    /// The replies under a top-level comment.
    Thread(u64),
}

/// Fences are pruned when the map reaches this size (or twice its size after the last prune).
const MIN_PRUNE: usize = 1024;

/// When this process last wrote under each fence (microseconds on the [`Clock`]).
pub(super) struct Fences {
    inner: Mutex<Inner>,
    /// The lag bound, in microseconds: an older fence is covered by the bound itself.
    horizon: u64,
}

struct Inner {
    at: HashMap<Fence, u64>,
    prune_at: usize,
}

impl Fences {
    pub(super) fn new(horizon: u64) -> Self {
        Fences { inner: Mutex::new(Inner { at: HashMap::new(), prune_at: MIN_PRUNE }), horizon }
    }

    /// Writes under `fences` have committed: now is after their commits.
    pub(super) fn record(&self, fences: &[Fence], clock: &Clock) {
        let mut g = self.inner.lock();
        // Read under the lock: a fence never moves back to an earlier time.
        let now = clock.now();
        for f in fences {
            g.at.insert(*f, now);
        }
        if g.at.len() >= g.prune_at {
            let horizon = self.horizon;
            g.at.retain(|_, at| now.saturating_sub(*at) <= horizon);
            g.prune_at = (g.at.len() * 2).max(MIN_PRUNE);
        }
    }

    /// Whether a replica fresh as of `fresh` holds this process's last write under `fence`.
    pub(super) fn covered(&self, fence: Fence, fresh: u64) -> bool {
        self.inner.lock().at.get(&fence).is_none_or(|at| fresh > *at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_page_without_writes_is_covered_by_any_freshness() {
        let f = Fences::new(1_000_000);
        assert!(f.covered(Fence::Post(1), 1));
    }

    #[test]
    fn a_page_written_to_needs_a_replica_fresh_as_of_after_the_write() {
        let clock = Clock(Instant::now());
        let f = Fences::new(1_000_000);
        let before = clock.now();
        f.record(&[Fence::Post(7), Fence::Thread(9)], &clock);
        assert!(!f.covered(Fence::Post(7), before), "fresh before the write");
        assert!(!f.covered(Fence::Thread(9), before));
        std::thread::sleep(Duration::from_millis(2));
        let after = clock.now();
        assert!(f.covered(Fence::Post(7), after));
        assert!(f.covered(Fence::Thread(9), after));
        assert!(f.covered(Fence::Thread(7), before), "another page is not fenced");
    }

    #[test]
    fn pruning_forgets_only_fences_older_than_the_bound() {
        let clock = Clock(Instant::now());
        let f = Fences::new(20_000);
        let old: Vec<Fence> = (0..MIN_PRUNE as u64).map(Fence::Post).collect();
        f.record(&old[..MIN_PRUNE - 1], &clock);
        std::thread::sleep(Duration::from_millis(30));
        // This one reaches the pruning size: the others are past the bound, it is not.
        f.record(&[Fence::Thread(1)], &clock);
        let g = f.inner.lock();
        assert_eq!(g.at.len(), 1);
        assert!(g.at.contains_key(&Fence::Thread(1)));
        assert_eq!(g.prune_at, MIN_PRUNE);
    }
}
