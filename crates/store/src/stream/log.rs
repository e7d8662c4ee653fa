//! A durable JetStream pull consumer seen as an [`EventLog`].
//!
//! `read_after(after, n)` returns the delivered-but-uncommitted messages past `after`, then
//! fetches more without waiting, with the stream sequence as each event's `seq`. A consumer
//! calls `committed(upto)` once its effects are stored; only then are the messages
//! acknowledged (cumulatively: `AckPolicy::All`) and forgotten, so a failed commit re-reads
//! the same events from the same position.
//!
//! The authoritative position of a consumer is the offset it commits together with its
//! effects (in PostgreSQL). On start the durable consumer is re-created at that offset + 1, so
//! messages delivered but not applied before a crash come again, in order, and nothing is
//! skipped or applied twice. Acks keep the server's view (pending counts, redelivery timers)
//! in step for operators.

use super::{EventStream, name_part, nats_err};
use crate::postgres::outbox::unpack;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use async_trait::async_trait;
use futures::StreamExt;
use likewise_core::StoreResult;
use likewise_core::event::Event;
use likewise_core::ports::EventLog;
use std::time::Duration;
use tokio::sync::Mutex;

/// A consumer's view of the stream.
pub struct StreamLog {
    stream: EventStream,
    consumer: PullConsumer,
    /// Delivered messages not acknowledged yet, by stream sequence (ascending).
    delivered: Mutex<Vec<(u64, async_nats::jetstream::Message)>>,
}

impl StreamLog {
    /// A durable consumer `name` of the events matching `filter`, positioned after `offset`.
    pub async fn durable(stream: &EventStream, name: &str, filter: String, offset: u64) -> StoreResult<Self> {
        let durable = format!("{}_{}", name_part(&stream.prefix), name_part(name));
        let s = stream.js.get_stream(&stream.stream_name).await.map_err(nats_err)?;
        // Re-position from the committed offset (see the module docs). Deleting a consumer
        // that does not exist yet is fine.
        let _ = s.delete_consumer(&durable).await;
        let consumer = s
            .create_consumer(pull::Config {
                durable_name: Some(durable.clone()),
                filter_subject: filter,
                deliver_policy: DeliverPolicy::ByStartSequence { start_sequence: offset + 1 },
                ack_policy: AckPolicy::All,
                ack_wait: Duration::from_secs(60),
                max_ack_pending: 1_000_000,
                ..Default::default()
            })
            .await
            .map_err(nats_err)?;
        Ok(StreamLog { stream: stream.clone(), consumer, delivered: Mutex::new(Vec::new()) })
    }
}

#[async_trait]
impl EventLog for StreamLog {
    async fn read_after(&self, after: u64, max: usize) -> StoreResult<Vec<Event>> {
        let max = max.clamp(1, 10_000);
        let mut delivered = self.delivered.lock().await;
        // Delivered but not committed yet: served again (a failed commit retries from `after`).
        let mut out = Vec::new();
        for (seq, m) in delivered.iter().filter(|(s, _)| *s > after) {
            if out.len() >= max {
                break;
            }
            out.extend(unpack(&m.payload, |_| *seq)?);
        }
        if out.len() < max {
            // Messages hold many events: ask for few; the caller loops while it gets some.
            let msgs = (max - out.len()).div_ceil(64).clamp(1, 256);
            let mut batch = self.consumer.fetch().max_messages(msgs).messages().await.map_err(nats_err)?;
            while let Some(m) = batch.next().await {
                let m = m.map_err(nats_err)?;
                let seq = m.info().map_err(nats_err)?.stream_sequence;
                if delivered.last().is_some_and(|(s, _)| *s >= seq) {
                    continue; // a redelivery of something still buffered
                }
                if seq > after {
                    out.extend(unpack(&m.payload, |_| seq)?);
                }
                delivered.push((seq, m));
            }
        }
        if delivered.len() > 1_000_000 {
            tracing::warn!(buffered = delivered.len(), "stream consumer holds many uncommitted events");
        }
        Ok(out)
    }

    async fn committed(&self, upto: u64) -> StoreResult<()> {
        let mut delivered = self.delivered.lock().await;
        if let Some(pos) = delivered.iter().rposition(|(seq, _)| *seq <= upto) {
            // AckPolicy::All: acknowledging the last one acknowledges everything before it.
            delivered[pos].1.ack().await.map_err(nats_err)?;
            delivered.drain(..=pos);
        }
        Ok(())
    }

    async fn head(&self) -> StoreResult<u64> {
        self.stream.head().await
    }

    async fn truncate(&self, _upto: u64) -> StoreResult<u64> {
        // The stream's max_age bounds retention.
        Ok(0)
    }
}
