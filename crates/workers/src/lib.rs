//! Background workers that run beside the API in `likewise serve`.
//!
//! - [`aggregator`]: reads the event log, sums deltas per target over a short window and
//!   commits one counter update per target together with its log offset; repairs drift found
//!   by reconciliation in the same commit.
//! - [`notifier`]: turns engagement events into aggregated notifications.
//! - [`ranker`]: keeps the cached top-comment rankings fresh from comment events.
//! - [`reconcile`]: which targets to recount (hot posts, on request) and the handle used to ask.

pub mod aggregator;
pub mod notifier;
pub mod ranker;
pub mod reconcile;

pub use aggregator::{Aggregator, AggregatorOptions, StepReport};
pub use reconcile::ReconcileHandle;
