//! Reconciliation: recount a target from its rows and repair its counters: its likes and,
//! for a post, its `comment_count` and the `reply_count` of each top-level comment with
//! replies, by the rule the write path counts with (`likewise_core::comment::thread`:
//! replies count only under a parent that opens its thread).
//!
//! Counters are exact by construction (offset-atomic commits), so drift should never appear
//! in the embedded engine; the recount is the safety net for bugs, disk restores and, once
//! Redis holds live counters, cache loss. The aggregator recounts the hottest posts
//! periodically and any target on request ([`ReconcileHandle`]); `likewise reconcile` drives
//! the same code offline.

use async_trait::async_trait;
use likewise_core::StoreResult;
use likewise_core::event::Event;
use likewise_core::like::Target;
use likewise_core::ports::EventLog;
use std::collections::HashMap;
use tokio::sync::{mpsc, oneshot};

/// A log with nothing in it: an aggregator over it only reconciles (`likewise reconcile` on
/// a sharded store, where the stream's events are the running workers' business and are
/// counted as pending by the recount).
pub struct EmptyLog;

#[async_trait]
impl EventLog for EmptyLog {
    async fn read_after(&self, _after: u64, _max: usize) -> StoreResult<Vec<Event>> {
        Ok(Vec::new())
    }
    async fn head(&self) -> StoreResult<u64> {
        Ok(0)
    }
    async fn truncate(&self, _upto: u64) -> StoreResult<u64> {
        Ok(0)
    }
}

/// A request to recount one target; the reply carries the drift that was repaired.
pub(crate) struct ReconcileRequest {
    pub(crate) target: Target,
    pub(crate) reply: oneshot::Sender<Result<i64, String>>,
}

/// Asks the running aggregator to reconcile targets.
#[derive(Clone)]
pub struct ReconcileHandle {
    tx: Vec<mpsc::Sender<ReconcileRequest>>,
    route: Option<std::sync::Arc<dyn Fn(Target) -> usize + Send + Sync>>,
}

impl ReconcileHandle {
    pub(crate) fn new(tx: mpsc::Sender<ReconcileRequest>) -> Self {
        ReconcileHandle { tx: vec![tx], route: None }
    }

    /// One handle over several aggregators (one per shard): `route` picks a target's.
    pub fn routed(
        handles: Vec<ReconcileHandle>,
        route: std::sync::Arc<dyn Fn(Target) -> usize + Send + Sync>,
    ) -> Self {
        ReconcileHandle { tx: handles.into_iter().flat_map(|h| h.tx).collect(), route: Some(route) }
    }

    /// Recount `target` at the aggregator's next window; returns the drift repaired.
    pub async fn reconcile(&self, target: Target) -> Result<i64, String> {
        let (reply, rx) = oneshot::channel();
        let i = self.route.as_ref().map_or(0, |r| r(target));
        self.tx
            .get(i)
            .ok_or_else(|| "no aggregator for this target".to_string())?
            .send(ReconcileRequest { target, reply })
            .await
            .map_err(|_| "aggregator stopped".to_string())?;
        rx.await.map_err(|_| "aggregator stopped".to_string())?
    }
}

/// Counts events per target between reconciliation rounds to find the hottest ones.
pub(crate) struct HotTracker {
    keep: usize,
    seen: HashMap<Target, u64>,
}

impl HotTracker {
    pub(crate) fn new(keep: usize) -> Self {
        HotTracker { keep, seen: HashMap::new() }
    }

    pub(crate) fn saw(&mut self, t: Target) {
        // Bounded: past 100k distinct targets a round, only already-hot ones keep counting.
        if self.seen.len() < 100_000 || self.seen.contains_key(&t) {
            *self.seen.entry(t).or_insert(0) += 1;
        }
    }

    /// The `keep` targets with the most events since the last call.
    pub(crate) fn take_hottest(&mut self) -> Vec<Target> {
        let mut all: Vec<(Target, u64)> = self.seen.drain().collect();
        all.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        all.into_iter().take(self.keep).map(|(t, _)| t).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hottest_targets_come_first() {
        let mut h = HotTracker::new(2);
        for (id, n) in [(1u64, 5), (2, 50), (3, 20)] {
            for _ in 0..n {
                h.saw(Target::post(id));
            }
        }
        assert_eq!(h.take_hottest(), vec![Target::post(2), Target::post(3)]);
        assert!(h.take_hottest().is_empty());
    }
}
