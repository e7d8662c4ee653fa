//! The outbox relay: moves each shard's committed outbox rows to the event stream, in order.
//!
//! Each outbox row (one transaction's events for one subject partition) becomes one message.
//! One relay per shard runs, under the worker's lease on that shard (a second worker process
//! stands by instead of interleaving). Each round publishes up to `batch` unrelayed rows in
//! `seq` order, and only once the stream has acknowledged them records each row's stream
//! sequence. A crash between the publish and the bookkeeping publishes the rows again on
//! restart; the stream recognises them inside its duplicate window and answers with the
//! original sequences.
//!
//! Rows are relayed in `seq` order. Two transactions that touch the same like or comment row
//! are serialized by that row's lock and take their outbox `seq` after it, so the events of
//! one key reach the stream in commit order even when unrelated transactions commit out of
//! `seq` order. Relayed rows are deleted once older than `retain`.
//!
//! A busy relay polls its outbox every few milliseconds; an idle one waits for the outbox's
//! wake-up (PostgreSQL: the writing transaction's `NOTIFY`), see [`run`].

use likewise_core::StoreResult;
use likewise_core::ports::cluster::{EventStream, Outbox, OutboxWakeups};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Relay tuning.
#[derive(Debug, Clone)]
pub struct RelayOptions {
    /// Most rows per round.
    pub batch: usize,
    /// Pause between rounds that found nothing, while the relay is busy.
    pub idle: Duration,
    /// How long the relay keeps polling every `idle` after its last wake-up or its last round
    /// that found rows; then it waits for the outbox's wake-up instead (when the engine has
    /// them: [`Outbox::wakeups`]). Longer than the engine's announcements are apart, so the
    /// rows of transactions that did not announce themselves are found as fast as before.
    pub quiet_after: Duration,
    /// The longest wait for a wake-up: the relay looks anyway after this long (a wake-up
    /// lost with its connection).
    pub wakeup_timeout: Duration,
    /// How long relayed rows stay in the outbox (reconciliation reads recent ones).
    pub retain: Duration,
}

impl Default for RelayOptions {
    fn default() -> Self {
        RelayOptions {
            batch: 5_000,
            idle: Duration::from_millis(5),
            quiet_after: Duration::from_millis(500),
            wakeup_timeout: Duration::from_secs(1),
            retain: Duration::from_secs(600),
        }
    }
}

/// One round: relay up to `batch` rows of `shard`. Returns how many were relayed.
pub async fn relay_once(
    outbox: &dyn Outbox,
    stream: &dyn EventStream,
    shard: usize,
    batch: usize,
) -> StoreResult<usize> {
    let rows = outbox.unrelayed(shard, batch).await?;
    if rows.is_empty() {
        return Ok(0);
    }
    let stream_seqs = stream.publish(shard, &rows).await?;
    let relayed: Vec<(u64, u64)> = rows.iter().map(|r| r.seq).zip(stream_seqs).collect();
    outbox.mark_relayed(shard, &relayed).await?;
    metrics::counter!("likewise_relay_events_total").increment(relayed.len() as u64);
    Ok(relayed.len())
}

/// Why the relay looked at its outbox (`likewise_relay_wakeups_total{cause}`).
fn woke(cause: &'static str) {
    metrics::counter!("likewise_relay_wakeups_total", "cause" => cause).increment(1);
}

/// Relay `shard` until shutdown, then make one last pass. Run it under the shard's lease
/// (one relay per shard: two would interleave publishes).
///
/// While rows come, rounds follow each other, every `idle` at most apart. Once nothing has
/// come for `quiet_after`, the relay waits for the outbox's wake-up (a `LISTEN` on
/// PostgreSQL), up to `wakeup_timeout`: an idle deployment's relays cost next to nothing.
pub async fn run(
    outbox: Arc<dyn Outbox>,
    stream: Arc<dyn EventStream>,
    shard: usize,
    opts: RelayOptions,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut last_prune = Instant::now();
    let mut last_busy = Instant::now();
    let mut wakeups: Option<Box<dyn OutboxWakeups>> = None;
    // Whether wake-ups can be had at all (an engine without them: poll as while busy).
    let mut can_wait = true;
    loop {
        match relay_once(&*outbox, &*stream, shard, opts.batch).await {
            Ok(n) if n > 0 && !*shutdown.borrow() => {
                last_busy = Instant::now();
                continue;
            }
            Ok(_) => {
                let stopping = if !can_wait || last_busy.elapsed() < opts.quiet_after {
                    woke("poll");
                    wait(&mut shutdown, opts.idle).await
                } else if let Some(w) = wakeups.as_mut() {
                    tokio::select! {
                        got = w.wait(opts.wakeup_timeout) => {
                            match got {
                                Ok(true) => {
                                    woke("notified");
                                    last_busy = Instant::now();
                                }
                                Ok(false) => woke("timeout"),
                                Err(e) => {
                                    tracing::warn!(error = %e, shard, "relay wake-ups lost; listening again");
                                    wakeups = None;
                                }
                            }
                            *shutdown.borrow()
                        }
                        _ = shutdown.changed() => true,
                    }
                } else {
                    // Subscribe first, then look again: rows committed before the
                    // subscription took effect are found by that look, later ones announced.
                    match outbox.wakeups(shard).await {
                        Ok(Some(w)) => wakeups = Some(w),
                        Ok(None) => can_wait = false,
                        Err(e) => {
                            tracing::warn!(error = %e, shard, "relay cannot listen for new rows; polling");
                            metrics::counter!("likewise_relay_failures_total").increment(1);
                            // Polls meanwhile, and tries again after a while.
                            last_busy = Instant::now();
                        }
                    }
                    *shutdown.borrow()
                };
                if stopping {
                    // One last pass so nothing committed before shutdown waits for a restart.
                    while let Ok(n) = relay_once(&*outbox, &*stream, shard, opts.batch).await {
                        if n == 0 {
                            break;
                        }
                    }
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, shard, "relay round failed; retrying");
                metrics::counter!("likewise_relay_failures_total").increment(1);
                if wait(&mut shutdown, Duration::from_millis(200)).await {
                    return;
                }
            }
        }
        if last_prune.elapsed() > Duration::from_secs(60) {
            last_prune = Instant::now();
            let before = likewise_service::now_ms().saturating_sub(opts.retain.as_millis() as u64);
            match outbox.prune(shard, before).await {
                Ok(n) if n > 0 => tracing::debug!(shard, removed = n, "outbox pruned"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, shard, "outbox prune failed"),
            }
        }
    }
}

/// Sleep `d` or until shutdown; true when shutting down.
async fn wait(shutdown: &mut watch::Receiver<bool>, d: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => *shutdown.borrow(),
        _ = shutdown.changed() => true,
    }
}
