//! The retention of notification data (`notifications.retain_days`, default 30; 0 keeps
//! everything): inbox items last updated before the retention are removed with all their
//! actors, so the inbox store stays bounded by the notifications of one retention.
//!
//! Every minute a pass removes the items past the cutoff, [`BATCH`] per store write with a
//! pause between writes ([`NotificationStore::prune_notifications`]): each write holds the
//! notifier's writer lock for one short batch only, so the notifier never waits for a whole
//! pass, and a long backlog (a first pass after an upgrade) drains at a bounded rate.
//! `likewise_notifications_pruned_total` counts the removed items.
//!
//! Who runs it: the single process on the embedded engine; in a scaled-out deployment each
//! shard's pruner runs with that shard's workers, under its lease ([`crate::cluster::shard`]).
//! An item kept is whole (all its actors and the count they make), and an item pruned is
//! gone with all of them: pages and counts read as if it had never been. There is no unread
//! count kept beside the items to correct.

use likewise_core::StoreResult;
use likewise_core::ports::NotificationStore;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Items removed per store write.
pub const BATCH: usize = 1_000;

/// The default retention (`notifications.retain_days`).
pub const DEFAULT_RETAIN: Duration = Duration::from_secs(30 * 86_400);

/// How often a pass runs.
const EVERY: Duration = Duration::from_secs(60);

/// The pause between two writes of a pass.
const PAUSE: Duration = Duration::from_millis(50);

/// Retention options.
#[derive(Debug, Clone)]
pub struct RetentionOptions {
    /// Items last updated longer ago than this are removed; `None` keeps every item.
    pub retain: Option<Duration>,
    /// Items removed per write.
    pub batch: usize,
    /// The pause between writes.
    pub pause: Duration,
    /// How often a pass runs.
    pub every: Duration,
}

impl Default for RetentionOptions {
    fn default() -> Self {
        RetentionOptions { retain: Some(DEFAULT_RETAIN), batch: BATCH, pause: PAUSE, every: EVERY }
    }
}

/// The cutoff at `now_ms`: items last updated before it are past the retention.
pub fn cutoff(retain: Duration, now_ms: u64) -> u64 {
    now_ms.saturating_sub(u64::try_from(retain.as_millis()).unwrap_or(u64::MAX))
}

/// One pass over `shard` at `now_ms` (a test passes its own clock): remove every item last
/// updated before `now_ms - retain`, `opts.batch` per write, pausing between writes; stops
/// early, between writes, when `stop` flips. Returns how many items went.
pub async fn prune_once(
    store: &dyn NotificationStore,
    shard: usize,
    opts: &RetentionOptions,
    now_ms: u64,
    stop: &watch::Receiver<bool>,
) -> StoreResult<u64> {
    let Some(retain) = opts.retain else { return Ok(0) };
    let before = cutoff(retain, now_ms);
    let batch = opts.batch.max(1);
    let mut removed = 0u64;
    loop {
        let n = store.prune_notifications(shard, before, batch).await?;
        metrics::counter!("likewise_notifications_pruned_total").increment(n);
        removed += n;
        if (n as usize) < batch || *stop.borrow() {
            return Ok(removed);
        }
        tokio::time::sleep(opts.pause).await;
    }
}

/// Prune `shard` every `opts.every` until `stop` flips (nothing at all when the retention
/// keeps everything).
pub async fn run(
    store: Arc<dyn NotificationStore>,
    shard: usize,
    opts: RetentionOptions,
    stop: watch::Receiver<bool>,
) {
    if opts.retain.is_none() {
        return;
    }
    let mut ticker = crate::Ticker::new(opts.every, stop.clone());
    while ticker.next().await {
        match prune_once(&*store, shard, &opts, likewise_engine::now_ms(), &stop).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(shard, items = n, "pruned notification items past the retention"),
            Err(e) => tracing::warn!(error = %e, shard, "pruning notification items failed"),
        }
    }
}
