//! Scale-out wiring: the roles of a deployment on PostgreSQL (shards), Redis and NATS.
//!
//! - API node (`--role api`): stateless HTTP. Reads through Redis and PostgreSQL, writes
//!   through its own group committer into the shards' transactions. It listens on the
//!   cluster bus (NATS core) for cache invalidations, live notifications and the aggregators'
//!   commits (new counts go straight into its count cache; comment events re-rank its cached
//!   top comments).
//! - Worker (`--role worker`): per shard, under that shard's lease (a PostgreSQL advisory
//!   lock, so a second worker is a hot standby, never a second writer): the outbox relay, the
//!   counter aggregator and the reverse-index writer; under one more lease, the notifier.
//! - `--role all`: both in one process.

use crate::config::Config;
use anyhow::Context;
use futures_util::StreamExt;
use likewise_core::counter::CounterKey;
use likewise_core::event::Event;
use likewise_core::ports::{CounterStore, EventLog, NotifItem};
use likewise_service::Engagement;
use likewise_service::cluster::{
    Broadcast, Invalidation, decode_counters, decode_item, encode_counters, encode_item,
};
use likewise_store::Stores;
use likewise_store::postgres::PgStore;
use likewise_store::stream::EventStream;
use likewise_store::stream::log::StreamLog;
use likewise_workers::{Aggregator, AggregatorOptions};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Lease keys (PostgreSQL advisory locks): shard workers add the shard number.
const SHARD_LEASE: i64 = 0x4c57_5348_0000;
const NOTIFIER_LEASE: i64 = 0x4c57_4e4f_0000;

/// The engines of a scaled-out process.
#[derive(Clone)]
pub struct Cluster {
    /// The shards.
    pub pg: PgStore,
    /// The event stream.
    pub stream: EventStream,
    /// This process's random ID on the cluster bus (it ignores its own messages).
    pub node: u64,
}

/// Connect Redis and NATS, check the schema, and put Redis in front of the stores.
pub async fn connect(cfg: &Config, stores: Stores) -> anyhow::Result<(Stores, Cluster)> {
    let pg = stores.postgres.clone().context("the postgres backend did not open a PostgreSQL store")?;
    pg.check_schema().await.context("checking the PostgreSQL schema")?;
    let redis = likewise_store::shared_cache::Redis::connect(&cfg.redis_options()).await?;
    let stream = EventStream::connect(&cfg.stream_options()).await?;
    Ok((stores.with_shared_cache(redis), Cluster { pg, stream, node: rand::random() }))
}

/// The lease (advisory lock key) of shard `s`'s workers.
pub fn shard_lease(shard: usize) -> i64 {
    SHARD_LEASE + shard as i64
}

/// Consumer name of shard `s`'s counter aggregator (its offset lives on that shard).
pub fn counters_consumer(shard: usize) -> String {
    format!("counters@{shard}")
}

/// Run `body` whenever this process holds lease `key` on `shard`; stop it when the lease is
/// lost (then try to take it again) or on shutdown.
async fn leased<F, Fut>(
    pg: PgStore,
    shard: usize,
    key: i64,
    what: String,
    mut shutdown: watch::Receiver<bool>,
    body: F,
) where
    F: Fn(watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    loop {
        if *shutdown.borrow() {
            return;
        }
        let lease = match pg.try_lease(shard, key).await {
            Ok(Some(l)) => l,
            Ok(None) => {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = shutdown.changed() => {}
                }
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, %what, "cannot take the lease; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = shutdown.changed() => {}
                }
                continue;
            }
        };
        tracing::info!(%what, "lease taken: running");
        let (tx, rx) = watch::channel(false);
        let task = tokio::spawn(body(rx));
        let stopping = loop {
            tokio::select! {
                _ = shutdown.changed() => break true,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {
                    if lease.is_lost() || !lease.check().await {
                        tracing::warn!(%what, "lease lost: stopping");
                        break false;
                    }
                }
            }
        };
        let _ = tx.send(true);
        if let Err(e) = task.await {
            tracing::error!(error = %e, %what, "task failed");
        }
        drop(lease);
        if stopping {
            return;
        }
    }
}

/// One shard's workers: relay, aggregator, reverse-index writer.
async fn shard_workers(
    svc: Arc<Engagement>,
    cluster: Cluster,
    agg: AggregatorOptions,
    shard: usize,
    stop: watch::Receiver<bool>,
) {
    let pg = cluster.pg.clone();
    // The consumers stop after the relay's last pass, so a graceful stop applies every event
    // committed before it.
    let (consumers_stop, stop_consumers) = watch::channel(false);
    let relay = tokio::spawn(likewise_store::stream::relay::run(
        pg.clone(),
        cluster.stream.clone(),
        shard,
        Default::default(),
        stop.clone(),
    ));
    let opts = AggregatorOptions { consumer: counters_consumer(shard), ..agg };
    let aggregator = async {
        let offset = Aggregator::stored_offset(&svc, &opts).await?;
        let log = StreamLog::durable(
            &cluster.stream,
            &format!("counters-{shard}"),
            cluster.stream.shard_filter(shard),
            offset,
        )
        .await?;
        Aggregator::with_log(svc.clone(), opts, Arc::new(log)).await
    }
    .await;
    let aggregator = match aggregator {
        Ok((a, _)) => Some(tokio::spawn(a.run(stop_consumers.clone()))),
        Err(e) => {
            tracing::error!(error = %e, shard, "aggregator not started");
            None
        }
    };
    let consumer = likewise_workers::reverse_index::consumer(shard);
    let reverse = match pg.offset(&consumer).await {
        Ok(offset) => {
            match StreamLog::durable(
                &cluster.stream,
                &format!("reverse-{shard}"),
                cluster.stream.shard_filter(shard),
                offset,
            )
            .await
            {
                Ok(log) => Some(tokio::spawn(likewise_workers::reverse_index::run(
                    pg.clone(),
                    Arc::new(log),
                    shard,
                    stop.clone(),
                ))),
                Err(e) => {
                    tracing::error!(error = %e, shard, "reverse-index writer not started");
                    None
                }
            }
        }
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
    for t in [aggregator, reverse].into_iter().flatten() {
        let _ = t.await;
    }
}

/// Start the worker role's tasks.
pub fn spawn_workers(
    svc: &Arc<Engagement>,
    cluster: &Cluster,
    cfg: &Config,
    shutdown: &watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    for shard in 0..cluster.pg.shard_count() {
        let (svc, c, agg) = (svc.clone(), cluster.clone(), cfg.aggregator_options());
        tasks.push(tokio::spawn(leased(
            cluster.pg.clone(),
            shard,
            shard_lease(shard),
            format!("shard {shard} workers"),
            shutdown.clone(),
            move |stop| shard_workers(svc.clone(), c.clone(), agg.clone(), shard, stop),
        )));
    }
    let hold = Duration::from_millis(cfg.notifications.hold_ms);
    let (svc, c) = (svc.clone(), cluster.clone());
    tasks.push(tokio::spawn(leased(
        cluster.pg.clone(),
        0,
        NOTIFIER_LEASE,
        "notifier".into(),
        shutdown.clone(),
        move |stop| {
            let (svc, c) = (svc.clone(), c.clone());
            async move {
                let opts = likewise_workers::notifier::NotifierOptions { hold, ..Default::default() };
                let log = async {
                    let offset = likewise_workers::notifier::Notifier::stored_offset(&svc).await?;
                    StreamLog::durable(&c.stream, "notifications", c.stream.all_filter(), offset).await
                }
                .await;
                match log {
                    Ok(log) => likewise_workers::notifier::run_with(svc, opts, Arc::new(log), stop).await,
                    Err(e) => {
                        tracing::error!(error = %e, "notifier not started");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        },
    )));
    tasks
}

/// Start the API role's own consumer: the top-comments refresher, fed by the aggregators'
/// commits on the cluster bus (after the counts they change, so re-ranking sees them).
pub fn spawn_api(svc: &Arc<Engagement>, shutdown: &watch::Receiver<bool>) -> Vec<JoinHandle<()>> {
    let log: Arc<dyn EventLog> = svc.remote_events();
    let ranker = tokio::spawn(likewise_workers::ranker::run_with(
        svc.clone(),
        likewise_workers::ranker::RankerOptions::default(),
        log,
        false,
        shutdown.clone(),
    ));
    vec![ranker]
}

/// Subjects of the cluster bus.
fn bus_subject(prefix: &str, what: &str) -> String {
    format!("{prefix}.cluster.{what}")
}

/// The cluster bus on NATS core: `[node id][payload]` messages, fire and forget, published
/// in the order they were sent (one publisher task), so a node never applies an older
/// counter value after a newer one from the same aggregator.
pub struct NatsBroadcast {
    tx: tokio::sync::mpsc::UnboundedSender<(String, Vec<u8>)>,
    prefix: String,
    node: u64,
}

impl NatsBroadcast {
    fn new(client: async_nats::Client, prefix: String, node: u64) -> Self {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, Vec<u8>)>();
        tokio::spawn(async move {
            while let Some((subject, msg)) = rx.recv().await {
                if let Err(e) = client.publish(subject, msg.into()).await {
                    tracing::warn!(error = %e, "cluster bus publish failed");
                }
            }
        });
        NatsBroadcast { tx, prefix, node }
    }

    /// Publish `[node id: 8 bytes][payload]` on `<prefix>.cluster.<what>`.
    fn send(&self, what: &str, payload: &[u8]) {
        let mut msg = Vec::with_capacity(8 + payload.len());
        msg.extend_from_slice(&self.node.to_be_bytes());
        msg.extend_from_slice(payload);
        let _ = self.tx.send((bus_subject(&self.prefix, what), msg));
    }
}

impl Broadcast for NatsBroadcast {
    fn invalidate(&self, inv: Invalidation) {
        self.send("inval", inv.encode().as_bytes());
    }

    fn counters(&self, epoch: u64, values: &[(CounterKey, i64)], events: &[Event]) {
        let mut chunks = values.chunks(likewise_service::cluster::COUNTERS_PER_MESSAGE);
        // The events ride with the last chunk, after every value they may depend on.
        let last = chunks.next_back().unwrap_or(&[]);
        for c in chunks {
            self.send("counts", &encode_counters(epoch, c, &[]));
        }
        for (i, ev) in events.chunks(likewise_service::cluster::COUNTERS_PER_MESSAGE).enumerate() {
            self.send("counts", &encode_counters(epoch, if i == 0 { last } else { &[] }, ev));
        }
        if events.is_empty() && !last.is_empty() {
            self.send("counts", &encode_counters(epoch, last, &[]));
        }
    }

    fn notifications(&self, items: &[NotifItem]) {
        if items.is_empty() {
            return;
        }
        let lines: Vec<String> = items.iter().map(encode_item).collect();
        self.send("live", lines.join("\n").as_bytes());
    }
}

/// Join the cluster bus: announce this node's changes, apply the others'.
pub async fn join_bus(
    svc: &Arc<Engagement>,
    cluster: &Cluster,
    shutdown: &watch::Receiver<bool>,
) -> anyhow::Result<JoinHandle<()>> {
    let client = cluster.stream.client.clone();
    let prefix = cluster.stream.prefix.clone();
    svc.set_broadcast(Arc::new(NatsBroadcast::new(client.clone(), prefix.clone(), cluster.node)));
    let mut sub =
        client.subscribe(bus_subject(&prefix, "*")).await.context("subscribing to the cluster bus")?;
    let (svc, node, mut shutdown) = (svc.clone(), cluster.node, shutdown.clone());
    let (inval, counts) = (bus_subject(&prefix, "inval"), bus_subject(&prefix, "counts"));
    Ok(tokio::spawn(async move {
        loop {
            let msg = tokio::select! {
                m = sub.next() => match m { Some(m) => m, None => return },
                _ = shutdown.changed() => return,
            };
            let Some((from, body)) = msg.payload.split_first_chunk::<8>() else { continue };
            if u64::from_be_bytes(*from) == node {
                continue;
            }
            if msg.subject.as_str() == counts {
                match decode_counters(body) {
                    Some((epoch, values, events)) => svc.apply_remote_counters(epoch, &values, &events),
                    None => tracing::warn!("undecodable counter update on the cluster bus"),
                }
                continue;
            }
            let Ok(text) = std::str::from_utf8(body) else { continue };
            if msg.subject.as_str() == inval {
                if let Some(inv) = Invalidation::decode(text) {
                    svc.apply_invalidation(inv);
                }
            } else {
                let items: Vec<NotifItem> = text.lines().filter_map(decode_item).collect();
                if let Err(e) = svc.push_live(items).await {
                    tracing::warn!(error = %e, "pushing remote notifications failed");
                }
            }
        }
    }))
}
