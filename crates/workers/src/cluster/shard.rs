//! One shard's workers, run under that shard's lease: the outbox relay, the counter
//! aggregator, the reverse-index writer and the pruner of the notification items stored on
//! the shard ([`crate::notif_retention`]).

use super::ports::ClusterPorts;
use crate::{Aggregator, AggregatorOptions, relay, reverse_index};
use likewise_core::StoreResult;
use likewise_core::ports::cluster::Scope;
use likewise_service::Engagement;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Consumer name of shard `s`'s counter aggregator (its offset lives on that shard).
pub fn counters_consumer(shard: usize) -> String {
    likewise_core::ports::cluster::shard_consumer(likewise_core::counter::COUNTERS_CONSUMER, shard)
}

/// What a shard's workers are run with.
#[derive(Debug, Clone, Default)]
pub struct ShardOptions {
    /// The counter aggregator (it gets the shard's consumer name).
    pub aggregator: AggregatorOptions,
    /// The retention of the shard's notification items.
    pub notif_retention: crate::notif_retention::RetentionOptions,
}

/// Run shard `shard`'s workers until `stop`. The consumers stop after the relay's last pass,
/// so a graceful stop applies every event committed before it.
pub async fn shard_workers(
    svc: Arc<Engagement>,
    ports: ClusterPorts,
    opts: ShardOptions,
    shard: usize,
    stop: watch::Receiver<bool>,
) {
    let agg = opts.aggregator;
    let (consumers_stop, stop_consumers) = watch::channel(false);
    // The items stored on this shard, pruned by one process at a time (this lease's holder).
    let pruner = tokio::spawn(crate::notif_retention::run(
        svc.stores().notifications.clone(),
        shard,
        opts.notif_retention,
        stop_consumers.clone(),
    ));
    let relay = tokio::spawn(relay::run(
        ports.outbox.clone(),
        ports.stream.clone(),
        shard,
        relay::RelayOptions::default(),
        stop.clone(),
    ));
    let aggregator = match start_aggregator(&svc, &ports, agg, shard).await {
        Ok(a) => Some(tokio::spawn(a.run(stop_consumers.clone()))),
        Err(e) => {
            tracing::error!(error = %e, shard, "aggregator not started");
            None
        }
    };
    let reverse = match start_reverse_index(&ports, shard).await {
        Ok(log) => Some(tokio::spawn(reverse_index::run(ports.reverse.clone(), log, shard, stop_consumers))),
        Err(e) => {
            tracing::error!(error = %e, shard, "reverse-index writer not started");
            None
        }
    };
    let mut stop_wait = stop.clone();
    if aggregator.is_none() || reverse.is_none() {
        // Half a shard worker is worse than none: give the lease back after a pause.
        tokio::time::sleep(Duration::from_secs(1)).await;
    } else {
        let _ = stop_wait.wait_for(|s| *s).await;
    }
    let _ = relay.await;
    let _ = consumers_stop.send(true);
    for t in [aggregator, reverse, Some(pruner)].into_iter().flatten() {
        let _ = t.await;
    }
}

/// The shard's aggregator, reading its events from the stream after its stored offset.
async fn start_aggregator(
    svc: &Arc<Engagement>,
    ports: &ClusterPorts,
    agg: AggregatorOptions,
    shard: usize,
) -> StoreResult<Aggregator> {
    let opts = AggregatorOptions { consumer: counters_consumer(shard), ..agg };
    let offset = Aggregator::stored_offset(svc, &opts).await?;
    let log = ports.stream.consumer(&format!("counters-{shard}"), Scope::Shard(shard), offset).await?;
    Ok(Aggregator::with_log(svc.clone(), opts, log).await?.0)
}

/// The shard's reverse-index writer's log, after its stored offset.
async fn start_reverse_index(
    ports: &ClusterPorts,
    shard: usize,
) -> StoreResult<Arc<dyn likewise_core::ports::EventLog>> {
    let offset = ports.reverse.offset(&reverse_index::consumer(shard)).await?;
    ports.stream.consumer(&format!("reverse-{shard}"), Scope::Shard(shard), offset).await
}
