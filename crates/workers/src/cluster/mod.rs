//! Supervision of a scaled-out deployment's background work.
//!
//! - Worker role: per shard, under that shard's lease ([`lease`]; a second worker process is
//!   a hot standby, never a second writer), the outbox relay, the counter aggregator, the
//!   reverse-index writer and the pruner of the shard's notification items ([`shard`]); under
//!   leases of their own, the export and the integrity consumer; and a share of the
//!   partitions of the notifier and of trending, each under a lease of its own, the others'
//!   in the other worker processes ([`parts`]).
//! - API role: the top-comments refresher, fed by the aggregators' commits on the bus.
//! - Every role: the cluster bus listener ([`bus`]).
//!
//! Everything here sees the engines through the ports of `likewise_core::ports::cluster`
//! ([`ClusterPorts`]), wired by the binary from the scale-out engines.

pub mod bus;
pub mod lease;
pub mod parts;
pub mod ports;
pub mod shard;
pub mod shared_log;

use crate::consumers::{Consumer, WorkerOptions};
use crate::notifier::NotifierOptions;
use futures_util::future::join_all;
use likewise_core::ports::EventLog;
use likewise_core::ports::cluster::{LeaseName, PARTITIONS, Scope};
use likewise_service::Engagement;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use ports::ClusterPorts;
pub use shard::counters_consumer;

/// Start the worker role's tasks: every shard's workers and the consumers, each under its
/// lease, and this process's share of the partitioned consumers' partitions.
pub fn spawn_workers(
    svc: &Arc<Engagement>,
    ports: &ClusterPorts,
    opts: &WorkerOptions,
    shutdown: &watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    let shard_task = {
        let (svc, ports, agg, retention, shutdown) = (
            svc.clone(),
            ports.clone(),
            opts.aggregator_options(),
            opts.notif_retention.clone(),
            shutdown.clone(),
        );
        move |shard: usize| {
            let (svc, p, agg, retention) = (svc.clone(), ports.clone(), agg.clone(), retention.clone());
            tokio::spawn(lease::leased(
                ports.leases.clone(),
                LeaseName::Shard(shard),
                shutdown.clone(),
                move |stop| {
                    let opts =
                        shard::ShardOptions { aggregator: agg.clone(), notif_retention: retention.clone() };
                    shard::shard_workers(svc.clone(), p.clone(), opts, shard, stop)
                },
            ))
        }
    };
    let started = ports.outbox.shard_count();
    tasks.extend((0..started).map(&shard_task));
    // A shard registered while the process runs (`likewise shards add`) gets its workers
    // once the store has opened it: the store reads the catalog every half second.
    {
        let (ports, mut shutdown) = (ports.clone(), shutdown.clone());
        tasks.push(tokio::spawn(async move {
            let mut joined = Vec::new();
            let mut running = started;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = shutdown.changed() => break,
                }
                if *shutdown.borrow() {
                    break;
                }
                while running < ports.outbox.shard_count() {
                    tracing::info!(shard = running, "a registered shard joined: starting its workers");
                    joined.push(shard_task(running));
                    running += 1;
                }
            }
            for t in joined {
                let _ = t.await;
            }
        }));
    }
    // Every worker process expires keys: deleting what is already gone costs nothing, and a
    // standby then needs no lease of its own for it.
    tasks.push(tokio::spawn(crate::key_expiry::run(
        svc.stores().idempotency.clone(),
        opts.key_retention,
        shutdown.clone(),
    )));
    // The partitioned consumers, a share of their partitions in each worker process.
    let running: Vec<Consumer> = opts.consumers().collect();
    for c in running.iter().copied() {
        let Some(kind) = c.partitioned() else { continue };
        let work: Arc<dyn parts::SharedWork> = match c {
            Consumer::Notifier => {
                let (commands, rx) = tokio::sync::mpsc::unbounded_channel();
                let offsets = svc.clone();
                let shared = shared_reader(&ports.stream, crate::notifier::NOTIFIER);
                let open = move |part: u16| {
                    let (svc, shared) = (offsets.clone(), shared.clone());
                    async move {
                        let offset = crate::notifier::Notifier::start_offset(&*svc, Some(part)).await?;
                        Ok(shared.view(part, offset, &crate::notifier::consumer_name(Some(part))))
                    }
                };
                let svc: Arc<dyn likewise_service::ports::NotificationsPublisher> = svc.clone();
                let run = crate::notifier::run_shared(svc, opts.notifier.clone(), open, rx, shutdown.clone());
                tasks.push(tokio::spawn(run));
                Arc::new(PartsChannel(commands))
            }
            Consumer::Trending => {
                let (commands, rx) = tokio::sync::mpsc::unbounded_channel();
                let shared = shared_reader(&ports.stream, likewise_service::trending::TRENDING);
                let open = move |part: u16, offset: u64| {
                    let view = shared.view(part, offset, &likewise_service::trending::part_name(part));
                    async move { Ok(view) }
                };
                // Folded once a second: the stream has no in-memory tail to keep up with, and
                // every fold is a pull from JetStream.
                let d = crate::trending::TrendingOptions::default();
                let topts = crate::trending::TrendingOptions { follow_every: d.save_every, ..d };
                let snapshots = svc.stores().snapshots.clone();
                let run = crate::trending::run_shared(snapshots, topts, open, rx, shutdown.clone());
                tasks.push(tokio::spawn(run));
                Arc::new(PartsChannel(commands))
            }
            Consumer::Integrity | Consumer::Export => {
                tracing::error!(consumer = ?c, "not a partitioned consumer");
                continue;
            }
        };
        tasks.push(tokio::spawn(parts::shared(
            ports.leases.clone(),
            kind,
            PARTITIONS as u16,
            shutdown.clone(),
            work,
        )));
    }
    // The others, each lease's together.
    let running: Vec<Consumer> = running.into_iter().filter(|c| c.partitioned().is_none()).collect();
    let mut names: Vec<LeaseName> = Vec::new();
    for c in &running {
        if !names.contains(&c.lease()) {
            names.push(c.lease());
        }
    }
    for name in names {
        let members: Vec<Consumer> = running.iter().copied().filter(|c| c.lease() == name).collect();
        let (svc, p, opts) = (svc.clone(), ports.clone(), opts.clone());
        tasks.push(tokio::spawn(lease::leased(ports.leases.clone(), name, shutdown.clone(), move |stop| {
            let (svc, p, opts, members) = (svc.clone(), p.clone(), opts.clone(), members.clone());
            async move {
                join_all(members.into_iter().map(|c| consumer(c, &svc, &p, &opts, stop.clone()))).await;
            }
        })));
    }
    tasks
}

/// The one stream reader of this process for the partitions of consumer `name` it holds
/// ([`shared_log`]). Its stream consumer's name is this process's own: a process starting
/// removes the earlier consumers of its name, and must not remove another process's.
fn shared_reader(
    stream: &Arc<dyn likewise_core::ports::cluster::EventStream>,
    name: &str,
) -> Arc<shared_log::SharedLog> {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let own = format!("{name}.shared-{:x}{nanos:08x}", std::process::id());
    let stream = stream.clone();
    shared_log::SharedLog::new(
        Box::new(move |offset| {
            let (stream, own) = (stream.clone(), own.clone());
            Box::pin(async move { stream.consumer(&own, Scope::All, offset).await })
        }),
        shared_log::by_post,
    )
}

/// Consumer `c` on the stream until `stop` flips, or until it cannot start (the lease's
/// holder starts it again).
async fn consumer(
    c: Consumer,
    svc: &Arc<Engagement>,
    p: &ClusterPorts,
    opts: &WorkerOptions,
    stop: watch::Receiver<bool>,
) {
    match c {
        Consumer::Notifier => notifier(svc, p, opts.notifier.clone(), stop).await,
        Consumer::Trending => trending(svc, p, stop).await,
        Consumer::Integrity => integrity(svc, p, opts.integrity.clone(), stop).await,
        Consumer::Export => {
            if let Some(e) = &opts.export {
                export(svc, p, e.clone(), stop).await
            }
        }
    }
}

/// A partitioned consumer's partitions held by this process, all run by one loop
/// ([`crate::notifier::run_shared`], [`crate::trending::run_shared`]), which these commands
/// reach.
struct PartsChannel(tokio::sync::mpsc::UnboundedSender<crate::notifier::PartCommand>);

#[async_trait::async_trait]
impl parts::SharedWork for PartsChannel {
    async fn take(&self, parts: &[u16]) {
        let _ = self.0.send(crate::notifier::PartCommand::Take(parts.to_vec()));
    }

    async fn give(&self, parts: &[u16]) {
        let (done, given) = tokio::sync::oneshot::channel();
        // A loop that ended (shutdown) writes nothing any more: no answer is needed.
        if self.0.send(crate::notifier::PartCommand::Give(parts.to_vec(), done)).is_ok() {
            let _ = given.await;
        }
    }
}

/// The notifier of every event on the stream, from its stored offset.
async fn notifier(
    svc: &Arc<Engagement>,
    p: &ClusterPorts,
    opts: NotifierOptions,
    stop: watch::Receiver<bool>,
) {
    let log = async {
        let offset = crate::notifier::Notifier::stored_offset(svc).await?;
        p.stream.consumer(crate::notifier::NOTIFIER, Scope::All, offset).await
    }
    .await;
    match log {
        Ok(log) => crate::notifier::run_with(svc.clone(), opts, log, stop).await,
        Err(e) => {
            tracing::error!(error = %e, "notifier not started");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// The export on the stream, from its stored offset.
async fn export(
    svc: &Engagement,
    p: &ClusterPorts,
    export: crate::export::Export,
    stop: watch::Receiver<bool>,
) {
    let counters = svc.stores().counters.clone();
    let log = async {
        let offset = counters.offset(crate::export::EXPORT).await?;
        p.stream.consumer(crate::export::EXPORT, Scope::All, offset).await
    }
    .await;
    match log {
        Ok(log) => crate::export::run(log, counters, export.sink, export.opts, stop).await,
        Err(e) => {
            tracing::error!(error = %e, "export not started");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// Wait a second before starting again, unless the stop flipped: `false` to give up.
async fn retry_later(stop: &watch::Receiver<bool>) -> bool {
    tokio::time::sleep(Duration::from_secs(1)).await;
    !*stop.borrow()
}

/// The trending consumer on the stream, from its snapshot, until `stop` flips.
async fn trending(svc: &Engagement, p: &ClusterPorts, stop: watch::Receiver<bool>) {
    let snapshots = svc.stores().snapshots.clone();
    loop {
        let started = async {
            let (offset, state) = crate::trending::load(&*snapshots).await?;
            let log = p.stream.consumer(likewise_service::trending::TRENDING, Scope::All, offset).await?;
            Ok::<_, likewise_core::StoreError>((log, (offset, state)))
        }
        .await;
        match started {
            Ok((log, start)) => {
                // Folded once a round: the stream has no in-memory tail to keep up with, and
                // every fold is a pull from JetStream.
                // Saved every 10 s while idle: each save is a transaction on shard 0.
                let d = crate::trending::TrendingOptions::default();
                let opts = crate::trending::TrendingOptions {
                    follow_every: d.save_every,
                    idle_save_every: Duration::from_secs(10),
                    ..d
                };
                return crate::trending::run(log, snapshots, start, opts, stop).await;
            }
            Err(e) => tracing::error!(error = %e, "trending not started"),
        }
        if !retry_later(&stop).await {
            return;
        }
    }
}

/// The integrity consumer on the stream, from its snapshot, until `stop` flips.
async fn integrity(
    svc: &Engagement,
    p: &ClusterPorts,
    opts: crate::integrity::IntegrityWorkerOptions,
    stop: watch::Receiver<bool>,
) {
    let ports = crate::integrity::ports(svc);
    loop {
        let started = async {
            let (offset, state) = crate::integrity::load(&*ports.snapshots).await?;
            let log = p.stream.consumer(likewise_service::integrity::INTEGRITY, Scope::All, offset).await?;
            Ok::<_, likewise_core::StoreError>((log, (offset, state)))
        }
        .await;
        match started {
            Ok((log, start)) => {
                // Folded once a round, as trending (above).
                let opts =
                    crate::integrity::IntegrityWorkerOptions { follow_every: opts.every, ..opts.clone() };
                return crate::integrity::run(log, ports, start, opts, stop).await;
            }
            Err(e) => tracing::error!(error = %e, "integrity not started"),
        }
        if !retry_later(&stop).await {
            return;
        }
    }
}

/// Start the API role's own consumer: the top-comments refresher, fed by the aggregators'
/// commits on the cluster bus (after the counts they change, so re-ranking sees them).
pub fn spawn_api(svc: &Arc<Engagement>, shutdown: &watch::Receiver<bool>) -> Vec<JoinHandle<()>> {
    let log: Arc<dyn EventLog> = svc.ranking_events();
    vec![tokio::spawn(crate::ranker::run(
        svc.clone(),
        crate::ranker::RankerOptions::default(),
        log,
        shutdown.clone(),
    ))]
}
