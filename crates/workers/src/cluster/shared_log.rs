//! One stream reader per process for all the partitions of a consumer it holds.
//!
//! A partitioned consumer (the notifier, trending) used to read each partition through a
//! stream consumer of its own, filtered to the partition's subjects: 64 filtered JetStream
//! consumers per consumer and per process, each fetched on every tick. On a stream of a
//! million messages that many filtered consumers kept nats-server 2.9 busy for seconds per
//! read (it scans past the other partitions' messages for each consumer, and every fetch
//! subscribes an inbox of its own), fetches overran, deliveries were lost, consumers were
//! re-created by the thousand, and a 40,000-like backlog did not drain.
//!
//! Here a process reads the stream once per consumer, through one unfiltered stream consumer,
//! and hands each event to the view of its post's partition ([`SharedLog::view`]), if the
//! process holds it; the others' events are skipped in the process. One fetch serves every
//! partition: a tick of 64 partition reads makes one fetch, not 64.
//!
//! Each view is an [`EventLog`] of its partition alone, as the filtered consumer was: it
//! serves the events past a reader's position, keeps them until the reader commits past them
//! (a failed commit reads them again), and exports the reader's committed position. The
//! authoritative positions stay where they were, each partition's committed with its effects;
//! the shared reader starts at the lowest position of the partitions it serves and goes back
//! (a new stream consumer) when a partition is taken whose position is behind it. Its stream
//! consumer is acknowledged as soon as events are handed to the views: a crash loses nothing,
//! since each partition starts again from its own committed position.
//!
//! The cost moves from the server to the processes: each process reads every message, and
//! uses its partitions' share of them. With N processes the stream delivers each message N
//! times (per consumer), where the filtered consumers delivered it once but scanned it once per
//! partition consumer.

use futures_util::future::BoxFuture;
use likewise_core::event::Event;
use likewise_core::ports::EventLog;
use likewise_core::ports::cluster::part_of_post;
use likewise_core::positions::Position;
use likewise_core::{StoreError, StoreResult};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Most events one fetch of the shared reader asks for: it serves every partition held.
const FETCH_EVENTS: usize = 16_384;

/// Makes the shared reader's log, positioned after the given offset.
pub type OpenLog = Box<dyn Fn(u64) -> BoxFuture<'static, StoreResult<Arc<dyn EventLog>>> + Send + Sync>;

/// The partition an event belongs to.
pub type Route = fn(&Event) -> u16;

/// The stream's post partitions (`post % 64`), as its subjects are split.
pub fn by_post(e: &Event) -> u16 {
    part_of_post(e.post)
}

/// The reader shared by the views of one consumer's partitions in this process.
pub struct SharedLog {
    open: OpenLog,
    route: Route,
    /// The stream reader and its position: held while fetching, so concurrent reads of the
    /// views make one fetch.
    reader: tokio::sync::Mutex<Reader>,
    /// Fetches finished (or failed): a read that waited for the reader while another fetched
    /// is served from what that fetch brought.
    fetches: AtomicU64,
    views: Mutex<HashMap<u16, View>>,
    ids: AtomicU64,
}

struct Reader {
    log: Option<Arc<dyn EventLog>>,
    /// Every event up to here was handed to the views that were current (see [`View`]).
    pos: u64,
}

/// What the shared reader keeps for one partition.
struct View {
    id: u64,
    /// Events of the partition past `floor`, in order, up to `fetched`.
    buf: VecDeque<Event>,
    /// Every event of the partition up to here is in `buf` or at most `floor`. A view whose
    /// `fetched` is behind the reader's position makes the reader go back before its next
    /// fetch.
    fetched: u64,
    /// The reader's committed position: events up to it are dropped.
    floor: u64,
}

impl SharedLog {
    /// A shared reader whose stream reader `open(offset)` makes (made when first read, and
    /// again when it must go back), handing each event to partition `route(event)`.
    pub fn new(open: OpenLog, route: Route) -> Arc<Self> {
        Arc::new(SharedLog {
            open,
            route,
            reader: tokio::sync::Mutex::new(Reader { log: None, pos: 0 }),
            fetches: AtomicU64::new(0),
            views: Mutex::new(HashMap::new()),
            ids: AtomicU64::new(1),
        })
    }

    /// The log of partition `part`, positioned after `offset` (its committed position), whose
    /// reader position is exported as `name`. A partition has one view at a time: a newer
    /// one replaces it.
    pub fn view(self: &Arc<Self>, part: u16, offset: u64, name: &str) -> Arc<dyn EventLog> {
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        self.lock_views().insert(part, View { id, buf: VecDeque::new(), fetched: offset, floor: offset });
        Arc::new(PartView { shared: self.clone(), part, id, position: Position::new(name) })
    }

    fn lock_views(&self) -> std::sync::MutexGuard<'_, HashMap<u16, View>> {
        self.views.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Events of view (`part`, `id`) past `after`, up to `max` (whole stream messages: the
    /// events of one sequence are not split). `None`: the view is gone (given back).
    fn buffered(&self, part: u16, id: u64, after: u64, max: usize) -> Option<Vec<Event>> {
        let mut views = self.lock_views();
        let v = views.get_mut(&part).filter(|v| v.id == id)?;
        if after < v.floor {
            // A reader going back past what it committed: read its partition again.
            v.buf.clear();
            v.fetched = after;
            v.floor = after;
        }
        let mut out: Vec<Event> = Vec::new();
        for e in v.buf.iter().skip_while(|e| e.seq <= after) {
            if out.len() >= max && out.last().is_none_or(|l| l.seq != e.seq) {
                break;
            }
            out.push(*e);
        }
        Some(out)
    }

    /// The lowest position a view needs the stream from (`None`: no view).
    fn lowest(&self) -> Option<u64> {
        self.lock_views().values().map(|v| v.fetched).min()
    }

    /// The stream reader, made at `need` when there is none, or (`back`) when it is past
    /// `need`: the replaced one's stream consumer is deleted as it drops.
    async fn reader_at(&self, r: &mut Reader, need: u64, back: bool) -> StoreResult<Arc<dyn EventLog>> {
        if let Some(log) = &r.log
            && !(back && need < r.pos)
        {
            return Ok(log.clone());
        }
        if r.log.take().is_some() {
            metrics::counter!("likewise_shared_log_rewinds_total").increment(1);
        }
        let log = (self.open)(need).await?;
        r.log = Some(log.clone());
        r.pos = need;
        Ok(log)
    }

    /// One fetch for every view: the reader goes back first if a view is behind it.
    async fn fetch(&self, r: &mut Reader) -> StoreResult<()> {
        let Some(need) = self.lowest() else { return Ok(()) };
        let log = self.reader_at(r, need, true).await?;
        let start = r.pos;
        let events = log.read_after(start, FETCH_EVENTS).await?;
        let Some(last) = events.last().map(|e| e.seq) else { return Ok(()) };
        {
            // Handed out before any await: a read cancelled below has lost nothing.
            let mut views = self.lock_views();
            for e in events {
                if let Some(v) = views.get_mut(&(self.route)(&e))
                    && v.fetched >= start
                    && e.seq > v.fetched
                {
                    v.buf.push_back(e);
                }
            }
            // A view taken during this fetch, behind `start`, got nothing: the next fetch
            // goes back for it.
            for v in views.values_mut().filter(|v| v.fetched >= start) {
                v.fetched = v.fetched.max(last);
            }
        }
        r.pos = last;
        log.committed(last).await
    }
}

struct PartView {
    shared: Arc<SharedLog>,
    part: u16,
    id: u64,
    position: Position,
}

impl Drop for PartView {
    fn drop(&mut self) {
        let mut views = self.shared.lock_views();
        if views.get(&self.part).is_some_and(|v| v.id == self.id) {
            views.remove(&self.part);
        }
    }
}

fn given_back(part: u16) -> StoreError {
    StoreError::Engine(format!("partition {part} was given back: its view is closed"))
}

#[async_trait::async_trait]
impl EventLog for PartView {
    async fn read_after(&self, after: u64, max: usize) -> StoreResult<Vec<Event>> {
        let s = &self.shared;
        let seen = s.fetches.load(Ordering::SeqCst);
        let out = s.buffered(self.part, self.id, after, max).ok_or_else(|| given_back(self.part))?;
        if !out.is_empty() {
            return Ok(out);
        }
        // The fetch runs on a task of its own: a reader that gives up waiting (the notifier
        // bounds each read) must not cancel it half way, which would drop a batch the server
        // goes on delivering, lose deliveries and make the stream consumer start over. What
        // it brings is kept for the next read.
        let shared = s.clone();
        let fetch = tokio::spawn(async move {
            let mut r = shared.reader.lock().await;
            if shared.fetches.load(Ordering::SeqCst) != seen {
                return Ok(());
            }
            let fetched = shared.fetch(&mut r).await;
            shared.fetches.fetch_add(1, Ordering::SeqCst);
            fetched
        });
        fetch.await.map_err(|e| StoreError::Engine(format!("stream fetch task: {e}")))??;
        s.buffered(self.part, self.id, after, max).ok_or_else(|| given_back(self.part))
    }

    async fn head(&self) -> StoreResult<u64> {
        let s = &self.shared;
        let log = {
            let mut r = s.reader.lock().await;
            let need = s.lowest().unwrap_or(0);
            s.reader_at(&mut r, need, false).await?
        };
        log.head().await
    }

    async fn truncate(&self, _upto: u64) -> StoreResult<u64> {
        // The stream's retention bounds it.
        Ok(0)
    }

    async fn committed(&self, upto: u64) -> StoreResult<()> {
        let mut views = self.shared.lock_views();
        let v = views.get_mut(&self.part).filter(|v| v.id == self.id).ok_or_else(|| given_back(self.part))?;
        v.floor = v.floor.max(upto);
        while v.buf.front().is_some_and(|e| e.seq <= upto) {
            v.buf.pop_front();
        }
        self.position.set(v.floor);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use likewise_core::ids::UserId;
    use likewise_core::like::Target;
    use std::time::Duration;

    /// An in-memory stream read through "consumers" that count their creations and reads.
    #[derive(Default)]
    struct Stream {
        events: Mutex<Vec<Event>>,
        opened: Mutex<Vec<u64>>,
        reads: AtomicU64,
        /// How long a fetch takes (a slow server), and fetches dropped before they ended
        /// (whose deliveries a real server would have sent to an inbox nobody reads).
        slow: Mutex<Duration>,
        cut: AtomicU64,
    }

    /// Counts a fetch as cut unless defused when it ends.
    struct Cut<'a>(&'a AtomicU64, bool);

    impl Drop for Cut<'_> {
        fn drop(&mut self) {
            if !self.1 {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    struct Consumer {
        stream: Arc<Stream>,
    }

    #[async_trait::async_trait]
    impl EventLog for Consumer {
        async fn read_after(&self, after: u64, max: usize) -> StoreResult<Vec<Event>> {
            self.stream.reads.fetch_add(1, Ordering::SeqCst);
            let mut cut = Cut(&self.stream.cut, false);
            // A fetch waits on the network: the other reads of a round are made meanwhile.
            tokio::task::yield_now().await;
            let slow = *self.stream.slow.lock().expect("lock");
            tokio::time::sleep(slow).await;
            cut.1 = true;
            let events = self.stream.events.lock().expect("lock");
            Ok(events.iter().filter(|e| e.seq > after).take(max).cloned().collect())
        }
        async fn head(&self) -> StoreResult<u64> {
            Ok(self.stream.events.lock().expect("lock").last().map_or(0, |e| e.seq))
        }
        async fn truncate(&self, _: u64) -> StoreResult<u64> {
            Ok(0)
        }
    }

    fn shared(stream: &Arc<Stream>) -> Arc<SharedLog> {
        let stream = stream.clone();
        SharedLog::new(
            Box::new(move |offset| {
                let stream = stream.clone();
                Box::pin(async move {
                    stream.opened.lock().expect("lock").push(offset);
                    let log: Arc<dyn EventLog> = Arc::new(Consumer { stream });
                    Ok(log)
                })
            }),
            by_post,
        )
    }

    fn like(seq: u64, post: u64) -> Event {
        Event::like(seq, true, Target::post(post), UserId(1), UserId(2), 0, post)
    }

    /// `n` events from seq `from`, on posts seq % 7 (so every partition 0..7 appears).
    fn publish(stream: &Stream, from: u64, n: u64) {
        let mut events = stream.events.lock().expect("lock");
        events.extend((from..from + n).map(|s| like(s, s % 7)));
    }

    fn seqs(events: &[Event]) -> Vec<u64> {
        events.iter().map(|e| e.seq).collect()
    }

    fn expected(after: u64, upto: u64, part: u16) -> Vec<u64> {
        (after + 1..=upto).filter(|s| part_of_post(s % 7) == part).collect()
    }

    #[tokio::test]
    async fn each_view_reads_its_partition_and_one_fetch_serves_them_all() {
        let stream = Arc::new(Stream::default());
        publish(&stream, 1, 100);
        let s = shared(&stream);
        let views: Vec<_> = (0..7).map(|p| s.view(p, 0, &format!("t.p{p}"))).collect();
        let reads = futures_util::future::join_all(views.iter().map(|v| v.read_after(0, 1_000))).await;
        for (p, r) in reads.into_iter().enumerate() {
            assert_eq!(seqs(&r.expect("read")), expected(0, 100, p as u16), "partition {p}");
        }
        assert_eq!(stream.reads.load(Ordering::SeqCst), 1, "seven concurrent reads, one fetch");
        assert_eq!(*stream.opened.lock().expect("lock"), vec![0]);
        // Caught up: one fetch per round of reads, not one per partition.
        let before = stream.reads.load(Ordering::SeqCst);
        let reads = futures_util::future::join_all(views.iter().map(|v| v.read_after(100, 1_000))).await;
        assert!(reads.iter().all(|r| r.as_ref().expect("read").is_empty()));
        assert_eq!(stream.reads.load(Ordering::SeqCst) - before, 1);
    }

    #[tokio::test]
    async fn uncommitted_events_are_served_again_and_committed_ones_dropped() {
        let stream = Arc::new(Stream::default());
        publish(&stream, 1, 70);
        let s = shared(&stream);
        let v = s.view(3, 0, "t.p3");
        let first = seqs(&v.read_after(0, 1_000).await.expect("read"));
        assert_eq!(first, expected(0, 70, 3));
        // A failed commit: the reader reads again from its committed position.
        assert_eq!(seqs(&v.read_after(0, 1_000).await.expect("read")), first);
        v.committed(first[4]).await.expect("read");
        assert_eq!(seqs(&v.read_after(first[4], 1_000).await.expect("read")), first[5..].to_vec());
        // `max` bounds a read; the rest comes next.
        let two = seqs(&v.read_after(first[4], 2).await.expect("read"));
        assert_eq!(two, first[5..7].to_vec());
        // Going back past the committed position reads the partition again from the stream.
        assert_eq!(seqs(&v.read_after(0, 1_000).await.expect("read")), first);
        assert_eq!(*stream.opened.lock().expect("lock"), vec![0, 0], "went back with a new stream reader");
    }

    #[tokio::test]
    async fn a_partition_taken_behind_the_reader_is_read_from_its_own_position() {
        let stream = Arc::new(Stream::default());
        publish(&stream, 1, 200);
        let s = shared(&stream);
        let a = s.view(1, 150, "t.p1");
        assert_eq!(seqs(&a.read_after(150, 1_000).await.expect("read")), expected(150, 200, 1));
        // Partition 2 is taken at 40, far behind the reader (at 200).
        let b = s.view(2, 40, "t.p2");
        assert_eq!(seqs(&b.read_after(40, 1_000).await.expect("read")), expected(40, 200, 2));
        assert_eq!(*stream.opened.lock().expect("lock"), vec![150, 40]);
        // Partition 1 got nothing twice from the re-read: read again from its position, each
        // event once.
        assert_eq!(seqs(&a.read_after(150, 1_000).await.expect("read")), expected(150, 200, 1));
        publish(&stream, 201, 50);
        assert_eq!(seqs(&a.read_after(200, 1_000).await.expect("read")), expected(200, 250, 1));
        assert_eq!(seqs(&b.read_after(200, 1_000).await.expect("read")), expected(200, 250, 2));
        // A partition given back is forgotten; one not held never buffers.
        drop(b);
        assert!(s.lock_views().get(&2).is_none());
        assert!(s.lock_views().get(&4).is_none());
        // A view replaced by a newer one of the same partition is closed.
        let a2 = s.view(1, 250, "t.p1");
        assert!(a.read_after(250, 10).await.is_err());
        drop(a);
        assert!(a2.read_after(250, 10).await.expect("read").is_empty());
    }

    /// A reader that gives up waiting (the notifier bounds each read to a second) does not
    /// cut the fetch short: on a real stream that lost the batch's deliveries and made the
    /// stream consumer start over, again and again on a slow server. What the fetch brings is
    /// there for the next read.
    #[tokio::test]
    async fn a_read_given_up_on_does_not_cut_its_fetch_short() {
        let stream = Arc::new(Stream::default());
        publish(&stream, 1, 50);
        *stream.slow.lock().expect("lock") = Duration::from_millis(200);
        let s = shared(&stream);
        let v = s.view(5, 0, "t.p5");
        let given_up = tokio::time::timeout(Duration::from_millis(20), v.read_after(0, 1_000)).await;
        assert!(given_up.is_err(), "the read was given up on");
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(stream.cut.load(Ordering::SeqCst), 0, "the fetch was cut short");
        let reads = stream.reads.load(Ordering::SeqCst);
        assert_eq!(seqs(&v.read_after(0, 1_000).await.expect("read")), expected(0, 50, 5));
        assert_eq!(stream.reads.load(Ordering::SeqCst), reads, "served from what the first fetch brought");
    }

    #[tokio::test]
    async fn a_message_of_several_events_is_not_split() {
        let stream = Arc::new(Stream::default());
        {
            let mut events = stream.events.lock().expect("lock");
            for seq in 1..=5 {
                // Three events per stream message, all of post 64 * seq (partition 0).
                events.extend((0..3).map(|_| like(seq, 64 * seq)));
            }
        }
        let s = shared(&stream);
        let v = s.view(0, 0, "t.p0");
        let got = seqs(&v.read_after(0, 4).await.expect("read"));
        assert_eq!(got, vec![1, 1, 1, 2, 2, 2], "the second message whole");
    }
}
