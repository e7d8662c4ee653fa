//! Keeping several API nodes in step (scale-out deployments).
//!
//! Each node caches upstream data and moderation state in process (TTL maps). A node that
//! changes one of them drops its own entry and announces an [`Invalidation`] on the
//! [`Broadcast`] port (NATS core pub/sub in production); every other node drops the same
//! entry (the bus listener in `likewise-workers` applies what the others announce; see
//! [`crate::Engagement::apply_invalidation`] and [`crate::shared::Shared`]).
//! Live notifications travel the same way: the worker that stores an inbox change sends it to
//! every node, and the node holding the recipient's SSE stream pushes it.
//!
//! Fire and forget: a lost message leaves an entry until its TTL, never loses data.

use likewise_core::StoreResult;
use likewise_core::event::Event;
use likewise_core::like::TargetKind;
use likewise_core::ports::EventLog;
pub use likewise_core::ports::cluster::{Broadcast, Invalidation};

/// Does a ranking depend on this event? (comment changes and comment likes, not post likes)
pub fn matters_to_ranking(e: &Event) -> bool {
    !e.kind.is_like() || e.target.kind == TargetKind::Comment
}

/// The ranking-relevant events an API node received from the aggregators, as an event log
/// its ranker reads (positions are local). Bounded: the oldest are dropped when a slow
/// ranker falls far behind (rankings are a cache; the next read recomputes).
#[derive(Default)]
pub struct LocalLog {
    inner: parking_lot::Mutex<(u64, std::collections::VecDeque<Event>)>,
}

const LOCAL_LOG_CAP: usize = 100_000;

impl LocalLog {
    /// Append events (their `seq` is replaced by local positions).
    pub fn push(&self, events: &[Event]) {
        let mut g = self.inner.lock();
        for e in events {
            g.0 += 1;
            let mut e = *e;
            e.seq = g.0;
            g.1.push_back(e);
        }
        while g.1.len() > LOCAL_LOG_CAP {
            g.1.pop_front();
        }
    }
}

#[async_trait::async_trait]
impl EventLog for LocalLog {
    async fn read_after(&self, after: u64, max: usize) -> StoreResult<Vec<Event>> {
        let g = self.inner.lock();
        Ok(g.1.iter().filter(|e| e.seq > after).take(max).copied().collect())
    }
    async fn head(&self) -> StoreResult<u64> {
        Ok(self.inner.lock().0)
    }
    async fn truncate(&self, upto: u64) -> StoreResult<u64> {
        let mut g = self.inner.lock();
        let before = g.1.len();
        g.1.retain(|e| e.seq > upto);
        Ok((before - g.1.len()) as u64)
    }
    async fn committed(&self, upto: u64) -> StoreResult<()> {
        self.truncate(upto).await.map(|_| ())
    }
}
