//! Expiry of comment creates' `Idempotency-Key`s: once a minute, keys older than the
//! retention (default 24 h, `comments.idempotency_retention`) are removed by the store, so
//! memory and disk stay bounded by the keys of one retention. `likewise_comment_keys` shows
//! how many are kept, `likewise_comment_keys_expired_total` how many went.

use crate::Ticker;
use likewise_core::ports::IdempotencyStore;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// What docs/api.md promises: keys are kept at least 24 hours.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// How often expired keys are removed.
const EVERY: Duration = Duration::from_secs(60);

/// Remove expired keys once now (keys stored before `now_ms - retention`); returns how many
/// went and how many are kept.
pub async fn expire_once(
    keys: &dyn IdempotencyStore,
    retention: Duration,
    now_ms: u64,
) -> likewise_core::StoreResult<(u64, u64)> {
    let before = now_ms.saturating_sub(retention.as_millis() as u64);
    let removed = keys.purge_keys(before).await?;
    let kept = keys.key_count().await?;
    metrics::counter!("likewise_comment_keys_expired_total").increment(removed);
    metrics::gauge!("likewise_comment_keys").set(kept as f64);
    Ok((removed, kept))
}

/// Expire keys every minute until shutdown.
pub async fn run(keys: Arc<dyn IdempotencyStore>, retention: Duration, stop: watch::Receiver<bool>) {
    let mut ticker = Ticker::new(EVERY, stop);
    while ticker.next().await {
        if let Err(e) = expire_once(&*keys, retention, likewise_engine::now_ms()).await {
            tracing::warn!(error = %e, "expiring idempotency keys failed");
        }
    }
}
