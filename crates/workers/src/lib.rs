//! Background workers that run beside the API in `likewise serve`.
//!
//! - [`aggregator`]: reads the event log, sums deltas per target over a short window and
//!   commits one counter update per target together with its log offset; repairs drift found
//!   by reconciliation in the same commit.
//! - [`notifier`]: turns engagement events into aggregated notifications.
//! - [`ranker`]: keeps the cached top-comment rankings fresh from comment events.
//! - [`reverse_index`]: (scale-out) writes the user-keyed like index from the event stream.
//! - [`reconcile`]: which targets to recount (hot posts, on request) and the handle used to ask.

pub mod aggregator;
pub mod notifier;
pub mod ranker;
pub mod reconcile;
pub mod reverse_index;

pub use aggregator::{Aggregator, AggregatorOptions, StepReport};
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
