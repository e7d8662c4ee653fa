//! The outbox relay: moves each shard's committed outbox rows to JetStream, in order.
//!
//! Each outbox row (one transaction's events for one subject partition) becomes one message.
//! One relay per shard runs, under the worker's lease on that shard (a second worker process
//! stands by instead of interleaving). Each round publishes up to `batch` unrelayed
//! rows in `seq` order on one connection (pipelined: all publishes, then all acks), with
//! message ID `<shard>-<seq>`, and then records each row's stream sequence. A crash between
//! the publish and the bookkeeping re-publishes the rows on restart; JetStream recognises
//! the IDs inside its duplicate window and answers with the original sequence.
//!
//! Rows are relayed in `seq` order. Two transactions that touch the same like or comment row
//! are serialized by that row's lock and take their outbox `seq` after it, so the events of
//! one key reach the stream in commit order even when unrelated transactions commit out of
//! `seq` order. Relayed rows are deleted once older than `retain`.

use super::{EventStream, nats_err};
use crate::postgres::{PgStore, pg_err};
use async_nats::jetstream::context::Publish;
use likewise_core::StoreResult;
use std::time::Duration;
use tokio::sync::watch;

/// Relay tuning.
#[derive(Debug, Clone)]
pub struct RelayOptions {
    /// Most rows per round.
    pub batch: usize,
    /// Pause between rounds that found nothing.
    pub idle: Duration,
    /// How long relayed rows stay in the outbox (reconciliation reads recent ones).
    pub retain: Duration,
}

impl Default for RelayOptions {
    fn default() -> Self {
        RelayOptions { batch: 5_000, idle: Duration::from_millis(5), retain: Duration::from_secs(600) }
    }
}

/// One round: relay up to `batch` rows of `shard`. Returns how many were relayed.
pub async fn relay_once(
    pg: &PgStore,
    stream: &EventStream,
    shard: usize,
    batch: usize,
) -> StoreResult<usize> {
    let c = pg.conn(shard).await?;
    let rows = c
        .query(
            "SELECT seq, part, body FROM outbox WHERE stream_seq IS NULL ORDER BY seq LIMIT $1",
            &[&(batch as i64)],
        )
        .await
        .map_err(pg_err)?;
    if rows.is_empty() {
        return Ok(0);
    }
    let mut acks = Vec::with_capacity(rows.len());
    for r in &rows {
        let seq: i64 = r.get(0);
        let part: i16 = r.get(1);
        let body: Vec<u8> = r.get(2);
        let ack = stream
            .js
            .send_publish(
                stream.partition_subject(shard, part as u64),
                Publish::build().message_id(format!("{shard}-{seq}")).payload(body.into()),
            )
            .await
            .map_err(nats_err)?;
        acks.push((seq, ack));
    }
    let mut seqs = Vec::with_capacity(acks.len());
    let mut stream_seqs = Vec::with_capacity(acks.len());
    for (seq, ack) in acks {
        let a = ack.await.map_err(nats_err)?;
        seqs.push(seq);
        stream_seqs.push(a.sequence as i64);
    }
    c.execute(
        "UPDATE outbox o SET stream_seq = v.s FROM unnest($1::bigint[], $2::bigint[]) AS v(q, s) WHERE o.seq = v.q",
        &[&seqs, &stream_seqs],
    )
    .await
    .map_err(pg_err)?;
    metrics::counter!("likewise_relay_events_total").increment(seqs.len() as u64);
    Ok(seqs.len())
}

/// Delete relayed rows older than `retain`.
pub async fn prune(pg: &PgStore, shard: usize, retain: Duration) -> StoreResult<u64> {
    let c = pg.conn(shard).await?;
    let cutoff = crate::now_ms().saturating_sub(retain.as_millis() as u64) as i64;
    c.execute("DELETE FROM outbox WHERE stream_seq IS NOT NULL AND created_ms < $1", &[&cutoff])
        .await
        .map_err(pg_err)
}

/// Relay `shard` until shutdown, then make one last pass. Run it under the shard's lease
/// (one relay per shard: two would interleave publishes).
pub async fn run(
    pg: PgStore,
    stream: EventStream,
    shard: usize,
    opts: RelayOptions,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut last_prune = std::time::Instant::now();
    loop {
        match relay_once(&pg, &stream, shard, opts.batch).await {
            Ok(n) if n > 0 && !*shutdown.borrow() => continue,
            Ok(_) => {
                if wait(&mut shutdown, opts.idle).await {
                    // One last pass so nothing committed before shutdown waits for a restart.
                    while let Ok(n) = relay_once(&pg, &stream, shard, opts.batch).await {
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
            last_prune = std::time::Instant::now();
            match prune(&pg, shard, opts.retain).await {
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
