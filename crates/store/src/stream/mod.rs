//! The event stream on NATS JetStream (scale-out deployments).
//!
//! - One stream per deployment, `<PREFIX>_EVENTS`, subjects `<prefix>.events.<shard>.<part>`
//!   where `part = post % PARTITIONS`: all of a post's events travel on one subject, in
//!   outbox order, and each PostgreSQL shard's events can be consumed on their own.
//! - [`relay`]: publishes each shard's outbox rows in order, the row's `<shard>-<seq>` as the
//!   JetStream message ID (the server drops a re-publish inside the duplicate window), and
//!   records the acknowledged stream sequence on the row.
//! - A message carries the events of one outbox row, packed; every event of a message has the
//!   message's stream sequence as its position (consumers commit whole messages).
//! - [`log`]: a durable pull consumer with explicit (cumulative) acks, seen through the
//!   [`EventLog`] port, so the same workers (aggregator, notifier, ranker) run on the
//!   embedded log and on the stream. Positions are stream sequences.

pub mod log;
pub mod relay;

use async_nats::jetstream;
use async_trait::async_trait;
use likewise_core::event::Event;
use likewise_core::ports::EventLog;
use likewise_core::{StoreError, StoreResult};
use std::time::Duration;

/// Subjects per shard: a post's events go to `post % PARTITIONS`.
pub const PARTITIONS: u64 = 64;

/// Map a NATS error to a store error.
pub(crate) fn nats_err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Engine(format!("nats: {e}"))
}

/// Connection to the deployment's event stream.
#[derive(Clone)]
pub struct EventStream {
    /// The core NATS client (also used for live fan-out between nodes).
    pub client: async_nats::Client,
    /// The JetStream context.
    pub js: jetstream::Context,
    /// Subject prefix (`likewise` by default).
    pub prefix: String,
    /// The stream's name.
    pub stream_name: String,
}

/// Stream settings.
#[derive(Debug, Clone)]
pub struct StreamOptions {
    /// NATS server URL.
    pub url: String,
    /// Prefix of subjects, stream and consumer names (tests isolate runs with it).
    pub prefix: String,
    /// How long events are kept in the stream.
    pub max_age: Duration,
    /// Window in which a re-published message ID is dropped as a duplicate.
    pub duplicate_window: Duration,
}

impl Default for StreamOptions {
    fn default() -> Self {
        StreamOptions {
            url: "nats://127.0.0.1:4222".into(),
            prefix: "likewise".into(),
            max_age: Duration::from_secs(7 * 24 * 3600),
            duplicate_window: Duration::from_secs(120),
        }
    }
}

/// Stream and consumer names allow letters, digits, `-` and `_` only.
pub fn name_part(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

impl EventStream {
    /// Connect and make sure the stream exists.
    pub async fn connect(opts: &StreamOptions) -> StoreResult<Self> {
        let client = async_nats::ConnectOptions::new()
            .name("likewise")
            .connection_timeout(Duration::from_secs(5))
            .connect(opts.url.as_str())
            .await
            .map_err(|e| StoreError::Engine(format!("cannot reach NATS at {}: {e}", opts.url)))?;
        let js = jetstream::new(client.clone());
        let prefix = opts.prefix.clone();
        let stream_name = format!("{}_EVENTS", name_part(&prefix).to_uppercase());
        js.get_or_create_stream(jetstream::stream::Config {
            name: stream_name.clone(),
            subjects: vec![format!("{prefix}.events.>")],
            max_age: opts.max_age,
            duplicate_window: opts.duplicate_window,
            storage: jetstream::stream::StorageType::File,
            ..Default::default()
        })
        .await
        .map_err(nats_err)?;
        Ok(EventStream { client, js, prefix, stream_name })
    }

    /// The subject of one partition of a shard's events.
    pub fn partition_subject(&self, shard: usize, part: u64) -> String {
        format!("{}.events.{shard}.{part}", self.prefix)
    }

    /// Every event of one shard.
    pub fn shard_filter(&self, shard: usize) -> String {
        format!("{}.events.{shard}.*", self.prefix)
    }

    /// Every event.
    pub fn all_filter(&self) -> String {
        format!("{}.events.>", self.prefix)
    }

    /// The last stream sequence (0 when empty).
    pub async fn head(&self) -> StoreResult<u64> {
        let mut s = self.js.get_stream(&self.stream_name).await.map_err(nats_err)?;
        Ok(s.info().await.map_err(nats_err)?.state.last_sequence)
    }

    /// Delete the stream and everything in it (tests clean up with it).
    pub async fn delete(&self) -> StoreResult<()> {
        self.js.delete_stream(&self.stream_name).await.map_err(nats_err)?;
        Ok(())
    }
}

/// A log with nothing in it: an aggregator over it only reconciles (`likewise reconcile` on
/// the PostgreSQL backend, where the stream's events are the running workers' business).
pub struct EmptyLog;

#[async_trait]
impl EventLog for EmptyLog {
    async fn read_after(&self, _after: u64, _max: usize) -> StoreResult<Vec<Event>> {
        Ok(Vec::new())
    }
    async fn head(&self) -> StoreResult<u64> {
        Ok(0)
    }
    async fn truncate(&self, _upto: u64) -> StoreResult<u64> {
        Ok(0)
    }
}

/// The `events` port of a multi-shard PostgreSQL store: there is no single ordered log to
/// read directly; consumers read the stream ([`log::StreamLog`]).
pub struct NoDirectLog;

#[async_trait]
impl EventLog for NoDirectLog {
    async fn read_after(&self, _after: u64, _max: usize) -> StoreResult<Vec<Event>> {
        Err(StoreError::Engine("a sharded PostgreSQL store is read through the event stream".into()))
    }
    async fn head(&self) -> StoreResult<u64> {
        Err(StoreError::Engine("a sharded PostgreSQL store is read through the event stream".into()))
    }
    async fn truncate(&self, _upto: u64) -> StoreResult<u64> {
        Ok(0)
    }
}
