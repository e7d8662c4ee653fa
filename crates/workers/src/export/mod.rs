//! The export: publishes every event of the log, as the public JSON contract
//! (`likewise_core::public_event`), to a destination other teams consume (Kafka).
//!
//! It is a consumer like the others, with its own offset (`export`). Each round reads a batch
//! after the offset, hands it to the [`Sink`], and only once the sink reports every message
//! acknowledged commits the offset (then tells the log, so a stream consumer may ack). A
//! failure leaves the offset where it was, and the same events are sent again: delivery is at
//! least once, and exactly once for a consumer that dedupes by `event_id`, which is stable
//! across redelivery. Messages are keyed by `post_id`, so one post's events stay in order on
//! one partition.
//!
//! On the embedded engine the aggregator does not truncate the log past the export's offset
//! (see `AggregatorOptions::hold_for`), so a broker outage of any length loses nothing. On the
//! scale-out engine the stream's retention bounds how long an outage may last.

#[cfg(feature = "kafka")]
pub mod kafka;

use async_trait::async_trait;
use likewise_core::ports::{CounterStore, EventLog};
use likewise_core::public_event::write_json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Consumer (offset) name of the export.
pub const EXPORT: &str = "export";

/// One message for the destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The post: the partitioning key is its decimal form (formatted by the sink, on the
    /// stack: no allocation per message).
    pub post: u64,
    /// The event as JSON.
    pub value: Vec<u8>,
}

/// Why a batch was not (wholly) acknowledged.
#[derive(Debug, thiserror::Error)]
#[error("export destination: {0}")]
pub struct SinkError(pub String);

/// An export destination.
#[async_trait]
pub trait Sink: Send + Sync {
    /// Send `batch` in order; Ok only once the destination acknowledged every message. On an
    /// error some messages may have been delivered: the caller sends the whole batch again.
    async fn send(&self, batch: &[Message]) -> Result<(), SinkError>;
    /// A name for logs and metrics.
    fn name(&self) -> &'static str;
}

/// Export tuning.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    /// Most events per batch.
    pub batch: usize,
    /// Pause when there was nothing to send.
    pub idle: Duration,
    /// First pause after a failure (doubles up to `max_backoff`).
    pub backoff: Duration,
    /// Longest pause after failures.
    pub max_backoff: Duration,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            batch: 5_000,
            idle: Duration::from_millis(20),
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
        }
    }
}

/// A configured destination and its tuning: what the embedded process or a worker role runs.
#[derive(Clone)]
pub struct Export {
    /// Where events go.
    pub sink: Arc<dyn Sink>,
    /// Tuning.
    pub opts: ExportOptions,
}

impl std::fmt::Debug for Export {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Export").field("sink", &self.sink.name()).field("opts", &self.opts).finish()
    }
}

/// The messages for a run of events (whole messages of the log, in order): each event's
/// public JSON (`likewise_core::public_event`), written straight from the event, with its
/// index among the events sharing its `seq`.
pub fn messages(events: &[likewise_core::event::Event]) -> Vec<Message> {
    let mut out = Vec::with_capacity(events.len());
    let mut index = 0u32;
    for (i, e) in events.iter().enumerate() {
        index = if i > 0 && events[i - 1].seq == e.seq { index + 1 } else { 0 };
        // A like's JSON is about 260 bytes; a reply's, with its parent, about 290.
        let mut value = Vec::with_capacity(320);
        write_json(&mut value, e, index);
        out.push(Message { post: e.post, value });
    }
    out
}

/// How often the lag is published while the export waits on its destination (a batch in
/// flight, a pause after a failure): an outage must show as lag growing, not frozen.
const LAG_REFRESH: Duration = Duration::from_secs(1);

/// Shortest time between two "destination unreachable" warnings: a flapping broker is not
/// logged per flap.
const DOWN_LOG_EVERY: Duration = Duration::from_secs(60);

/// One round: read after `offset`, send, commit. Returns how many events were exported.
pub async fn export_once(
    log: &dyn EventLog,
    offsets: &dyn CounterStore,
    sink: &dyn Sink,
    offset: &mut u64,
    batch: usize,
) -> Result<usize, SinkError> {
    let mut events =
        log.read_after(*offset, batch).await.map_err(|e| SinkError(format!("reading the log: {e}")))?;
    // Only what is on disk leaves the process (docs/api.md: published once the change is durable).
    if let Some(durable) =
        log.durable_head().await.map_err(|e| SinkError(format!("reading the log's durable head: {e}")))?
    {
        events.retain(|e| e.seq <= durable);
    }
    let Some(last) = events.last() else {
        publish_lag(log, *offset, None).await;
        return Ok(0);
    };
    let (upto, oldest_ms, newest_ms) = (last.seq, events[0].ts_ms, last.ts_ms);
    // Ends once the batch is acknowledged and its offset committed (or the round fails).
    let _span = likewise_core::trace::consumer_span("export", &events);
    // Everything after the offset waits for the destination's acknowledgement, the batch's
    // first event the longest; while the destination does not answer (a broker down holds a
    // batch for the whole message timeout) the lag keeps being published.
    publish_lag(log, *offset, Some(oldest_ms)).await;
    let msgs = messages(&events);
    let send = sink.send(&msgs);
    tokio::pin!(send);
    loop {
        tokio::select! {
            sent = &mut send => {
                sent?;
                break;
            }
            _ = tokio::time::sleep(LAG_REFRESH) => publish_lag(log, *offset, Some(oldest_ms)).await,
        }
    }
    offsets
        .apply_deltas(EXPORT, *offset, upto, &[])
        .await
        .map_err(|e| SinkError(format!("committing the export offset: {e}")))?;
    log.committed(upto).await.map_err(|e| SinkError(format!("acknowledging the log: {e}")))?;
    *offset = upto;
    metrics::counter!("likewise_export_events_total").increment(events.len() as u64);
    // What remains is younger than the newest event sent: its age bounds the oldest's until the
    // next round (which starts at once) reads it.
    publish_lag(log, upto, Some(newest_ms)).await;
    Ok(events.len())
}

/// `likewise_export_lag_events`: log positions after `offset`, i.e. not yet acknowledged by
/// the destination (on the scale-out engine a position is a stream message, which may hold
/// several events); `likewise_export_lag_seconds`: the age of the oldest of them
/// (`oldest_ms`, its time), 0 when none waits.
async fn publish_lag(log: &dyn EventLog, offset: u64, oldest_ms: Option<u64>) {
    let head = log.head().await.unwrap_or(offset);
    let behind = head.saturating_sub(offset);
    metrics::gauge!("likewise_export_lag_events").set(behind as f64);
    let age = match oldest_ms {
        Some(ms) if behind > 0 => likewise_service::now_ms().saturating_sub(ms) as f64 / 1000.0,
        _ => 0.0,
    };
    metrics::gauge!("likewise_export_lag_seconds").set(age);
}

/// Whether the destination is taking batches, so that an outage is logged when it starts and
/// when it ends, not per failed round (and not per flap of a flapping broker).
#[derive(Debug, Default)]
struct Health {
    /// Since when rounds fail, and whether that start was logged.
    down: Option<(Instant, bool)>,
    /// Failed rounds of the current outage.
    failed_rounds: u64,
    /// Outages not logged (they began within `DOWN_LOG_EVERY` of a logged one).
    unlogged: u64,
    /// When an outage was last logged.
    last_logged: Option<Instant>,
}

impl Health {
    /// A round failed at `now`: true when this starts an outage that is to be logged.
    fn failed(&mut self, now: Instant) -> bool {
        self.failed_rounds += 1;
        if self.down.is_some() {
            return false;
        }
        let log = self.last_logged.is_none_or(|t| now.duration_since(t) >= DOWN_LOG_EVERY);
        if log {
            self.last_logged = Some(now);
        } else {
            self.unlogged += 1;
        }
        self.down = Some((now, log));
        log
    }

    /// A batch was acknowledged at `now`: the outage's length and failed rounds when it ends
    /// one whose start was logged.
    fn delivered(&mut self, now: Instant) -> Option<(Duration, u64)> {
        let (since, logged) = self.down.take()?;
        let rounds = std::mem::take(&mut self.failed_rounds);
        logged.then(|| (now.duration_since(since), rounds))
    }
}

/// Export until `shutdown`, resuming from the stored offset. A failed round is retried with
/// a growing pause; nothing is skipped.
pub async fn run(
    log: Arc<dyn EventLog>,
    offsets: Arc<dyn CounterStore>,
    sink: Arc<dyn Sink>,
    opts: ExportOptions,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut offset = match offsets.offset(EXPORT).await {
        Ok(o) => o,
        Err(e) => {
            tracing::error!(error = %e, "export cannot read its offset; not started");
            return;
        }
    };
    tracing::info!(offset, sink = sink.name(), "export started");
    let mut backoff = opts.backoff;
    let mut health = Health::default();
    loop {
        if *shutdown.borrow() {
            return;
        }
        // The time of the oldest change still waiting, during a pause after a failure.
        let mut waiting = None;
        let pause = match export_once(&*log, &*offsets, &*sink, &mut offset, opts.batch).await {
            Ok(n) if n > 0 => {
                backoff = opts.backoff;
                if let Some((down_for, rounds)) = health.delivered(Instant::now()) {
                    tracing::info!(
                        down_for_s = down_for.as_secs(),
                        failed_rounds = rounds,
                        offset,
                        sink = sink.name(),
                        "export destination reachable again; sending the changes that waited"
                    );
                }
                continue;
            }
            Ok(_) => opts.idle,
            Err(e) => {
                metrics::counter!("likewise_export_failures_total").increment(1);
                if health.failed(Instant::now()) {
                    tracing::warn!(
                        error = %e,
                        offset,
                        sink = sink.name(),
                        unlogged_outages = health.unlogged,
                        "export destination unreachable; changes wait in the log and are sent once it \
                         is back (likewise_export_lag_events, likewise_export_lag_seconds)"
                    );
                } else {
                    tracing::debug!(error = %e, offset, "export round failed; retrying the same events");
                }
                // A commit whose answer was lost has moved the stored offset: go on from it
                // (what was sent again meanwhile carries the same event IDs).
                if let Ok(stored) = offsets.offset(EXPORT).await {
                    offset = stored;
                }
                waiting = log.read_after(offset, 1).await.ok().and_then(|e| e.first().map(|e| e.ts_ms));
                publish_lag(&*log, offset, waiting).await;
                let p = backoff;
                backoff = (backoff * 2).min(opts.max_backoff);
                p
            }
        };
        let until = Instant::now() + pause;
        loop {
            let step = until.saturating_duration_since(Instant::now()).min(LAG_REFRESH);
            if step.is_zero() {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep(step) => {}
                _ = shutdown.changed() => break,
            }
            if waiting.is_some() {
                publish_lag(&*log, offset, waiting).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use likewise_core::StoreResult;
    use likewise_core::event::Event;
    use likewise_core::ids::UserId;
    use likewise_core::like::Target;
    use likewise_store::testing;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A log over a fixed list of events.
    struct VecLog(Vec<Event>);
    #[async_trait]
    impl EventLog for VecLog {
        async fn read_after(&self, after: u64, max: usize) -> StoreResult<Vec<Event>> {
            Ok(self.0.iter().filter(|e| e.seq > after).take(max).copied().collect())
        }
        async fn head(&self) -> StoreResult<u64> {
            Ok(self.0.last().map_or(0, |e| e.seq))
        }
        async fn truncate(&self, _: u64) -> StoreResult<u64> {
            Ok(0)
        }
    }

    /// A sink that fails every `fail_every`-th call after delivering half the batch.
    struct Flaky {
        got: Mutex<Vec<Message>>,
        calls: AtomicUsize,
        fail_every: usize,
    }
    #[async_trait]
    impl Sink for Flaky {
        async fn send(&self, batch: &[Message]) -> Result<(), SinkError> {
            let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
            let mut got = self.got.lock().expect("lock");
            if n.is_multiple_of(self.fail_every) {
                got.extend_from_slice(&batch[..batch.len() / 2]);
                return Err(SinkError("broker went away".into()));
            }
            got.extend_from_slice(batch);
            Ok(())
        }
        fn name(&self) -> &'static str {
            "flaky"
        }
    }

    /// A log whose events past `durable` are visible but not yet on disk.
    struct Undurable {
        log: VecLog,
        durable: std::sync::atomic::AtomicU64,
    }
    #[async_trait]
    impl EventLog for Undurable {
        async fn read_after(&self, after: u64, max: usize) -> StoreResult<Vec<Event>> {
            self.log.read_after(after, max).await
        }
        async fn head(&self) -> StoreResult<u64> {
            self.log.head().await
        }
        async fn durable_head(&self) -> StoreResult<Option<u64>> {
            Ok(Some(self.durable.load(Ordering::SeqCst)))
        }
        async fn truncate(&self, _: u64) -> StoreResult<u64> {
            Ok(0)
        }
    }

    /// An event a crash could still take back never leaves the process: the export stops at
    /// the durable head and sends the rest once it is on disk.
    #[tokio::test]
    async fn only_durable_events_are_exported() {
        let dir = testing::scratch_dir();
        let store = testing::open_small(dir.path());
        let events: Vec<Event> = (1..=10u64)
            .map(|s| Event::like(s, true, Target::post(1), UserId(1), UserId(s), 1_000 + s, 1))
            .collect();
        let log = Undurable { log: VecLog(events), durable: 6.into() };
        let sink = Flaky { got: Mutex::new(Vec::new()), calls: AtomicUsize::new(0), fail_every: usize::MAX };
        let mut offset = 0;
        assert_eq!(export_once(&log, &*store.counters, &sink, &mut offset, 100).await.expect("round"), 6);
        assert_eq!(export_once(&log, &*store.counters, &sink, &mut offset, 100).await.expect("round"), 0);
        assert_eq!((offset, sink.got.lock().expect("lock").len()), (6, 6));
        log.durable.store(10, Ordering::SeqCst);
        assert_eq!(export_once(&log, &*store.counters, &sink, &mut offset, 100).await.expect("round"), 4);
        assert_eq!(store.counters.offset(EXPORT).await.expect("offset"), 10);
    }

    #[tokio::test]
    async fn every_event_arrives_and_failures_only_duplicate() {
        let dir = testing::scratch_dir();
        let store = testing::open_small(dir.path());
        let events: Vec<Event> = (1..=1_000u64)
            .map(|s| Event::like(s, s % 3 != 0, Target::post(s % 7), UserId(1), UserId(s), 1_000 + s, s % 7))
            .collect();
        let log = VecLog(events.clone());
        let sink = Flaky { got: Mutex::new(Vec::new()), calls: AtomicUsize::new(0), fail_every: 3 };
        let mut offset = 0;
        let mut rounds = 0;
        while offset < 1_000 {
            let _ = export_once(&log, &*store.counters, &sink, &mut offset, 64).await;
            rounds += 1;
            assert!(rounds < 1_000, "no progress");
        }
        assert_eq!(store.counters.offset(EXPORT).await.expect("offset"), 1_000);
        let got = sink.got.lock().expect("lock").clone();
        assert!(got.len() > 1_000, "the failures must have re-sent something");
        // After dedupe by event_id: each event exactly once, and per post in log order.
        let mut seen = std::collections::HashSet::new();
        let mut per_post: std::collections::HashMap<String, Vec<u64>> = Default::default();
        for m in &got {
            let v: serde_json::Value = serde_json::from_slice(&m.value).expect("json");
            let id = v["event_id"].as_str().expect("id").to_string();
            assert_eq!(v["post_id"].as_str(), Some(m.post.to_string().as_str()), "keyed by post");
            if seen.insert(id.clone()) {
                let seq: u64 = id.split('.').next().expect("seq").parse().expect("num");
                per_post.entry(m.post.to_string()).or_default().push(seq);
            }
        }
        assert_eq!(seen.len(), 1_000);
        for seqs in per_post.values() {
            assert!(seqs.windows(2).all(|w| w[0] < w[1]), "a post's events out of order");
        }
    }

    /// An outage is logged when it starts and when it ends, not per failed round, and a broker
    /// that flaps is logged at most once a minute.
    #[test]
    fn an_outage_is_logged_once_each_way_and_flaps_are_rate_limited() {
        let mut h = Health::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert!(h.failed(at(0)), "the first failure starts a logged outage");
        assert!(!h.failed(at(1)) && !h.failed(at(3)), "later failures of the outage are not");
        assert_eq!(h.delivered(at(8)), Some((Duration::from_secs(8), 3)));
        assert_eq!(h.delivered(at(9)), None, "no outage: nothing to say");
        // A flap within the minute: neither its start nor its end is logged.
        assert!(!h.failed(at(20)));
        assert_eq!(h.delivered(at(21)), None);
        assert!(h.failed(at(60)), "a minute after the last logged outage, a new one is logged");
        assert_eq!(h.unlogged, 1);
    }
}
