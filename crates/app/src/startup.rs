//! Wiring: open the store, build the service, start the workers and the HTTP server.
//! [`Application::build`] binds the listener (port 0 works, for tests);
//! [`Application::run_until_stopped`] serves until the shutdown future resolves, then drains:
//! in-flight requests finish, queued writes are committed and synced, the aggregator applies
//! the rest of the log, and the store is persisted.

use crate::config::Config;
use crate::secret;
use anyhow::Context;
use likewise_http::AppState;
use likewise_http::auth::TokenKeys;
use likewise_http::cursor::CursorCodec;
use likewise_service::Engagement;
use likewise_workers::cluster::{self, ClusterPorts};
use likewise_workers::consumers::WorkerOptions;
use likewise_workers::single_node::{self, Tasks};
use likewise_workers::{Aggregator, ReconcileHandle};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Live heap bytes, when the binary's global allocator counts them (set by `main`).
pub static HEAP_BYTES: OnceLock<fn() -> usize> = OnceLock::new();

/// The process-wide Prometheus recorder (installed once; later calls reuse it).
pub fn metrics_handle() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let latency = [
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                5.0,
            ];
            let sizes =
                [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0];
            PrometheusBuilder::new()
                .set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Suffix("_seconds".into()),
                    &latency,
                )
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        metrics_exporter_prometheus::Matcher::Full("likewise_group_commit_batch_size".into()),
                        &sizes,
                    )
                })
                .and_then(|b| b.install_recorder())
                .map_err(|e| tracing::warn!(error = %e, "metrics recorder not installed"))
                .ok()
                .inspect(|h| {
                    // `install_recorder` starts no upkeep: histogram samples pile up until
                    // something drains them, and with nobody scraping /metrics that is never
                    // (the soak found ~20 bytes per request, forever). Drain every 5 s. The
                    // live-heap gauge is refreshed every second (summing 16 counters).
                    let h = h.clone();
                    let heap = metrics::gauge!("likewise_heap_allocated_bytes");
                    let _ =
                        std::thread::Builder::new().name("likewise-metrics-upkeep".into()).spawn(move || {
                            for tick in 1u64.. {
                                std::thread::sleep(std::time::Duration::from_secs(1));
                                if let Some(bytes) = HEAP_BYTES.get() {
                                    heap.set(bytes() as f64);
                                }
                                if tick % 5 == 0 {
                                    h.run_upkeep();
                                }
                            }
                        });
                })
        })
        .clone()
}

/// Create `dir` if needed and check that this process can write in it, so an unusable data
/// directory is reported as such, with its path, before anything else tries to use it.
pub fn writable_dir(dir: &std::path::Path) -> anyhow::Result<()> {
    let denied = |e: &std::io::Error| e.kind() == std::io::ErrorKind::PermissionDenied;
    let probe = dir.join(".likewise-write-probe");
    let result = likewise_store::durable_dir::create_all(dir)
        .and_then(|()| std::fs::write(&probe, b""))
        .and_then(|()| std::fs::remove_file(&probe));
    match result {
        Ok(()) => Ok(()),
        Err(e) if denied(&e) => anyhow::bail!(
            "cannot write {}: permission denied (make it writable by this user, or choose another data directory)",
            dir.display()
        ),
        Err(e) => Err(e).with_context(|| format!("cannot write {}", dir.display())),
    }
}

/// Options of the background workers (the embedded process's, or a worker role's), with the
/// export's sink built from `[export]`.
pub fn worker_options(cfg: &Config) -> anyhow::Result<WorkerOptions> {
    Ok(WorkerOptions {
        export: crate::export::from_config(&cfg.export)?,
        key_retention: cfg.comments.idempotency_retention()?,
        notif_retention: likewise_workers::notif_retention::RetentionOptions {
            retain: cfg.notifications.retention()?,
            ..Default::default()
        },
        integrity: likewise_workers::integrity::IntegrityWorkerOptions {
            detect: cfg.integrity.options(),
            ..Default::default()
        },
        aggregator: cfg.aggregator_options(),
        notifier: likewise_workers::notifier::NotifierOptions {
            hold: std::time::Duration::from_millis(cfg.notifications.hold_ms),
            ..Default::default()
        },
        without: Vec::new(),
    })
}

/// What runs beside the HTTP server.
enum Mode {
    /// Everything in this process on the embedded store.
    Embedded { aggregator: Aggregator, workers: WorkerOptions },
    /// A role of a scaled-out deployment.
    Cluster { ports: ClusterPorts, api: bool, worker: bool, opts: WorkerOptions },
}

/// A built, bound, not yet running service.
pub struct Application {
    listener: TcpListener,
    addr: SocketAddr,
    state: Arc<AppState>,
    mode: Mode,
    reconcile: ReconcileHandle,
    /// Routes added to the API (the demo's).
    extra: Option<axum::Router<Arc<AppState>>>,
}

impl Application {
    /// Open everything and bind the listener.
    pub async fn build(cfg: &Config) -> anyhow::Result<Self> {
        // The recorder first: caches register their metric handles when they are built.
        let metrics = metrics_handle();
        if cfg.store.backend == "embedded" || cfg.auth.secret.is_none() {
            writable_dir(&cfg.store.data_dir)?;
        }
        let secret = secret::load_or_create(cfg.auth.secret.as_deref(), &cfg.store.data_dir, true)?;
        let keys = crate::tokens::verifying_keys(&cfg.auth, &secret)?;
        let engines = crate::engines::open(cfg).await?;
        let svc = Engagement::new(engines.stores, cfg.service_options());
        let (mode, reconcile) = match engines.cluster {
            Some(ports) => {
                let role = cfg.server.role.as_str();
                let mode = Mode::Cluster {
                    ports,
                    api: role != "worker",
                    worker: role != "api",
                    opts: worker_options(cfg)?,
                };
                (mode, ReconcileHandle::routed(Vec::new(), Arc::new(|_| 0)))
            }
            None => {
                let workers = worker_options(cfg)?;
                let (aggregator, reconcile) =
                    Aggregator::new(svc.clone(), workers.aggregator_options()).await?;
                (Mode::Embedded { aggregator, workers }, reconcile)
            }
        };
        let listener = likewise_http::server::bind(&cfg.server.listen)
            .await
            .with_context(|| format!("binding {}", cfg.server.listen))?;
        let addr = listener.local_addr()?;
        let state =
            Arc::new(AppState::new(svc, keys, CursorCodec::new(&secret), metrics, cfg.http_options()));
        Ok(Application { listener, addr, state, mode, reconcile, extra: None })
    }

    /// Add routes to the API (`likewise demo` adds its demo-only routes).
    pub fn with_routes(mut self, routes: axum::Router<Arc<AppState>>) -> Self {
        self.extra = Some(routes);
        self
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Token keys (tests mint tokens with them).
    pub fn keys(&self) -> TokenKeys {
        self.state.keys.clone()
    }

    /// Ask the running aggregator to reconcile a target.
    pub fn reconcile_handle(&self) -> ReconcileHandle {
        self.reconcile.clone()
    }

    /// The service (tests inspect caches through it).
    pub fn service(&self) -> Arc<Engagement> {
        self.state.svc.clone()
    }

    /// Serve until `shutdown` resolves, then drain and persist.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        match self.mode {
            Mode::Embedded { aggregator, workers } => {
                let router = likewise_http::router_with(self.state.clone(), self.extra);
                run_embedded(self.listener, self.addr, self.state, router, aggregator, workers, shutdown)
                    .await
            }
            Mode::Cluster { ports, api, worker, opts } => {
                let router = if api {
                    likewise_http::router_with(self.state.clone(), self.extra)
                } else {
                    likewise_http::ops_router(self.state.clone())
                };
                run_cluster(
                    self.listener,
                    self.addr,
                    self.state,
                    router,
                    ports,
                    (api, worker),
                    &opts,
                    shutdown,
                )
                .await
            }
        }
    }
}

/// One role of a scaled-out deployment (see `likewise_workers::cluster`): `(api, worker)`
/// says which halves this process runs.
#[allow(clippy::too_many_arguments)]
async fn run_cluster(
    listener: TcpListener,
    addr: SocketAddr,
    state: Arc<AppState>,
    router: axum::Router,
    ports: ClusterPorts,
    (api, worker): (bool, bool),
    opts: &WorkerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let svc = state.svc.clone();
    let (stop_tx, stop_rx) = watch::channel(false);
    let bus =
        cluster::bus::join(&svc, ports.bus.clone(), &stop_rx).await.context("joining the cluster bus")?;
    let mut tasks = Tasks::default();
    tasks.push("bus", bus);
    if worker {
        tasks.extend("worker", cluster::spawn_workers(&svc, &ports, opts, &stop_rx));
    }
    if api {
        tasks.extend("api", cluster::spawn_api(&svc, &stop_rx));
        tasks.push("flusher", single_node::flusher(&svc, stop_rx.clone()));
    }
    tracing::info!(addr = %addr, api, worker, shards = ports.outbox.shard_count(), "likewise listening (scaled out)");
    let serve_opts = state.opts.serve.clone();
    drop(state);
    let served = serve_then_stop_writes(listener, router, serve_opts, &svc, &stop_tx, shutdown).await;
    tasks.join().await;
    if api && let Err(e) = svc.views.flush().await {
        tracing::error!(error = %e, "final flush of view sketches failed");
    }
    svc.stores().close().context("closing the store")?;
    tracing::info!("stopped cleanly");
    served.context("HTTP server failed")
}

/// The whole service in this process on the embedded store.
async fn run_embedded(
    listener: TcpListener,
    addr: SocketAddr,
    state: Arc<AppState>,
    router: axum::Router,
    aggregator: Aggregator,
    workers: WorkerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let svc = state.svc.clone();
    let (stop_tx, stop_rx) = watch::channel(false);
    let tasks = single_node::spawn(&svc, aggregator, workers, &stop_rx);
    tracing::info!(addr = %addr, "likewise listening");
    let serve_opts = state.opts.serve.clone();
    drop(state);
    let served = serve_then_stop_writes(listener, router, serve_opts, &svc, &stop_tx, shutdown).await;
    tasks.join().await;
    if let Err(e) = svc.views.flush().await {
        tracing::error!(error = %e, "final flush of view sketches failed");
    }
    svc.stores().close().context("persisting the store")?;
    tracing::info!("stopped cleanly");
    served.context("HTTP server failed")
}

/// Serve until `shutdown` (ending live streams so the drain can finish), then commit the
/// queued writes and tell the background tasks to drain: the first half of every graceful
/// stop, whatever runs beside the server.
async fn serve_then_stop_writes(
    listener: TcpListener,
    router: axum::Router,
    serve_opts: likewise_http::server::ServeOptions,
    svc: &Arc<Engagement>,
    stop_tx: &watch::Sender<bool>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let closer = svc.clone();
    let shutdown = async move {
        shutdown.await;
        closer.notifications.close_live_streams();
    };
    let served = likewise_http::serve_router(listener, router, serve_opts, shutdown).await;
    tracing::info!("HTTP drained; committing queued writes");
    svc.stores().writer.close();
    let _ = stop_tx.send(true);
    served
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutdown signal received");
}

#[cfg(test)]
mod tests {
    use super::*;
    use likewise_workers::Consumer;

    /// The aggregator holds the log's truncation for the consumers that run and for no other:
    /// one that is off would never move its offset, and the log would grow forever.
    #[test]
    fn the_log_is_held_for_the_consumers_that_run_and_no_other() {
        let held = |cfg: &Config, without: &[Consumer]| {
            let opts = WorkerOptions { without: without.to_vec(), ..worker_options(cfg).expect("options") };
            let held = opts.aggregator_options().hold_for;
            let running: Vec<&str> = opts.consumers().map(Consumer::name).collect();
            assert_eq!(held, running, "without {without:?}");
            held
        };
        let mut cfg = Config::default();
        assert_eq!(held(&cfg, &[]), ["notifications", "trending", "integrity"]);
        assert_eq!(held(&cfg, &[Consumer::Trending]), ["notifications", "integrity"]);
        assert_eq!(held(&cfg, &[Consumer::Trending, Consumer::Integrity]), ["notifications"]);
        // Brokers set but blank name no destination: no export runs.
        cfg.export.kafka_brokers = Some(" ".into());
        assert_eq!(held(&cfg, &[]), ["notifications", "trending", "integrity"]);
        #[cfg(feature = "kafka")]
        {
            cfg.export.kafka_brokers = Some("127.0.0.1:9".into());
            assert_eq!(held(&cfg, &[]), ["notifications", "trending", "integrity", "export"]);
            assert_eq!(held(&cfg, &[Consumer::Integrity]), ["notifications", "trending", "export"]);
            assert_eq!(held(&cfg, &[Consumer::Export]), ["notifications", "trending", "integrity"]);
        }
    }
}
