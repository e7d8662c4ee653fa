//! Every piece of background work, and its supervision: the consumers of the event log, the
//! relay that feeds the stream, and what keeps them running.
//!
//! - [`aggregator`]: reads the event log, sums deltas per target over a short window and
//!   commits one counter update per target together with its log offset; repairs drift found
//!   by reconciliation in the same commit.
//! - [`notifier`]: turns engagement events into aggregated notifications.
//! - [`ranker`]: keeps the cached top-comment rankings fresh from comment events.
//! - [`reconcile`]: which targets to recount (hot posts, on request) and the handle used to ask.
//! - [`trending`]: per-post engagement windows and the trending rankings.
//! - [`integrity`]: flags like farms and bot rings, applies verdicts, keeps the discounts.
//! - [`relay`]: (scale-out) moves each shard's outbox rows to the event stream, in order.
//! - [`reverse_index`]: (scale-out) writes the user-keyed like index from the event stream.
//! - [`key_expiry`]: removes comment creates' `Idempotency-Key`s past their retention.
//! - [`notif_retention`]: removes notification items (and their actors) past their retention.
//! - [`export`]: publishes every event as public JSON to a destination (Kafka).
//! - [`consumers`]: the event log's consumers beside the aggregator, listed once: their names,
//!   which of them run, the lease each runs under when scaled out. What `single_node` and
//!   `cluster` start, and what the aggregator holds the log for, follow this list.
//! - [`single_node`]: starts and joins everything `likewise serve` runs beside its HTTP
//!   server on the embedded store.
//! - [`cluster`]: (scale-out) leases, each shard's workers, the roles' tasks, the bus
//!   listener, all through the ports of `likewise_core::ports::cluster`.
//!
//! The storage engines expose the ports and the operations these consumers call (apply
//! deltas, recount, write inbox changes); the consumers themselves live here.

pub mod aggregator;
pub mod cluster;
pub mod consumers;
pub mod export;
pub mod integrity;
pub mod key_expiry;
pub mod notif_retention;
pub mod notifier;
pub mod ranker;
pub mod reconcile;
pub mod relay;
pub mod reverse_index;
pub mod single_node;
pub mod trending;

pub use aggregator::{Aggregator, AggregatorOptions, StepReport};
pub use consumers::Consumer;
pub use reconcile::ReconcileHandle;

use std::time::Duration;
use tokio::sync::watch;

/// A periodic tick that ends on shutdown: `while ticker.next().await { ... }`. Shared by the
/// workers that have nothing to drain when they stop.
pub struct Ticker {
    tick: tokio::time::Interval,
    shutdown: watch::Receiver<bool>,
}

impl Ticker {
    /// Tick every `period` until `shutdown` flips to true (late ticks are delayed, not bunched).
    pub fn new(period: Duration, shutdown: watch::Receiver<bool>) -> Self {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Ticker { tick, shutdown }
    }

    /// Wait for the next tick; false once shutdown was signalled.
    pub async fn next(&mut self) -> bool {
        tokio::select! {
            _ = self.tick.tick() => {}
            _ = self.shutdown.changed() => return false,
        }
        !*self.shutdown.borrow()
    }
}
