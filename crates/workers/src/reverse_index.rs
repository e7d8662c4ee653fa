//! The reverse-index writer of a scaled-out deployment (docs/architecture.md, "Scale-out": the user-keyed
//! index is a second write, made from the outbox's events rather than in the request).
//!
//! One per shard, reading that shard's events from the stream. Each round collapses the new
//! like events to each key's final state (`likewise_core::reverse`), writes them to the
//! users' shards, then stores the position; a crash in between replays the round, which
//! writes the same final states again.

use likewise_core::StoreResult;
use likewise_core::ports::EventLog;
use likewise_core::ports::cluster::ReverseIndex;
use likewise_core::reverse::reverse_changes;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Consumer name of shard `s`'s reverse-index writer (its offset lives on that shard).
pub fn consumer(shard: usize) -> String {
    format!("reverse@{shard}")
}

/// Apply everything available now; returns the events read.
pub async fn step(
    index: &dyn ReverseIndex,
    log: &dyn EventLog,
    consumer: &str,
    offset: &mut u64,
) -> StoreResult<usize> {
    let mut n = 0;
    loop {
        let events = log.read_after(*offset, 10_000).await?;
        let Some(last) = events.last() else { break };
        let upto = last.seq;
        index.apply(&reverse_changes(&events)).await?;
        index.set_offset(consumer, upto).await?;
        *offset = upto;
        log.committed(upto).await?;
        n += events.len();
        metrics::counter!("likewise_reverse_index_events_total").increment(events.len() as u64);
    }
    Ok(n)
}

/// Run until shutdown, then apply what is left.
pub async fn run(
    index: Arc<dyn ReverseIndex>,
    log: Arc<dyn EventLog>,
    shard: usize,
    mut shutdown: watch::Receiver<bool>,
) {
    let name = consumer(shard);
    let mut offset = match index.offset(&name).await {
        Ok(o) => o,
        Err(e) => {
            tracing::error!(error = %e, shard, "reverse-index writer cannot read its offset; not started");
            return;
        }
    };
    loop {
        if let Err(e) = step(&*index, &*log, &name, &mut offset).await {
            tracing::warn!(error = %e, shard, "reverse-index round failed; retrying");
        }
        let stop = tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(50)) => *shutdown.borrow(),
            _ = shutdown.changed() => true,
        };
        if stop {
            let _ = step(&*index, &*log, &name, &mut offset).await;
            return;
        }
    }
}
