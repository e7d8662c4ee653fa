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
//!
//! Each log has a JetStream consumer of its own, `<prefix>_<name>-x<random>`, and takes a new
//! one (a new random part) each time it repositions:
//! - a worker that lost its lease but has not noticed yet (cut off from PostgreSQL) may still
//!   fetch, ack and reposition, and with a shared consumer it would take deliveries from its
//!   successor and move the successor's position;
//! - re-creating a consumer under the same name is not a clean restart: when the delete is
//!   lost (a throttled connection) the create returns the old consumer, and an ack sent before
//!   the reposition may reach the new one and move its ack floor.
//!
//! A new log deletes the other consumers of its name, a reposition the one it replaces (both
//! cleanup: the stores' fences keep a stale writer's effects out); one left behind by a crash
//! or a lost delete expires after [`INACTIVE_LIMIT`].

use super::{JetStream, name_part, nats_err};
use crate::postgres::outbox::unpack;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use async_trait::async_trait;
use futures::StreamExt;
use likewise_core::event::Event;
use likewise_core::ports::EventLog;
use likewise_core::{StoreError, StoreResult};
use std::time::Duration;
use tokio::sync::Mutex;

/// The longest the fetches of one read may take (a no-wait fetch answers in milliseconds).
const FETCH_BOUND: Duration = Duration::from_secs(1);

/// Most messages one fetch asks for: 64 of a storm's messages pass a 16 KiB/s link within
/// [`FETCH_BOUND`].
const FETCH_MESSAGES: usize = 64;

/// Longest a fetch's batch is read on across reads (see [`InFlight`]); one older is dropped,
/// its answer taken as lost (a failover), and the gap it leaves repositions the consumer.
const IN_FLIGHT_LIMIT: Duration = Duration::from_secs(10);

/// A consumer nobody fetched from for this long is removed by the server (one a crashed
/// worker left behind, or whose delete was lost); a live log whose consumer expired
/// re-creates it on its next read. Short, because every consumer left behind still costs the
/// server: it tracks the pending messages of each, and hundreds of them on one stream made
/// its read loop take seconds.
const INACTIVE_LIMIT: Duration = Duration::from_secs(120);

/// Attempts at deleting a replaced consumer, a second apart and then longer.
const DELETE_ATTEMPTS: u32 = 5;

/// A consumer's view of the stream.
pub struct StreamLog {
    stream: JetStream,
    /// `<prefix>_<name>`: every consumer of this log is named `<family>-x<random>`.
    family: String,
    filter: String,
    /// The reader's exported position, labelled with its name (`notifications`,
    /// `trending.p7`), gone with the log (a partition given back or lost).
    position: likewise_core::positions::Position,
    /// The longest the fetches of one read may take ([`FETCH_BOUND`]; tests shorten it).
    bound: Duration,
    state: Mutex<State>,
}

/// A fetch whose batch was still arriving when a read's time ran out. It is read on by the
/// next read, not dropped: the server goes on delivering a dropped batch to an inbox nobody
/// reads, the next delivery then skips a consumer sequence, and the consumer must be
/// re-created. Under load (128 partition consumers on a stream of a million messages, the
/// server's read loop for one connection taking seconds) that turned every slow fetch into a
/// re-creation, which made the server slower still: 10,865 of them in four minutes.
struct InFlight {
    batch: pull::Batch,
    /// Messages asked for, and received so far.
    asked: usize,
    got: usize,
    since: tokio::time::Instant,
}

struct State {
    consumer: PullConsumer,
    /// The consumer's name.
    name: String,
    /// Delivered messages not acknowledged yet, by stream sequence (ascending).
    delivered: Vec<(u64, async_nats::jetstream::Message)>,
    /// Consumer sequence of the last delivery seen (0: none since the consumer was created).
    last_delivery: u64,
    /// The highest position committed, or the one the log was created at: the reader may
    /// read again from there (a failed commit, a notifier holding likes read past its offset),
    /// so a consumer re-created with nothing held starts after it.
    floor: u64,
    /// A fetch still arriving, read on by the next read.
    in_flight: Option<InFlight>,
    /// Times this log re-created its consumer.
    repositions: u64,
}

impl StreamLog {
    /// A durable consumer `name` of the events matching `filter`, positioned after `offset`.
    pub async fn durable(stream: &JetStream, name: &str, filter: String, offset: u64) -> StoreResult<Self> {
        let family = format!("{}_{}", name_part(&stream.prefix), name_part(name));
        remove_family(stream, &family).await?;
        let first = consumer_name(&family);
        let consumer = create(stream, &first, &filter, offset).await?;
        Ok(StreamLog {
            stream: stream.clone(),
            family,
            filter,
            position: likewise_core::positions::Position::new(name),
            bound: FETCH_BOUND,
            state: Mutex::new(State {
                consumer,
                name: first,
                delivered: Vec::new(),
                last_delivery: 0,
                floor: offset,
                in_flight: None,
                repositions: 0,
            }),
        })
    }

    /// Go on, on a consumer with a new name (see the module docs), right after the last
    /// message held, or the committed position when none is held; the replaced consumer is
    /// deleted in the background.
    ///
    /// What is held stays: every message from the committed position up to the last one held
    /// was delivered and kept in order (a lost delivery is noticed before anything after it
    /// is kept), so a reader reading again from its committed position gets it from here,
    /// and the new consumer need not deliver it again. Starting over from the committed
    /// position instead threw away everything read since the last commit: after a stream
    /// outage, consumers far behind lost a delivery again before they could commit, and
    /// repositioned over and over without getting closer.
    async fn reposition(&self, st: &mut State) -> StoreResult<()> {
        let name = consumer_name(&self.family);
        let start = st.delivered.last().map_or(st.floor, |(seq, _)| (*seq).max(st.floor));
        st.consumer = create(&self.stream, &name, &self.filter, start).await?;
        let old = std::mem::replace(&mut st.name, name);
        st.last_delivery = 0;
        st.in_flight = None;
        st.repositions += 1;
        metrics::counter!("likewise_stream_repositions_total").increment(1);
        delete_later(&self.stream, old);
        Ok(())
    }
}

/// A new consumer name of `family`.
fn consumer_name(family: &str) -> String {
    format!("{family}-x{:016x}", rand::random::<u64>())
}

/// Delete consumer `name` in the background, retried while the server is slow to answer
/// (up to [`DELETE_ATTEMPTS`]); one whose delete is lost for good expires.
fn delete_later(stream: &JetStream, name: String) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
    let stream = stream.clone();
    rt.spawn(async move {
        for attempt in 0..DELETE_ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_secs(1 << (attempt - 1))).await;
            }
            let Ok(s) = stream.js.get_stream(&stream.stream_name).await else { continue };
            match s.delete_consumer(&name).await {
                Ok(_) => return,
                // Gone already (expired, or deleted by a log of the same name starting).
                Err(e)
                    if matches!(e.kind(), async_nats::jetstream::stream::ConsumerErrorKind::JetStream(j)
                    if j.error_code() == async_nats::jetstream::ErrorCode::CONSUMER_NOT_FOUND) =>
                {
                    return;
                }
                Err(_) => {}
            }
        }
        metrics::counter!("likewise_stream_consumer_deletes_lost_total").increment(1);
    });
}

/// Delete the consumers of `family` (this name's earlier logs, and the single consumer per
/// name of earlier versions).
async fn remove_family(stream: &JetStream, family: &str) -> StoreResult<()> {
    let s = stream.js.get_stream(&stream.stream_name).await.map_err(nats_err)?;
    let mut names = s.consumer_names();
    let ours = format!("{family}-x");
    let mut stale = Vec::new();
    while let Some(n) = names.next().await {
        let n = n.map_err(nats_err)?;
        if n == family || n.starts_with(&ours) {
            stale.push(n);
        }
    }
    for n in stale {
        // Gone meanwhile (expired, or deleted by another log starting) is fine.
        let _ = s.delete_consumer(&n).await;
    }
    Ok(())
}

/// Create the durable consumer `name` (new: see the module docs) whose first delivery is the
/// first message after `offset`.
async fn create(stream: &JetStream, name: &str, filter: &str, offset: u64) -> StoreResult<PullConsumer> {
    let s = stream.js.get_stream(&stream.stream_name).await.map_err(nats_err)?;
    s.create_consumer(pull::Config {
        durable_name: Some(name.to_string()),
        filter_subject: filter.to_string(),
        deliver_policy: DeliverPolicy::ByStartSequence { start_sequence: offset + 1 },
        ack_policy: AckPolicy::All,
        ack_wait: Duration::from_secs(60),
        max_ack_pending: 1_000_000,
        inactive_threshold: INACTIVE_LIMIT,
        ..Default::default()
    })
    .await
    .map_err(nats_err)
}

/// What one fetch brought.
enum Fetched {
    Events(Vec<Event>),
    /// A delivery this consumer never saw (its consumer sequence skipped one).
    Gap {
        expected: u64,
        got: u64,
    },
}

impl StreamLog {
    async fn fetch_after(&self, st: &mut State, after: u64, max: usize) -> StoreResult<Fetched> {
        // Delivered but not committed yet: served again (a failed commit retries from `after`).
        let mut out = Vec::new();
        for (seq, m) in st.delivered.iter().filter(|(s, _)| *s > after) {
            if out.len() >= max {
                break;
            }
            out.extend(unpack(&m.payload, |_| *seq)?);
        }
        // Fetches of at most FETCH_MESSAGES messages, repeated while they come back full and
        // time is left. One small fetch fits the bound even on a slow link; repeating it lets a
        // consumer far behind (or skipping what it read before a reposition) read thousands of
        // messages per call, not one fetch's worth: with one fetch per call the notifier read
        // 64 messages per step, fewer than a storm publishes, and never caught up.
        //
        // A no-wait fetch has no client-side expiry: when the server's answer is lost (seen
        // after a worker failover) it would wait for the next message to be published, and a
        // consumer with nothing new would hang. So each read is bounded here, and a batch
        // still arriving at the bound is kept for the next read ([`InFlight`]); one kept past
        // [`IN_FLIGHT_LIMIT`] is dropped, and the gap it leaves repositions the consumer.
        let deadline = tokio::time::Instant::now() + self.bound;
        let mut first = true;
        while out.len() < max {
            if !first && tokio::time::Instant::now() + self.bound / 2 > deadline {
                break;
            }
            first = false;
            let mut f = match st.in_flight.take() {
                Some(f) if f.since.elapsed() < IN_FLIGHT_LIMIT => f,
                stale => {
                    if stale.is_some() {
                        metrics::counter!("likewise_stream_fetches_abandoned_total").increment(1);
                    }
                    // Messages hold one or more events.
                    let msgs = (max - out.len()).div_ceil(16).clamp(1, FETCH_MESSAGES);
                    // Subscribing and sending the request wait only for the connection, but
                    // seconds when the server is slow to read it; given up on after the
                    // request went out, the batch's deliveries would be lost, as a dropped
                    // batch's are. So only [`IN_FLIGHT_LIMIT`] bounds it (a dead connection).
                    let fetch = st.consumer.fetch().max_messages(msgs).messages();
                    let until = tokio::time::Instant::now() + IN_FLIGHT_LIMIT;
                    let Ok(batch) = tokio::time::timeout_at(until, fetch).await else {
                        metrics::counter!("likewise_stream_fetch_timeouts_total").increment(1);
                        return Ok(Fetched::Events(out));
                    };
                    InFlight {
                        batch: batch.map_err(nats_err)?,
                        asked: msgs,
                        got: 0,
                        since: tokio::time::Instant::now(),
                    }
                }
            };
            loop {
                // `next` is cancel-safe: a message not taken before the deadline stays in the
                // batch for the next read.
                let m = match tokio::time::timeout_at(deadline, f.batch.next()).await {
                    Ok(Some(m)) => m,
                    Ok(None) => break,
                    Err(_) => {
                        metrics::counter!("likewise_stream_fetch_timeouts_total").increment(1);
                        st.in_flight = Some(f);
                        return Ok(Fetched::Events(out));
                    }
                };
                let m = m.map_err(nats_err)?;
                let info = m.info().map_err(nats_err)?;
                let (seq, delivery) = (info.stream_sequence, info.consumer_sequence);
                // Every delivery, redeliveries included, takes the next consumer sequence.
                if delivery != st.last_delivery + 1 {
                    return Ok(Fetched::Gap { expected: st.last_delivery + 1, got: delivery });
                }
                st.last_delivery = delivery;
                f.got += 1;
                if st.delivered.last().is_some_and(|(s, _)| *s >= seq) {
                    continue; // a redelivery of something still buffered
                }
                if seq > after {
                    out.extend(unpack(&m.payload, |_| seq)?);
                }
                st.delivered.push((seq, m));
            }
            if f.got < f.asked {
                break; // nothing more for now
            }
        }
        if st.delivered.len() > 1_000_000 {
            tracing::warn!(buffered = st.delivered.len(), "stream consumer holds many uncommitted events");
        }
        Ok(Fetched::Events(out))
    }
}

impl Drop for StreamLog {
    /// The consumer goes with its log (a lease handed on, a shutdown); one a crash leaves
    /// behind expires by itself.
    fn drop(&mut self) {
        let name = std::mem::take(&mut self.state.get_mut().name);
        if !name.is_empty() {
            delete_later(&self.stream, name);
        }
    }
}

#[async_trait]
impl EventLog for StreamLog {
    async fn close(&self) -> StoreResult<()> {
        let name = std::mem::take(&mut self.state.lock().await.name);
        if name.is_empty() {
            return Ok(());
        }
        let s = self.stream.js.get_stream(&self.stream.stream_name).await.map_err(nats_err)?;
        s.delete_consumer(&name).await.map_err(nats_err)?;
        Ok(())
    }

    async fn read_after(&self, after: u64, max: usize) -> StoreResult<Vec<Event>> {
        let max = max.clamp(1, 10_000);
        let mut st = self.state.lock().await;
        if st.name.is_empty() {
            return Err(StoreError::Closed);
        }
        let fetched = match self.fetch_after(&mut st, after, max).await {
            Ok(f) => f,
            Err(e) => {
                // The consumer may be gone: expired while this log was idle, or deleted by a
                // log of the same name starting elsewhere. Re-created at the committed position
                // (as after a lost delivery, below); when the server is unreachable this fails
                // as well and the read's error stands.
                tracing::warn!(consumer = %st.name, error = %likewise_core::error::chain(&e), "stream fetch failed; re-creating the consumer");
                if self.reposition(&mut st).await.is_err() {
                    return Err(e);
                }
                self.fetch_after(&mut st, after, max).await?
            }
        };
        match fetched {
            Fetched::Events(out) => Ok(out),
            Fetched::Gap { expected, got } => {
                // A delivery went missing on the way (a fetch dropped mid-flight, say). With
                // cumulative acks, acknowledging anything after it would acknowledge it too and
                // its events would never be applied; waiting for its redelivery would cost
                // `ack_wait`. So: a new consumer starts right after the last message held (not
                // after `after`: what lies between the committed position and `after` may have
                // been taken back by a failed commit; it is held, and served from here).
                tracing::warn!(consumer = %st.name, expected, got, "stream delivery lost; repositioning");
                self.reposition(&mut st).await?;
                match self.fetch_after(&mut st, after, max).await? {
                    Fetched::Events(out) => Ok(out),
                    Fetched::Gap { .. } => {
                        Err(StoreError::Engine("stream deliveries lost twice in a row".into()))
                    }
                }
            }
        }
    }

    async fn committed(&self, upto: u64) -> StoreResult<()> {
        let mut st = self.state.lock().await;
        st.floor = st.floor.max(upto);
        // How far each reader has applied the stream: its lag against the stream's last
        // sequence, and its drain rate (docs/capacity/measure.sh reads it).
        self.position.set(st.floor);
        if let Some(pos) = st.delivered.iter().rposition(|(seq, _)| *seq <= upto) {
            // AckPolicy::All: acknowledging the last one acknowledges everything before it.
            // (One held from before a reposition goes to the replaced consumer, which is gone
            // or going: harmless; the current one is acknowledged by the commits of its own.)
            st.delivered[pos].1.ack().await.map_err(nats_err)?;
            st.delivered.drain(..=pos);
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

#[cfg(test)]
mod tests {
    //! Against the real NATS server on 127.0.0.1:4222 (`.ci/run` starts it); fails, never
    //! skips, when it is unreachable. Each test has its own stream, deleted at the end.
    use super::*;
    use crate::stream::StreamOptions;
    use likewise_core::ids::UserId;
    use likewise_core::like::Target;

    async fn stream() -> JetStream {
        let prefix = format!("lwtest_log_{}_{}", std::process::id(), rand::random::<u32>());
        JetStream::connect(&StreamOptions { prefix, ..Default::default() })
            .await
            .expect("NATS at 127.0.0.1:4222")
    }

    /// Publish `n` messages of 3 packed events each on partition 0 of shard 0; returns the
    /// first event's actor of each message, in order.
    async fn publish(s: &JetStream, n: u64) {
        for m in 0..n {
            let events: Vec<Event> = (0..3)
                .map(|i| Event::like(0, true, Target::post(1), UserId(9), UserId(m * 3 + i), 0, 1))
                .collect();
            s.js.publish(s.partition_subject(0, 0), likewise_core::event::pack(&events).into())
                .await
                .expect("publish")
                .await
                .expect("ack");
        }
    }

    /// A delivery the log never sees (here: taken by another client of the same durable
    /// consumer, as a fetch dropped mid-flight would lose it) must not be skipped: cumulative
    /// acks would otherwise acknowledge it with the next commit and its events would never be
    /// applied. Every event must come through exactly once, in order.
    #[tokio::test]
    async fn a_lost_delivery_is_fetched_again_not_skipped() {
        let s = stream().await;
        let seen = tokio::time::timeout(Duration::from_secs(30), read_with_a_theft(&s)).await;
        s.delete().await.expect("delete stream");
        let (seen, stolen) = seen.expect("reads finish in time").expect("reads");
        assert!(stolen, "the other client got a delivery");
        assert_eq!(seen, (0..30).collect::<Vec<u64>>(), "every event once, in order");
    }

    /// A reader that has not committed what it read (a failed commit, a notifier holding
    /// likes) reads again from its committed position after a lost delivery made the log
    /// reposition: it must get those events again, not the ones after its read position.
    #[tokio::test]
    async fn uncommitted_events_come_again_after_a_lost_delivery() {
        let s = stream().await;
        let seen = tokio::time::timeout(Duration::from_secs(30), reread_after_a_theft(&s)).await;
        s.delete().await.expect("delete stream");
        let seen = seen.expect("reads finish in time").expect("reads");
        assert_eq!(seen, (0..30).collect::<Vec<u64>>(), "every event once, in order");
    }

    /// A log started under a lease while the previous holder's log still runs (it lost the
    /// lease but has not noticed, and keeps reading and committing): the stale log must not
    /// take deliveries from its successor or move its position. The successor gets every
    /// event once, in order; the stale log's consumer is gone.
    #[tokio::test]
    async fn a_stale_log_of_the_same_name_leaves_its_successor_alone() {
        let s = stream().await;
        let r = tokio::time::timeout(Duration::from_secs(60), successor_reads(&s)).await;
        s.delete().await.expect("delete stream");
        let (seen, consumers) = r.expect("reads finish in time").expect("reads");
        assert_eq!(seen, (0..30).collect::<Vec<u64>>(), "every event once, in order");
        assert_eq!(consumers, 1, "the successor's consumer alone remains");
    }

    async fn successor_reads(s: &JetStream) -> StoreResult<(Vec<u64>, usize)> {
        publish(s, 10).await;
        let old = StreamLog::durable(s, "notifier", s.shard_filter(0), 0).await?;
        let mut stale = old.read_after(0, 3).await?.last().map_or(0, |e| e.seq);
        let new = StreamLog::durable(s, "notifier", s.shard_filter(0), 0).await?;
        let mut seen: Vec<u64> = Vec::new();
        let mut applied = 0;
        for _ in 0..40 {
            // Whatever the stale log gets (or fails to get) does not matter: the stores'
            // fences refuse its writes.
            if let Ok(got) = old.read_after(stale, 3).await
                && let Some(e) = got.last()
            {
                stale = e.seq;
                let _ = old.committed(stale).await;
            }
            let got = new.read_after(applied, 3).await?;
            if got.is_empty() && seen.len() >= 30 {
                break;
            }
            seen.extend(got.iter().map(|e| e.actor.0));
            if let Some(e) = got.last() {
                applied = e.seq;
                new.committed(applied).await?;
            }
        }
        drop(old);
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok((seen, consumers(s).await?))
    }

    /// How many consumers the test's stream has on the server.
    async fn consumers(s: &JetStream) -> StoreResult<usize> {
        let st = s.js.get_stream(&s.stream_name).await.map_err(nats_err)?;
        let mut names = st.consumer_names();
        let mut n = 0;
        while let Some(name) = names.next().await {
            name.map_err(nats_err)?;
            n += 1;
        }
        Ok(n)
    }

    /// A short-lived reader (the analytics export) closes its log before its runtime ends:
    /// the consumer is gone from the server when `close` returns, not some time after, and
    /// the closed log reads nothing more.
    #[tokio::test]
    async fn a_closed_log_leaves_no_consumer_behind() {
        let s = stream().await;
        let r = tokio::time::timeout(Duration::from_secs(30), close_and_count(&s)).await;
        s.delete().await.expect("delete stream");
        let (before, after, read) = r.expect("finishes in time").expect("calls");
        assert_eq!((before, after), (1, 0), "the consumer, then none");
        assert!(matches!(read, Err(StoreError::Closed)), "{read:?}");
    }

    async fn close_and_count(s: &JetStream) -> StoreResult<(usize, usize, StoreResult<Vec<Event>>)> {
        publish(s, 2).await;
        let log = StreamLog::durable(s, "export", s.shard_filter(0), 0).await?;
        assert_eq!(log.read_after(0, 10).await?.len(), 6);
        let before = consumers(s).await?;
        log.close().await?;
        let after = consumers(s).await?;
        Ok((before, after, log.read_after(0, 10).await))
    }

    /// A consumer far behind reads a backlog in one call, not one fetch's worth: with a
    /// single fetch per call the notifier read 64 messages per step, fewer than a storm
    /// publishes, and never caught up. Also after a reposition that puts it well below
    /// where it had read (it skips what it read, within the same call).
    /// Reads whose time runs out while a batch is arriving (a bound of zero: a read takes what
    /// has arrived, as a server busy for seconds makes of the 1 s bound) read it on: every event comes once, in order, and the
    /// consumer is never re-created. Dropping such a batch re-created it at nearly every read.
    #[tokio::test]
    async fn a_batch_still_arriving_when_a_read_ends_is_read_on_not_repositioned() {
        let s = stream().await;
        let got = tokio::time::timeout(Duration::from_secs(30), slow_reads(&s)).await;
        s.delete().await.expect("delete stream");
        let got = got.expect("in time");
        let (seqs, repositions) = got.expect("read");
        assert_eq!(seqs.len(), 3 * 600, "every event once");
        assert!(seqs.windows(2).all(|w| w[0] <= w[1]), "in order");
        assert_eq!(repositions, 0, "no consumer re-created");
    }

    async fn slow_reads(s: &JetStream) -> StoreResult<(Vec<u64>, u64)> {
        publish(s, 600).await;
        let mut log = StreamLog::durable(s, "slow", s.shard_filter(0), 0).await?;
        log.bound = Duration::ZERO;
        let (mut seqs, mut after) = (Vec::new(), 0);
        let until = tokio::time::Instant::now() + Duration::from_secs(20);
        while seqs.len() < 3 * 600 && tokio::time::Instant::now() < until {
            let evs = log.read_after(after, 10_000).await?;
            if let Some(last) = evs.last() {
                after = last.seq;
                log.committed(after).await?;
            }
            seqs.extend(evs.iter().map(|e| e.seq));
        }
        let repositions = log.state.lock().await.repositions;
        log.close().await?;
        Ok((seqs, repositions))
    }

    #[tokio::test]
    async fn a_backlog_is_read_in_one_call() {
        let s = stream().await;
        let r = tokio::time::timeout(Duration::from_secs(60), read_backlog(&s)).await;
        s.delete().await.expect("delete stream");
        let (first, after_skip) = r.expect("in time").expect("reads");
        assert_eq!(first, 1_200, "400 messages of 3 events in one read");
        assert_eq!(after_skip, 300, "the 100 messages after the read position, in one read");
    }

    async fn read_backlog(s: &JetStream) -> StoreResult<(usize, usize)> {
        publish(s, 400).await;
        let log = StreamLog::durable(s, "notifier", s.shard_filter(0), 0).await?;
        let first = log.read_after(0, 4_096).await?.len();
        // Repositioned to the committed position (0) while the reader is at message 300.
        {
            let mut st = log.state.lock().await;
            log.reposition(&mut st).await?;
        }
        let read_to = s.head().await? - 100;
        let after_skip = log.read_after(read_to, 4_096).await?.len();
        Ok((first, after_skip))
    }

    /// After a lost delivery the new consumer goes on after what the log holds: it does not
    /// deliver again what was read since the last commit (re-reading all of that is what kept
    /// consumers far behind after a stream outage from ever catching up).
    #[tokio::test]
    async fn a_reposition_goes_on_after_what_is_held() {
        let s = stream().await;
        let r = tokio::time::timeout(Duration::from_secs(30), reposition_after_held(&s)).await;
        s.delete().await.expect("delete stream");
        let (seqs, deliveries, again) = r.expect("in time").expect("reads");
        assert_eq!(seqs, vec![3, 3, 3], "the lost message's events, once");
        assert_eq!(deliveries, 1, "the new consumer delivered only the lost message");
        assert_eq!(again, vec![1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4], "a re-read from the committed position");
    }

    /// Another client of `log`'s consumer takes its next delivery and never acknowledges it,
    /// as a fetch dropped mid-flight would lose it. Whether it got one.
    async fn steal_one_delivery(s: &JetStream, log: &StreamLog) -> StoreResult<bool> {
        let thief: PullConsumer =
            s.js.get_stream(&s.stream_name)
                .await
                .map_err(nats_err)?
                .get_consumer(&log.state.lock().await.name)
                .await
                .map_err(nats_err)?;
        let mut batch = thief.fetch().max_messages(1).messages().await.map_err(nats_err)?;
        Ok(batch.next().await.is_some())
    }

    async fn reposition_after_held(s: &JetStream) -> StoreResult<(Vec<u64>, u64, Vec<u64>)> {
        // The fourth message shows the third one lost (its delivery comes after a gap).
        publish(s, 4).await;
        let log = StreamLog::durable(s, "notifier", s.shard_filter(0), 0).await?;
        let held = log.read_after(0, 6).await?;
        assert_eq!(held.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 1, 1, 2, 2, 2]);
        assert!(steal_one_delivery(s, &log).await?, "the other client got a delivery");
        let got = log.read_after(2, 3).await?;
        let deliveries = log.state.lock().await.last_delivery;
        // Nothing committed yet: reading again from 0 gets everything, from what is held.
        let again = log.read_after(0, 100).await?;
        Ok((got.iter().map(|e| e.seq).collect(), deliveries, again.iter().map(|e| e.seq).collect()))
    }

    async fn reread_after_a_theft(s: &JetStream) -> StoreResult<Vec<u64>> {
        publish(s, 10).await;
        let log = StreamLog::durable(s, "notifier", s.shard_filter(0), 0).await?;
        // Read two messages ahead without committing.
        let first = log.read_after(0, 3).await?;
        let second = log.read_after(first.last().map_or(0, |e| e.seq), 3).await?;
        let read_to = second.last().map_or(0, |e| e.seq);
        assert!(steal_one_delivery(s, &log).await?, "the other client got a delivery");
        // The next read sees the gap and repositions.
        log.read_after(read_to, 3).await?;
        // The commit failed: read everything again from the committed position, 0.
        let mut seen: Vec<u64> = Vec::new();
        let mut applied = 0;
        for _ in 0..40 {
            let got = log.read_after(applied, 3).await?;
            if got.is_empty() && seen.len() >= 30 {
                break;
            }
            seen.extend(got.iter().map(|e| e.actor.0));
            if let Some(e) = got.last() {
                applied = e.seq;
                log.committed(applied).await?;
            }
        }
        Ok(seen)
    }

    async fn read_with_a_theft(s: &JetStream) -> StoreResult<(Vec<u64>, bool)> {
        publish(s, 10).await;
        let log = StreamLog::durable(s, "agg", s.shard_filter(0), 0).await?;
        let mut seen: Vec<u64> = Vec::new();
        let mut applied = 0;
        let mut stolen = false;
        for round in 0..40 {
            if round == 2 {
                stolen = steal_one_delivery(s, &log).await?;
            }
            // One message (three events) per read.
            let got = log.read_after(applied, 3).await?;
            if got.is_empty() && round > 2 {
                break;
            }
            seen.extend(got.iter().map(|e| e.actor.0));
            if let Some(e) = got.last() {
                applied = e.seq;
                log.committed(applied).await?;
            }
        }
        Ok((seen, stolen))
    }
}
