//! The event stream on NATS JetStream (scale-out deployments).
//!
//! - One stream per deployment, `<PREFIX>_EVENTS`, subjects `<prefix>.events.<shard>.<part>`
//!   where `part = post % PARTITIONS`: all of a post's events travel on one subject, in
//!   outbox order, and each PostgreSQL shard's events can be consumed on their own.
//! - [`JetStream`] is the `EventStream` port: the relay (`likewise-workers`) publishes each
//!   shard's outbox rows through it in order, the row's `<shard>-<seq>` as the JetStream
//!   message ID (the server drops a re-publish inside the duplicate window), and records the
//!   acknowledged stream sequence on the row.
//! - A message carries the events of one outbox row, packed; every event of a message has the
//!   message's stream sequence as its position (consumers commit whole messages).
//! - [`log`]: a durable pull consumer with explicit (cumulative) acks, seen through the
//!   [`EventLog`] port, so the same workers (aggregator, notifier, ranker) run on the
//!   embedded log and on the stream. Positions are stream sequences.
//! - [`bus`]: the cluster bus on NATS core (the `Bus` port).
//! - [`connect`]: URLs, TLS and credentials (user and password, token, creds file).

pub mod bus;
pub mod connect;
pub mod log;

use async_nats::jetstream;
use async_nats::jetstream::context::Publish;
use async_trait::async_trait;
use likewise_core::event::Event;
use likewise_core::ports::EventLog;
use likewise_core::ports::cluster::{EventStream, OutboxRow, Scope};
use likewise_core::{StoreError, StoreResult};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Subjects per shard: a post's events go to `post % PARTITIONS`.
pub const PARTITIONS: u64 = likewise_core::ports::cluster::PARTITIONS;

/// Map a NATS error to a store error.
pub(crate) fn nats_err(e: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>) -> StoreError {
    StoreError::backend("nats", e)
}

/// Connection to the deployment's event stream.
#[derive(Clone)]
pub struct JetStream {
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
#[derive(Clone)]
pub struct StreamOptions {
    /// NATS server URL(s): `nats://host:4222`, or `tls://user:password@host:4222` (or
    /// `tls://token@host:4222`) for TLS with credentials; comma-separated for a cluster.
    pub url: String,
    /// The CA (PEM) the server's certificate must chain to; requires TLS. `None`: the
    /// system's roots (for `tls://` URLs).
    pub ca_file: Option<PathBuf>,
    /// An NKEY/JWT credentials file (`.creds`), instead of credentials in the URL.
    pub creds_file: Option<PathBuf>,
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
            ca_file: None,
            creds_file: None,
            prefix: "likewise".into(),
            max_age: Duration::from_secs(7 * 24 * 3600),
            duplicate_window: Duration::from_secs(120),
        }
    }
}

impl std::fmt::Debug for StreamOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamOptions")
            .field("url", &connect::redact(&self.url))
            .field("ca_file", &self.ca_file)
            .field("creds_file", &self.creds_file)
            .field("prefix", &self.prefix)
            .field("max_age", &self.max_age)
            .field("duplicate_window", &self.duplicate_window)
            .finish()
    }
}

/// Stream and consumer names allow letters, digits, `-` and `_` only.
pub fn name_part(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

#[async_trait]
impl likewise_engine::Probe for JetStream {
    fn name(&self) -> &'static str {
        "stream"
    }

    /// A round trip to JetStream (its account information); a flush would only hand the
    /// bytes to the socket. Only whether JetStream answered without an error counts: the
    /// answer is not read into async-nats's `Account`, which requires fields NATS 2.9 does not
    /// send (`reserved_memory`, `reserved_storage`), so every probe of a 2.9 server failed.
    ///
    /// Without a connection (the server is gone and the client is reconnecting) the answer
    /// is "down" at once: async-nats does not fail a request then (it waits for a reconnect
    /// or its own timeout), so the probe would wait out its whole bound, and every `/healthz`
    /// and `/metrics` with it: longer than a 1 s scrape or health-check timeout, so the
    /// stream gauge went missing rather than to 0 and `LikewiseStreamDown` never fired
    /// (`crates/cli/tests/alerts_live.rs`).
    async fn probe(&self) -> StoreResult<()> {
        use async_nats::connection::State;
        use async_nats::jetstream::response::Response;
        if self.client.connection_state() != State::Connected {
            return Err(nats_err("not connected to the NATS server"));
        }
        let answer: Response<serde::de::IgnoredAny> = self.js.request("INFO", b"").await.map_err(nats_err)?;
        match answer {
            Response::Ok(_) => Ok(()),
            Response::Err { error } => Err(nats_err(error)),
        }
    }
}

impl JetStream {
    /// Connect (see [`connect`]) and make sure the stream exists.
    pub async fn connect(opts: &StreamOptions) -> StoreResult<Self> {
        let client = connect::open(opts).await?;
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
        Ok(JetStream { client, js, prefix, stream_name })
    }

    /// The subject of one partition of a shard's events.
    pub fn partition_subject(&self, shard: usize, part: u64) -> String {
        format!("{}.events.{shard}.{part}", self.prefix)
    }

    /// Every event of one shard.
    pub fn shard_filter(&self, shard: usize) -> String {
        format!("{}.events.{shard}.*", self.prefix)
    }

    /// One post partition's events, on every shard.
    pub fn part_filter(&self, part: u16) -> String {
        format!("{}.events.*.{part}", self.prefix)
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

#[async_trait]
impl EventStream for JetStream {
    async fn publish(&self, shard: usize, rows: &[OutboxRow]) -> StoreResult<Vec<u64>> {
        // Pipelined: every publish, then every acknowledgement.
        let mut acks = Vec::with_capacity(rows.len());
        for r in rows {
            let ack = self
                .js
                .send_publish(
                    self.partition_subject(shard, u64::from(r.part)),
                    Publish::build().message_id(format!("{shard}-{}", r.seq)).payload(r.body.clone().into()),
                )
                .await
                .map_err(nats_err)?;
            acks.push(ack);
        }
        let mut seqs = Vec::with_capacity(acks.len());
        for ack in acks {
            seqs.push(ack.await.map_err(nats_err)?.sequence);
        }
        Ok(seqs)
    }

    async fn consumer(&self, name: &str, scope: Scope, offset: u64) -> StoreResult<Arc<dyn EventLog>> {
        let filter = match scope {
            Scope::Shard(s) => self.shard_filter(s),
            Scope::All => self.all_filter(),
            Scope::Part(k) => self.part_filter(k),
        };
        Ok(Arc::new(log::StreamLog::durable(self, name, filter, offset).await?))
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
    fn readable(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    //! Against the real NATS server on 127.0.0.1:4222 (a 2.9 server on this project's
    //! machines); fails, never skips, when it is unreachable.
    use super::*;
    use likewise_engine::Probe;

    #[tokio::test]
    async fn the_probe_succeeds_on_the_local_nats_server() {
        let prefix = format!("lwtest_probe_{}_{}", std::process::id(), rand::random::<u32>());
        let s = JetStream::connect(&StreamOptions { prefix, ..Default::default() })
            .await
            .expect("NATS at 127.0.0.1:4222");
        let probed = s.probe().await;
        let _ = s.js.delete_stream(&s.stream_name).await;
        probed.expect("JetStream answers its account information");
    }

    /// A partition's consumer reads that partition's events of every shard, and nothing
    /// else: posts 3 and 67 (partition 3) on shards 0 and 1, not post 4 (partition 4).
    #[tokio::test]
    async fn a_partition_consumer_reads_its_posts_on_every_shard_only() {
        use likewise_core::event::{Event, pack};
        use likewise_core::ids::UserId;
        use likewise_core::like::Target;
        let prefix = format!("lwtest_part_{}_{}", std::process::id(), rand::random::<u32>());
        let s = JetStream::connect(&StreamOptions { prefix, ..Default::default() })
            .await
            .expect("NATS at 127.0.0.1:4222");
        let row = |seq: u64, post: u64, user: u64| OutboxRow {
            seq,
            part: (post % PARTITIONS) as u16,
            body: pack(&[Event::like(0, true, Target::post(post), UserId(9), UserId(user), 0, post)]),
        };
        s.publish(0, &[row(1, 3, 100), row(2, 4, 101)]).await.expect("publish shard 0");
        s.publish(1, &[row(1, 67, 102), row(2, 4, 103)]).await.expect("publish shard 1");
        let log = s.consumer("parts.p3", Scope::Part(3), 0).await.expect("consumer");
        let mut got = Vec::new();
        for _ in 0..50 {
            got.extend(log.read_after(got.last().map_or(0, |e: &Event| e.seq), 100).await.expect("read"));
            if got.len() >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = s.delete().await;
        let actors: Vec<u64> = got.iter().map(|e| e.actor.0).collect();
        assert_eq!(actors, vec![100, 102]);
    }
}
