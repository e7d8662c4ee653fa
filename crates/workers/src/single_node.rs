//! Supervision of the single-node deployment's background work: everything `likewise serve`
//! runs beside its HTTP server on the embedded store, started together and joined on stop.
//!
//! - the counter aggregator (it also applies reconciliation repairs);
//! - the notifier;
//! - the trending consumer and the integrity consumer (each from its saved snapshot);
//! - the event export, when a destination is configured;
//! - the top-comments ranker;
//! - the expiry of comment creates' `Idempotency-Key`s ([`crate::key_expiry`]);
//! - the retention of notification items ([`crate::notif_retention`]);
//! - the [`flusher`]: deferred live pushes and unique-view sketches, once a second.
//!
//! The consumers other systems read through (trending, integrity, the export) run on a
//! runtime of their own, at a lower CPU priority (`ConsumersRuntime`).
//!
//! Every task ends when the shutdown channel flips; [`Tasks::join`] waits for each in turn
//! and logs the ones that failed, so a graceful stop drains them all before the store is
//! persisted. The scaled-out roles are supervised by [`crate::cluster`] and share the
//! [`flusher`].

use crate::Aggregator;
use crate::consumers::{Consumer, WorkerOptions};
use crate::ranker::RankerOptions;
use likewise_service::Engagement;
use likewise_service::ports::Flush;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Named background tasks, joined in start order, and the runtime of the consumers among
/// them (see [`ConsumersRuntime`]): dropped unjoined, they end as tasks of a dropped runtime do.
#[derive(Default)]
pub struct Tasks {
    tasks: Vec<(&'static str, JoinHandle<()>)>,
    consumers: Option<ConsumersRuntime>,
}

impl Tasks {
    /// Add a task under a name (the name is what a failure is logged with).
    pub fn push(&mut self, name: &'static str, task: JoinHandle<()>) {
        self.tasks.push((name, task));
    }

    /// Add unnamed tasks (a role's tasks, logged as `name`).
    pub fn extend(&mut self, name: &'static str, tasks: impl IntoIterator<Item = JoinHandle<()>>) {
        self.tasks.extend(tasks.into_iter().map(|t| (name, t)));
    }

    /// Start `task` on the consumers' runtime (started with the first one).
    fn push_consumer(
        &mut self,
        name: &'static str,
        task: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let rt = self.consumers.get_or_insert_with(ConsumersRuntime::start);
        let handle = match &rt.0 {
            Some(r) => r.spawn(task),
            None => tokio::spawn(task),
        };
        self.push(name, handle);
    }

    /// Wait for every task; a task that panicked is logged, not propagated, so the others
    /// still drain.
    pub async fn join(mut self) {
        for (name, task) in std::mem::take(&mut self.tasks) {
            if let Err(e) = task.await {
                tracing::error!(error = %e, task = name, "background task failed");
            }
        }
    }
}

/// The runtime of the consumers other systems read through (trending, integrity, the
/// export): two threads of its own at nice +10.
///
/// They fold and encode thousands of events at a time (trending's and integrity's windows,
/// the export's batches of JSON), and on the request runtime each such chunk delays the
/// request tasks queued behind it on its thread: with all three on, a hot post's storm ran at
/// 0.66-0.75x of its rate without them. A storm waits on fsync a good part of the time (a
/// third of the cores idle in a profile); at a lower priority they take that time rather than
/// the requests', and catch up when the storm ends.
struct ConsumersRuntime(Option<tokio::runtime::Runtime>);

impl ConsumersRuntime {
    fn start() -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("likewise-consumers")
            .on_thread_start(lower_priority)
            .enable_all()
            .build();
        match rt {
            Ok(rt) => ConsumersRuntime(Some(rt)),
            Err(e) => {
                // Without threads of their own they run with the requests, as they can.
                tracing::warn!(error = %e, "cannot start the consumers' runtime; running them on the main one");
                ConsumersRuntime(None)
            }
        }
    }
}

impl Drop for ConsumersRuntime {
    fn drop(&mut self) {
        // Not blocking: this may drop inside the main runtime.
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// Start everything the single-node service runs beside its HTTP server: `aggregator` is
/// built from `opts.aggregator_options()`, so it holds the log for the consumers started here.
pub fn spawn(
    svc: &Arc<Engagement>,
    aggregator: Aggregator,
    opts: WorkerOptions,
    shutdown: &watch::Receiver<bool>,
) -> Tasks {
    let mut tasks = Tasks::default();
    tasks.push("aggregator", tokio::spawn(aggregator.run(shutdown.clone())));
    for c in opts.consumers() {
        match c {
            Consumer::Notifier => tasks.push(
                "notifier",
                tokio::spawn(crate::notifier::run(svc.clone(), opts.notifier.clone(), shutdown.clone())),
            ),
            Consumer::Trending => tasks.push_consumer("trending", trending(svc, shutdown.clone())),
            Consumer::Integrity => {
                tasks.push_consumer("integrity", integrity(svc, opts.integrity.clone(), shutdown.clone()))
            }
            Consumer::Export => {
                if let Some(export) = opts.export.clone() {
                    let stores = svc.stores();
                    tasks.push_consumer(
                        "export",
                        crate::export::run(
                            stores.events.clone(),
                            stores.counters.clone(),
                            export.sink,
                            export.opts,
                            shutdown.clone(),
                        ),
                    );
                }
            }
        }
    }
    tasks.push(
        "ranker",
        // Fed by the aggregator's commits (after the counts and the rank index it wrote), like
        // an API node's: the rankings it refreshes are a cache, with no offset to keep.
        tokio::spawn(crate::ranker::run(
            svc.clone(),
            RankerOptions::default(),
            svc.ranking_events(),
            shutdown.clone(),
        )),
    );
    let keys = svc.stores().idempotency.clone();
    tasks
        .push("key_expiry", tokio::spawn(crate::key_expiry::run(keys, opts.key_retention, shutdown.clone())));
    tasks.push(
        "notif_retention",
        tokio::spawn(crate::notif_retention::run(
            svc.stores().notifications.clone(),
            0,
            opts.notif_retention,
            shutdown.clone(),
        )),
    );
    tasks.push("flusher", flusher(svc, shutdown.clone()));
    tasks
}

/// The trending consumer, from its saved state.
fn trending(svc: &Arc<Engagement>, stop: watch::Receiver<bool>) -> impl Future<Output = ()> + Send + 'static {
    let stores = svc.stores();
    let (log, snapshots) = (stores.events.clone(), stores.snapshots.clone());
    async move {
        match crate::trending::load(&*snapshots).await {
            Ok(start) => crate::trending::run(log, snapshots, start, Default::default(), stop).await,
            Err(e) => tracing::error!(error = %e, "trending not started"),
        }
    }
}

/// The integrity consumer, from its saved state.
fn integrity(
    svc: &Arc<Engagement>,
    opts: crate::integrity::IntegrityWorkerOptions,
    stop: watch::Receiver<bool>,
) -> impl Future<Output = ()> + Send + 'static {
    let (log, ports) = (svc.stores().events.clone(), crate::integrity::ports(svc));
    async move {
        match crate::integrity::load(&*ports.snapshots).await {
            Ok(start) => crate::integrity::run(log, ports, start, opts, stop).await,
            Err(e) => tracing::error!(error = %e, "integrity not started"),
        }
    }
}

/// Give the calling thread nice +10 (Linux: per thread). Failing changes nothing but priority.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    if let Err(e) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 10) {
        tracing::warn!(error = %e, "cannot lower the consumers' thread priority");
    }
}

/// Once a second: send the live pushes deferred by the per-recipient limit, and write the
/// unique-view sketches. Ends on shutdown; the caller makes the final view flush after the
/// HTTP server drained (views recorded meanwhile would otherwise be lost).
pub fn flusher<S: Flush + ?Sized + 'static>(svc: &Arc<S>, stop: watch::Receiver<bool>) -> JoinHandle<()> {
    let svc = svc.clone();
    let mut ticker = crate::Ticker::new(Duration::from_secs(1), stop);
    tokio::spawn(async move {
        while ticker.next().await {
            svc.flush_deferred_pushes();
            if let Err(e) = svc.flush_views().await {
                tracing::warn!(error = %e, "flushing view sketches failed");
            }
        }
    })
}
