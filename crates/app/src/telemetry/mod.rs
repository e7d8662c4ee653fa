//! Trace export (`[telemetry]`): spans of requests, group commits and consumer batches, sent
//! to an OpenTelemetry collector over OTLP/HTTP.
//!
//! The `tracing` spans of target [`likewise_core::trace::TARGET`] become OpenTelemetry spans
//! (`tracing-opentelemetry`). A request is sampled before its span is made: at
//! `sample_ratio`, unless the caller's `traceparent` decided; an unsampled request makes no
//! span at all. Finished spans go into a bounded queue and leave in batches from one task on the
//! runtime, never on a request's path: when the queue is full (the collector down or slow)
//! a span is dropped and counted, never waited for. [`Telemetry::shutdown`] sends what is
//! queued before the process exits.
//!
//! - [`otlp`]: the protobuf request body.

mod otlp;

use crate::config::TelemetryConfig;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use likewise_core::trace::{TARGET, TraceContext};
use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, Span, SpanData, SpanProcessor};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;

/// Most finished spans waiting for export; more are dropped (and counted).
const QUEUE: usize = 8_192;
/// Most spans in one export request.
const BATCH: usize = 512;
/// How long a finished span may wait for company before its batch is sent.
const LINGER: Duration = Duration::from_secs(1);
/// How long the collector may take to answer one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for the last batches.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// At most one warning about a failing collector per this period.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// The running trace export: hold it for the process's life, and [`Telemetry::shutdown`]
/// it on a clean stop.
pub struct Telemetry {
    provider: SdkTracerProvider,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

/// A tracing layer for the log subscriber (`crate::runtime::init_logging_with`).
pub type BoxedLayer = Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync>;

impl Telemetry {
    /// Start the export on `rt` when `cfg.otlp_endpoint` is set; also the layer that turns
    /// our spans into OpenTelemetry spans. Installs the hook of `likewise_core::trace`.
    pub fn start(
        cfg: &TelemetryConfig,
        rt: &tokio::runtime::Handle,
    ) -> anyhow::Result<Option<(Self, BoxedLayer)>> {
        let Some(url) = cfg.traces_url()? else { return Ok(None) };
        let resource = vec![
            KeyValue::new("service.name", cfg.service_name.clone()),
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        ];
        let (tx, rx) = mpsc::channel(QUEUE);
        let (stop, stopped) = oneshot::channel();
        let full = Arc::new(AtomicU64::new(0));
        let task = rt.spawn(export_loop(url, resource.clone(), rx, full.clone(), stopped));
        let provider = SdkTracerProvider::builder()
            .with_span_processor(Queue { tx, full })
            // Every span reaching the provider is sampled already: requests are sampled before
            // their span is made (`likewise_core::trace::request_span`), and every other span
            // is a child of a sampled context.
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)))
            .with_resource(Resource::builder_empty().with_attributes(resource).build())
            .build();
        let layer = tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("likewise"))
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_level(false)
            .with_target(false)
            .with_filter(tracing_subscriber::filter::Targets::new().with_target(TARGET, tracing::Level::INFO))
            .boxed();
        likewise_core::trace::install(Box::new(Hook { ratio: cfg.sample_ratio }));
        Ok(Some((Telemetry { provider, stop: Some(stop), task }, layer)))
    }

    /// Send what is queued (spans still open are not) and stop the export, within
    /// [`FLUSH_TIMEOUT`].
    pub async fn shutdown(mut self) {
        let _ = self.provider.shutdown();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if tokio::time::timeout(FLUSH_TIMEOUT, &mut self.task).await.is_err() {
            tracing::warn!("trace export did not finish sending its last spans in time");
            self.task.abort();
        }
    }
}

/// `likewise_core::trace`'s hook, over `tracing-opentelemetry`.
struct Hook {
    /// The share of new traces sampled (`telemetry.sample_ratio`).
    ratio: f64,
}

impl likewise_core::trace::Tracer for Hook {
    fn current(&self) -> Option<TraceContext> {
        let cx = tracing::Span::current().context();
        let span = cx.span();
        let sc = span.span_context();
        if !sc.is_valid() || !sc.is_sampled() {
            return None;
        }
        TraceContext::new(sc.trace_id().to_bytes(), sc.span_id().to_bytes(), sc.trace_flags().to_u8())
    }

    fn sample_root(&self) -> bool {
        self.ratio >= 1.0 || (self.ratio > 0.0 && rand::random::<f64>() < self.ratio)
    }

    fn adopt(&self, span: &tracing::Span, parent: TraceContext, links: &[TraceContext]) {
        let _ = span.set_parent(Context::new().with_remote_span_context(span_context(parent)));
        for l in links {
            span.add_link(span_context(*l));
        }
    }
}

fn span_context(c: TraceContext) -> SpanContext {
    SpanContext::new(
        TraceId::from_bytes(c.trace_id),
        SpanId::from_bytes(c.span_id),
        TraceFlags::new(c.flags),
        true,
        TraceState::default(),
    )
}

/// The span processor: finished sampled spans into the bounded queue, never blocking.
#[derive(Debug)]
struct Queue {
    tx: mpsc::Sender<SpanData>,
    /// Spans dropped on a full queue since the export loop last logged them.
    full: Arc<AtomicU64>,
}

impl SpanProcessor for Queue {
    fn on_start(&self, _: &mut Span, _: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        if self.tx.try_send(span).is_err() {
            metrics::counter!("likewise_trace_spans_dropped_total", "reason" => "queue_full").increment(1);
            self.full.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// Batch the queue's spans and post them until `stop`, then send what is left.
async fn export_loop(
    url: axum::http::Uri,
    resource: Vec<KeyValue>,
    mut rx: mpsc::Receiver<SpanData>,
    full: Arc<AtomicU64>,
    mut stop: oneshot::Receiver<()>,
) {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let mut outage = Outage::default();
    let mut batch = Vec::with_capacity(BATCH);
    let mut stopping = false;
    while !stopping {
        // The first span of a batch, then company for up to `LINGER`.
        tokio::select! {
            s = rx.recv() => match s {
                Some(s) => batch.push(s),
                None => stopping = true,
            },
            _ = &mut stop => stopping = true,
        }
        let until = tokio::time::Instant::now() + LINGER;
        while !stopping && batch.len() < BATCH {
            tokio::select! {
                s = rx.recv() => match s {
                    Some(s) => batch.push(s),
                    None => stopping = true,
                },
                _ = tokio::time::sleep_until(until) => break,
                _ = &mut stop => stopping = true,
            }
        }
        if stopping {
            while let Ok(s) = rx.try_recv() {
                batch.push(s);
            }
        }
        // Spans the full queue dropped (a slow or hung collector) are logged as an outage too.
        let dropped_full = full.swap(0, Ordering::Relaxed);
        if dropped_full > 0 {
            outage.failed("the span queue was full (the collector is slow or down)", dropped_full as usize);
        }
        for part in batch.chunks(BATCH) {
            let body = otlp::encode_request(&resource, "likewise", part);
            match post(&client, &url, body).await {
                Ok(()) => {
                    metrics::counter!("likewise_trace_spans_exported_total").increment(part.len() as u64);
                    outage.ended();
                }
                Err(e) => {
                    metrics::counter!("likewise_trace_spans_dropped_total", "reason" => "export_failed")
                        .increment(part.len() as u64);
                    outage.failed(&e, part.len());
                }
            }
        }
        batch.clear();
    }
}

type Client =
    hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

async fn post(client: &Client, url: &axum::http::Uri, body: Vec<u8>) -> Result<(), String> {
    let req = axum::http::Request::post(url.clone())
        .header("content-type", "application/x-protobuf")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let resp = tokio::time::timeout(REQUEST_TIMEOUT, client.request(req))
        .await
        .map_err(|_| "the collector did not answer in time".to_string())?
        .map_err(|e| format!("{e:?}"))?;
    let status = resp.status();
    // Read the answer whole, so the connection is reused.
    let _ = tokio::time::timeout(REQUEST_TIMEOUT, resp.into_body().collect()).await;
    if status.is_success() { Ok(()) } else { Err(format!("the collector answered {status}")) }
}

/// The log of a collector outage: one warning at most per [`WARN_EVERY`], saying how many
/// spans were dropped since the last one, and one line when exports go through again.
#[derive(Default)]
struct Outage {
    since: Option<Instant>,
    warned: Option<Instant>,
    dropped: u64,
}

impl Outage {
    fn failed(&mut self, error: &str, spans: usize) {
        if let Some(dropped) = self.failed_at(Instant::now(), spans) {
            tracing::warn!(error, dropped_spans = dropped, "trace export failed; dropping spans");
        }
    }

    /// Count `spans` dropped at `now`; the number to warn about when a warning is due.
    fn failed_at(&mut self, now: Instant, spans: usize) -> Option<u64> {
        self.since.get_or_insert(now);
        self.dropped += spans as u64;
        if self.warned.is_some_and(|w| now.duration_since(w) < WARN_EVERY) {
            return None;
        }
        self.warned = Some(now);
        Some(std::mem::take(&mut self.dropped))
    }

    fn ended(&mut self) {
        if let Some(since) = self.since.take() {
            tracing::info!(
                after_s = since.elapsed().as_secs(),
                dropped_spans_unlogged = std::mem::take(&mut self.dropped),
                "trace export works again"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_collector_is_warned_about_once_a_minute_with_what_was_dropped() {
        let mut o = Outage::default();
        let t0 = Instant::now();
        assert_eq!(o.failed_at(t0, 10), Some(10));
        assert_eq!(o.failed_at(t0 + Duration::from_secs(1), 5), None);
        assert_eq!(o.failed_at(t0 + Duration::from_secs(59), 5), None);
        assert_eq!(o.failed_at(t0 + WARN_EVERY, 1), Some(11));
        o.ended();
        assert_eq!((o.since, o.dropped), (None, 0));
        // A new outage within the minute is held back with the rest.
        assert_eq!(o.failed_at(t0 + WARN_EVERY + Duration::from_secs(2), 3), None);
        assert_eq!(o.failed_at(t0 + 2 * WARN_EVERY, 1), Some(4));
    }
}
