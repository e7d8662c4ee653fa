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

/// What runs beside the HTTP server.
enum Mode {
    /// Everything in this process on the embedded store.
    Embedded { aggregator: Aggregator, notifier: likewise_workers::notifier::NotifierOptions },
    /// A role of a scaled-out deployment.
    Cluster { cluster: crate::scaleout::Cluster, api: bool, worker: bool, cfg: Box<Config> },
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
        let secret = secret::load_or_create(cfg.auth.secret.as_deref(), &cfg.store.data_dir, true)?;
        let stores = likewise_store::open(&cfg.store_config()).context("opening the store")?;
        let (svc, mode, reconcile) = if cfg.scaled_out() {
            let (stores, cluster) = crate::scaleout::connect(cfg, stores).await?;
            let svc = Engagement::new(stores, cfg.service_options());
            let role = cfg.server.role.as_str();
            let mode = Mode::Cluster {
                cluster,
                api: role != "worker",
                worker: role != "api",
                cfg: Box::new(cfg.clone()),
            };
            (svc, mode, ReconcileHandle::routed(Vec::new(), Arc::new(|_| 0)))
        } else {
            let svc = Engagement::new(stores, cfg.service_options());
            let (aggregator, reconcile) = Aggregator::new(svc.clone(), cfg.aggregator_options()).await?;
            let notifier = likewise_workers::notifier::NotifierOptions {
                hold: std::time::Duration::from_millis(cfg.notifications.hold_ms),
                ..Default::default()
            };
            (svc, Mode::Embedded { aggregator, notifier }, reconcile)
        };
        let listener = TcpListener::bind(&cfg.server.listen)
            .await
            .with_context(|| format!("binding {}", cfg.server.listen))?;
        let addr = listener.local_addr()?;
        let state = Arc::new(AppState {
            svc,
            keys: TokenKeys::new(&secret),
            cursors: CursorCodec::new(&secret),
            metrics,
            opts: cfg.http_options(),
        });
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
            Mode::Embedded { aggregator, notifier } => {
                let router = likewise_http::router_with(self.state.clone(), self.extra);
                run_embedded(self.listener, self.addr, self.state, router, aggregator, notifier, shutdown)
                    .await
            }
            Mode::Cluster { cluster, api, worker, cfg } => {
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
                    cluster,
                    api,
                    worker,
                    &cfg,
                    shutdown,
                )
                .await
            }
        }
    }
}

/// One role of a scaled-out deployment (see `crate::scaleout`).
#[allow(clippy::too_many_arguments)]
async fn run_cluster(
    listener: TcpListener,
    addr: SocketAddr,
    state: Arc<AppState>,
    router: axum::Router,
    cluster: crate::scaleout::Cluster,
    api: bool,
    worker: bool,
    cfg: &Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let svc = state.svc.clone();
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = vec![crate::scaleout::join_bus(&svc, &cluster, &stop_rx).await?];
    if worker {
        tasks.extend(crate::scaleout::spawn_workers(&svc, &cluster, cfg, &stop_rx));
    }
    if api {
        tasks.extend(crate::scaleout::spawn_api(&svc, &stop_rx));
        let svc = svc.clone();
        let mut ticker = likewise_workers::Ticker::new(std::time::Duration::from_secs(1), stop_rx.clone());
        tasks.push(tokio::spawn(async move {
            while ticker.next().await {
                svc.flush_deferred_pushes();
                if let Err(e) = svc.flush_views().await {
                    tracing::warn!(error = %e, "flushing view sketches failed");
                }
            }
        }));
    }
    tracing::info!(addr = %addr, api, worker, shards = cluster.pg.shard_count(), "likewise listening (scaled out)");
    let serve_opts = state.opts.serve.clone();
    drop(state);
    let served = serve_then_stop_writes(listener, router, serve_opts, &svc, &stop_tx, shutdown).await;
    for t in tasks {
        if let Err(e) = t.await {
            tracing::error!(error = %e, "task failed");
        }
    }
    if api && let Err(e) = svc.flush_views().await {
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
    notifier_opts: likewise_workers::notifier::NotifierOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    {
        let (stop_tx, stop_rx) = watch::channel(false);
        let agg = tokio::spawn(aggregator.run(stop_rx.clone()));
        let notifier = tokio::spawn(likewise_workers::notifier::run(
            state.svc.clone(),
            notifier_opts,
            stop_tx.subscribe(),
        ));
        let ranker = tokio::spawn(likewise_workers::ranker::run(
            state.svc.clone(),
            likewise_workers::ranker::RankerOptions::default(),
            stop_rx,
        ));
        let flusher = {
            let svc = state.svc.clone();
            let mut ticker =
                likewise_workers::Ticker::new(std::time::Duration::from_secs(1), stop_tx.subscribe());
            tokio::spawn(async move {
                while ticker.next().await {
                    svc.flush_deferred_pushes();
                    if let Err(e) = svc.flush_views().await {
                        tracing::warn!(error = %e, "flushing view sketches failed");
                    }
                }
            })
        };
        tracing::info!(addr = %addr, "likewise listening");
        let svc = state.svc.clone();
        let serve_opts = state.opts.serve.clone();
        drop(state);
        let served = serve_then_stop_writes(listener, router, serve_opts, &svc, &stop_tx, shutdown).await;
        if let Err(e) = agg.await {
            tracing::error!(error = %e, "aggregator task failed");
        }
        if let Err(e) = notifier.await {
            tracing::error!(error = %e, "notifier task failed");
        }
        if let Err(e) = ranker.await {
            tracing::error!(error = %e, "ranker task failed");
        }
        let _ = flusher.await;
        if let Err(e) = svc.flush_views().await {
            tracing::error!(error = %e, "final flush of view sketches failed");
        }
        svc.stores().close().context("persisting the store")?;
        tracing::info!("stopped cleanly");
        served.context("HTTP server failed")
    }
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
        closer.close_live_streams();
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
