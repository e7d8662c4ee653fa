//! The Kafka sink: an idempotent librdkafka producer (`rdkafka`).
//!
//! Why rdkafka: it is the client the Kafka ecosystem runs in production (idempotence,
//! retries, batching, every broker version), where the pure-Rust clients lack an idempotent
//! producer. It is compiled from source (no system library needed) and only with the `kafka`
//! feature.
//!
//! A batch is enqueued whole (waiting for queue room when full), then the sink waits until
//! the producer holds no message of it: the batch is acknowledged only when none failed, with
//! `acks=all`. On any failure the producer is dropped and rebuilt for the next attempt: an
//! idempotent producer that hit a fatal error refuses further sends, and the caller re-sends
//! the whole batch (duplicates carry the same `event_id`).
//!
//! Delivery reports come for failures only (`delivery.report.only.error`), counted by the
//! producer's context, and no future per message: a report per message (a channel, a future
//! and its wake-up each) cost the export a sixth of its CPU in a storm (docs/benchmarks.md).
//! Why the count is enough: librdkafka counts a message as outstanding until its delivery
//! report has been served (its callback runs before the message is released), so once
//! nothing is outstanding every failure of the batch has been counted.

use super::{Message, Sink, SinkError};
use async_trait::async_trait;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientConfig, ClientContext};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// Where and how to publish.
#[derive(Debug, Clone)]
pub struct KafkaOptions {
    /// `host:port,...`
    pub brokers: String,
    /// The topic (default `likewise.events`).
    pub topic: String,
    /// How long one message may take to be acknowledged before the batch fails.
    pub message_timeout: Duration,
    /// Further librdkafka producer settings (`compression.type`, `security.protocol`, ...).
    pub extra: Vec<(String, String)>,
}

/// How often librdkafka may speak at warning level or above: with the broker down it logs a
/// failed connection several times a second, and the export logs the outage itself (once
/// when it starts, once when it ends).
const LIBRDKAFKA_LOG_EVERY: Duration = Duration::from_secs(60);

/// A rate limiter for log lines: one per interval, reporting how many it held back.
#[derive(Debug)]
struct Quiet {
    every: Duration,
    /// When a line was last let through, and the lines held back since.
    state: std::sync::Mutex<(Option<Instant>, u64)>,
}

impl Quiet {
    fn new(every: Duration) -> Self {
        Quiet { every, state: std::sync::Mutex::new((None, 0)) }
    }

    /// `Some(lines held back since the last one)` when a line may be logged at `now`.
    fn admit(&self, now: Instant) -> Option<u64> {
        let Ok(mut state) = self.state.lock() else { return None };
        let (last, held) = &mut *state;
        if last.is_some_and(|t| now.duration_since(t) < self.every) {
            *held += 1;
            return None;
        }
        *last = Some(now);
        Some(std::mem::take(held))
    }
}

/// Counts failed deliveries and keeps the first error (the producer's context); routes
/// librdkafka's log and errors through the sink's rate limiter.
struct Failures {
    count: AtomicU64,
    first: std::sync::Mutex<Option<String>>,
    /// Shared by the producers the sink creates (one per failed batch).
    quiet: Arc<Quiet>,
}

impl Failures {
    fn new(quiet: Arc<Quiet>) -> Self {
        Failures { count: AtomicU64::new(0), first: std::sync::Mutex::new(None), quiet }
    }
}

impl ClientContext for Failures {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Debug => tracing::debug!(target: "librdkafka", fac, "librdkafka: {message}"),
            RDKafkaLogLevel::Info | RDKafkaLogLevel::Notice => {
                tracing::debug!(target: "librdkafka", fac, "librdkafka: {message}")
            }
            _ => {
                if let Some(held) = self.quiet.admit(Instant::now()) {
                    tracing::warn!(target: "librdkafka", fac, held_back = held, "librdkafka: {message}");
                }
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        // Mostly "broker transport failure" / "all brokers down" while a broker is away: the
        // export's own outage warning and lag metrics say that.
        if let Some(held) = self.quiet.admit(Instant::now()) {
            tracing::warn!(target: "librdkafka", held_back = held, "librdkafka: {error}: {reason}");
        }
    }
}
impl ProducerContext for Failures {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.count.fetch_add(1, Ordering::SeqCst);
            if let Ok(mut first) = self.first.lock() {
                first.get_or_insert_with(|| e.to_string());
            }
        }
    }
}

type Inner = ThreadedProducer<Failures>;

/// The Kafka destination.
pub struct KafkaSink {
    config: ClientConfig,
    topic: String,
    message_timeout: Duration,
    producer: Mutex<Option<Inner>>,
    /// Rate limit of librdkafka's log, across producers.
    quiet: Arc<Quiet>,
}

/// How often the sink looks whether a batch is out (a cheap counter read).
const OUT_POLL: Duration = Duration::from_millis(1);

impl KafkaSink {
    /// A sink for `opts`; the producer is created (and its settings checked) now.
    pub fn new(opts: &KafkaOptions) -> Result<Self, SinkError> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &opts.brokers)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "5")
            // Compressed batches cost the broker less: for a storm of 1M likes a tansu broker
            // spent 1.1-1.2 s of CPU uncompressed, 0.3 s with lz4 (docs/benchmarks.md).
            .set("compression.type", "lz4")
            .set("message.timeout.ms", opts.message_timeout.as_millis().to_string())
            .set("delivery.report.only.error", "true")
            .set("client.id", "likewise-export");
        for (k, v) in &opts.extra {
            config.set(k, v);
        }
        let quiet = Arc::new(Quiet::new(LIBRDKAFKA_LOG_EVERY));
        let producer = create(&config, &quiet)?;
        Ok(KafkaSink {
            quiet,
            config,
            topic: opts.topic.clone(),
            message_timeout: opts.message_timeout,
            producer: Mutex::new(Some(producer)),
        })
    }

    async fn send_with(&self, producer: &Inner, batch: &[Message]) -> Result<(), SinkError> {
        let failures = &producer.context().count;
        let failed_before = failures.load(Ordering::SeqCst);
        let mut key = itoa::Buffer::new();
        for m in batch {
            let mut record = BaseRecord::to(&self.topic).key(key.format(m.post)).payload(&m.value);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                        // Room comes back as deliveries complete.
                        record = r;
                        tokio::time::sleep(OUT_POLL).await;
                    }
                    Err((e, _)) => return Err(SinkError(format!("kafka enqueue: {e}"))),
                }
            }
        }
        // Every message ends delivered or failed within its timeout; the bound only guards
        // against a producer that stopped reporting.
        let deadline = Instant::now() + self.message_timeout + Duration::from_secs(5);
        while producer.in_flight_count() > 0 {
            if Instant::now() > deadline {
                return Err(SinkError("kafka delivery: no report within the message timeout".into()));
            }
            tokio::time::sleep(OUT_POLL).await;
        }
        if failures.load(Ordering::SeqCst) != failed_before {
            let first = producer.context().first.lock().ok().and_then(|f| f.clone());
            return Err(SinkError(format!("kafka delivery: {}", first.unwrap_or_else(|| "failed".into()))));
        }
        Ok(())
    }
}

fn create(config: &ClientConfig, quiet: &Arc<Quiet>) -> Result<Inner, SinkError> {
    config
        .create_with_context(Failures::new(quiet.clone()))
        .map_err(|e| SinkError(format!("kafka producer: {e}")))
}

#[async_trait]
impl Sink for KafkaSink {
    async fn send(&self, batch: &[Message]) -> Result<(), SinkError> {
        let mut slot = self.producer.lock().await;
        if slot.is_none() {
            *slot = Some(create(&self.config, &self.quiet)?);
        }
        let producer = slot.as_ref().expect("just created");
        let result = self.send_with(producer, batch).await;
        if result.is_err() {
            // A fresh producer for the retry (see the module docs).
            *slot = None;
        }
        result
    }

    fn name(&self) -> &'static str {
        "kafka"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// librdkafka's burst of connection errors becomes one line per interval, the next one
    /// saying how many were held back.
    #[test]
    fn the_librdkafka_log_lets_one_line_through_per_interval() {
        let quiet = Quiet::new(Duration::from_secs(60));
        let t0 = Instant::now();
        assert_eq!(quiet.admit(t0), Some(0));
        let held = (1..=30).filter(|i| quiet.admit(t0 + Duration::from_millis(200 * i)).is_some()).count();
        assert_eq!(held, 0, "lines within the interval are held back");
        assert_eq!(quiet.admit(t0 + Duration::from_secs(60)), Some(30));
        assert_eq!(quiet.admit(t0 + Duration::from_secs(61)), None);
    }
}
