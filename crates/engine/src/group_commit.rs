//! Group commit: many concurrent writes (likes, comment changes), one atomic batch, one fsync.
//!
//! Requests go into an unbounded queue (bounded in practice by a semaphore of in-flight
//! requests). One writer thread takes everything queued (up to `max_batch`), lingers up to
//! `max_delay` if the batch is still small, and applies it with [`WriteEngine::apply`]. A
//! syncer thread then makes it durable with one [`WriteEngine::sync`] (batches applied during
//! an fsync share the next one); only then does each caller get its outcome. While a batch
//! is being synced the writer resolves and applies the next, so batches grow with load and
//! the per-like cost of the fsync shrinks: that is how one hot post takes hundreds of
//! thousands of likes per second without a hot row. Requests are applied in queue order, so
//! two writes of the same (target, user) resolve in arrival order.

use likewise_core::comment::appeal::HeldBy;
use likewise_core::comment::idempotency::Keyed;
use likewise_core::like::{LikeOp, LikeOutcome};
use likewise_core::ports::WriteEngine;
use likewise_core::write::{CommentOp, CommentOutcome, CommentRecord, WriteOp, WriteOutcome};
use likewise_core::{StoreError, StoreResult};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, oneshot};

use crate::write_gate::{OpGate, RequestWrites};

/// Most operations in one write batch (`write.max_batch`): a scale-out engine packs a batch's
/// events of one partition into one outbox row, which indexes them in 16 bits.
pub const MAX_BATCH: usize = 65_535;

/// Group-commit tuning.
#[derive(Debug, Clone)]
pub struct GroupCommitOptions {
    /// Most operations in one batch.
    pub max_batch: usize,
    /// How long a small batch may wait for company before it is written.
    pub max_delay: Duration,
    /// Most requests queued or in flight; further callers wait (backpressure).
    pub max_in_flight: usize,
    /// Independent writer threads. Operations on one key (a like's target and user, a
    /// comment) always take the same lane, so per-key order holds; different lanes commit in
    /// parallel. One lane for the embedded engine (one journal, one fsync); several for
    /// PostgreSQL, whose transactions on one shard run concurrently.
    pub lanes: usize,
}

impl Default for GroupCommitOptions {
    fn default() -> Self {
        GroupCommitOptions { max_batch: 8192, max_delay: Duration::ZERO, max_in_flight: 65_536, lanes: 1 }
    }
}

/// A committed operation: its outcome and its position in the global commit order (used by
/// caches to apply the viewer's own writes in the order they really happened).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed<T> {
    /// What the operation did.
    pub outcome: T,
    /// Strictly increasing over all operations of this process.
    pub order: u64,
}

enum Msg {
    /// An operation, where to answer it, and its request's gate (`write_gate`).
    Op(WriteOp, Reply, Option<Arc<OpGate>>),
    /// From the syncer: this many applied batches are durable and answered.
    Synced(usize),
    Close,
}

/// Handle to the writer thread. Clone freely; `close` stops it after draining.
pub struct GroupCommitter {
    tx: parking_lot::Mutex<Vec<Sender<Msg>>>,
    load: Arc<Load>,
    permits: Arc<Semaphore>,
    threads: parking_lot::Mutex<Vec<JoinHandle<()>>>,
}

/// The lane of an operation: a function of the key it changes.
fn lane_of(op: &WriteOp, lanes: usize) -> usize {
    if lanes <= 1 {
        return 0;
    }
    let key = match op {
        WriteOp::Like(l) => {
            l.target.id.wrapping_mul(31).wrapping_add(l.user.0) ^ u64::from(l.target.kind.code())
        }
        WriteOp::Comment(CommentOp::Create(r, _)) | WriteOp::KeyedComment(r, _, _) => r.post.0,
        WriteOp::Comment(CommentOp::SetStatus { id, .. } | CommentOp::Delete { id, .. }) => id.0,
    };
    ((key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % lanes as u64) as usize
}

/// How long an operation the engine hands back (`WriteEngine::retry_later`: a bucket move's
/// fence) is run again in later batches before its caller hears the engine's error. A fence
/// lasts about a second.
const RETRY_LATER_FOR: Duration = Duration::from_secs(10);

/// How soon operations handed back run again when no other write comes to take them along.
const RETRY_LATER_AFTER: Duration = Duration::from_millis(25);

/// An operation handed back by the engine, waiting for a later batch.
struct Later {
    op: WriteOp,
    reply: Reply,
    gate: Option<Arc<OpGate>>,
    /// When the engine first handed it back.
    since: Instant,
}

/// Fewest queued writes that admission control ever refuses to join: below it, the queue
/// drains within a few batches whatever the estimate says.
const SHED_FLOOR: usize = 256;

/// Capacity samples a lane needs before its rate is trusted to refuse a write.
const MIN_SAMPLES: u64 = 4;

/// What admission control knows: writes queued or committing, and each lane's commit
/// capacity as measured by its full rounds.
struct Load {
    queued: AtomicU64,
    lanes: Vec<LaneRate>,
    /// Fewest operations in a round for the round to measure capacity (the writer's "big
    /// enough" batch): a smaller round was short of work, not of capacity.
    full_round: usize,
}

/// One lane's capacity estimate.
#[derive(Default)]
struct LaneRate {
    /// Operations per second of its full rounds, as `f64` bits.
    rate: AtomicU64,
    /// Full rounds measured so far.
    samples: AtomicU64,
}

impl Load {
    fn new(lanes: usize, full_round: usize) -> Self {
        Load {
            queued: AtomicU64::new(0),
            lanes: (0..lanes).map(|_| LaneRate::default()).collect(),
            full_round,
        }
    }

    /// The expected wait, in seconds, of a write that joins the queue now: `None` while no
    /// lane has measured its capacity, as on a fresh or lightly used node. Only a measured
    /// capacity may refuse a write: an unknown one used to be taken as 1 write/s, and a fresh
    /// node shed a burst of a few hundred writes that one batch takes in milliseconds.
    fn expected_wait(&self) -> Option<f64> {
        let (sum, measured) = self
            .lanes
            .iter()
            .filter(|l| l.samples.load(Ordering::Relaxed) >= MIN_SAMPLES)
            .map(|l| f64::from_bits(l.rate.load(Ordering::Relaxed)))
            .fold((0.0, 0usize), |(sum, n), r| (sum + r, n + 1));
        if measured == 0 {
            return None;
        }
        // Lanes share the writes evenly (a hash of the key): the unmeasured ones are taken to
        // commit as fast as the measured ones.
        let rate = sum / measured as f64 * self.lanes.len() as f64;
        Some(self.queued.load(Ordering::Relaxed) as f64 / rate.max(1.0))
    }

    /// A lane answered `ops` writes `elapsed` after its first one was applied. A full round
    /// (at least `full_round` writes) folds its rate into the lane's capacity; a smaller one
    /// says how much work there was, not how fast the lane can go, and is ignored.
    fn record(&self, lane: usize, ops: usize, elapsed: Duration) {
        let Some(l) = self.lanes.get(lane) else { return };
        if ops < self.full_round {
            return;
        }
        let now = ops as f64 / elapsed.as_secs_f64().max(1e-4);
        let before = f64::from_bits(l.rate.load(Ordering::Relaxed));
        let next = if l.samples.load(Ordering::Relaxed) == 0 { now } else { 0.8 * before + 0.2 * now };
        l.rate.store(next.to_bits(), Ordering::Relaxed);
        l.samples.fetch_add(1, Ordering::Relaxed);
    }
}

/// Counts a write as queued until its caller has its answer or gives up.
struct Queued<'a>(&'a AtomicU64);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl GroupCommitter {
    /// Start the writer thread over `engine`.
    pub fn start(engine: Arc<dyn WriteEngine>, opts: GroupCommitOptions) -> Arc<Self> {
        let order = Arc::new(AtomicU64::new(0));
        let lanes = opts.lanes.max(1);
        let load = Arc::new(Load::new(lanes, full_round(opts.max_batch)));
        let mut txs = Vec::new();
        let mut threads = Vec::new();
        for lane in 0..lanes {
            let (tx, rx) = channel();
            let (o, engine, order, wake) = (opts.clone(), engine.clone(), order.clone(), tx.clone());
            let load = load.clone();
            if let Ok(t) = std::thread::Builder::new()
                .name(format!("likewise-group-commit-{lane}"))
                .spawn(move || writer_loop(engine, rx, wake, o, order, (lane, load)))
            {
                txs.push(tx);
                threads.push(t);
            }
        }
        Arc::new(GroupCommitter {
            tx: parking_lot::Mutex::new(txs),
            load,
            permits: Arc::new(Semaphore::new(opts.max_in_flight)),
            threads: parking_lot::Mutex::new(threads),
        })
    }

    /// Submit a like/unlike and wait until its batch is durable.
    pub async fn submit(&self, op: LikeOp) -> StoreResult<Committed<LikeOutcome>> {
        let c = self.submit_op(WriteOp::Like(op)).await?;
        match c.outcome {
            WriteOutcome::Like(outcome) => Ok(Committed { outcome, order: c.order }),
            WriteOutcome::Comment(_) => {
                Err(StoreError::Engine("engine answered a like with a comment outcome".into()))
            }
        }
    }

    /// Submit a comment change and wait until its batch is durable.
    pub async fn submit_comment(&self, op: CommentOp) -> StoreResult<Committed<CommentOutcome>> {
        self.submit_comment_op(WriteOp::Comment(op)).await
    }

    /// Create a comment under an `Idempotency-Key` (see `WriteOp::KeyedComment`): the key is
    /// committed with the comment, or the stored key is answered as
    /// [`CommentOutcome::Replayed`].
    pub async fn submit_keyed_comment(
        &self,
        record: CommentRecord,
        held_by: Option<HeldBy>,
        keyed: Keyed,
    ) -> StoreResult<Committed<CommentOutcome>> {
        self.submit_comment_op(WriteOp::KeyedComment(record, held_by, keyed)).await
    }

    async fn submit_comment_op(&self, op: WriteOp) -> StoreResult<Committed<CommentOutcome>> {
        let c = self.submit_op(op).await?;
        match c.outcome {
            WriteOutcome::Comment(outcome) => Ok(Committed { outcome, order: c.order }),
            WriteOutcome::Like(_) => {
                Err(StoreError::Engine("engine answered a comment with a like outcome".into()))
            }
        }
    }

    /// Submit one operation and wait until its batch is durable.
    ///
    /// Admission control: inside a request with a deadline (`write_gate`), a write that would
    /// wait in the queue past that deadline is refused at once with [`StoreError::Shed`]
    /// rather than queued to time out: under overload, the capacity goes to writes that can
    /// still be answered in time.
    pub async fn submit_op(&self, mut op: WriteOp) -> StoreResult<Committed<WriteOutcome>> {
        // A like made under a sampled trace carries its context into its event.
        if let WriteOp::Like(l) = &mut op
            && l.trace.is_none()
        {
            l.trace = likewise_core::trace::current();
        }
        if let Some(deadline) = RequestWrites::deadline() {
            let queued = self.load.queued.load(Ordering::Relaxed) as usize;
            let left = deadline.saturating_duration_since(Instant::now()).as_secs_f64();
            if queued >= SHED_FLOOR
                && let Some(wait) = self.load.expected_wait()
                && wait > left
            {
                metrics::counter!("likewise_group_commit_shed_total").increment(1);
                return Err(StoreError::Shed { retry_after_secs: wait.ceil().clamp(1.0, 30.0) as u64 });
            }
        }
        self.load.queued.fetch_add(1, Ordering::Relaxed);
        let _queued = Queued(&self.load.queued);
        let _permit = self.permits.acquire().await.map_err(|_| StoreError::Closed)?;
        let (reply, rx) = oneshot::channel();
        {
            let tx = self.tx.lock();
            let lane = lane_of(&op, tx.len());
            let tx = tx.get(lane).ok_or(StoreError::Closed)?;
            tx.send(Msg::Op(op, reply, RequestWrites::gate())).map_err(|_| StoreError::Closed)?;
        }
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Stop taking requests, write and sync everything already queued, join the threads.
    ///
    /// An engine may need the Tokio runtime to make progress (PostgreSQL's writer lanes
    /// `block_on` their queries): called on one of its worker threads, the join runs in
    /// `block_in_place`, so the other workers keep driving that I/O meanwhile. Joining on the
    /// worker itself would leave nobody to drive it on a one-worker runtime.
    pub fn close(&self) {
        self.stop();
        let threads = std::mem::take(&mut *self.threads.lock());
        let join = move || {
            for t in threads {
                let _ = t.join();
            }
        };
        let on_worker = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if on_worker { tokio::task::block_in_place(join) } else { join() }
    }

    fn stop(&self) {
        for tx in std::mem::take(&mut *self.tx.lock()) {
            let _ = tx.send(Msg::Close);
        }
    }
}

/// How long a dropped committer waits for its threads (see the `Drop` impl).
const DROP_WAIT: Duration = Duration::from_secs(5);

impl Drop for GroupCommitter {
    /// Like `close`, but bounded. The last handle can be dropped while the runtime shuts
    /// down (tasks cancelled on an error path); an engine that needs the runtime then never
    /// finishes its batch, and an unbounded join hung the process for good. An engine that
    /// does not (the embedded store) finishes in milliseconds. Threads still running after
    /// `DROP_WAIT` are left to end with the process; their callers were never answered, so
    /// nothing unacknowledged is lost.
    fn drop(&mut self) {
        self.stop();
        let until = Instant::now() + DROP_WAIT;
        for t in std::mem::take(&mut *self.threads.lock()) {
            while !t.is_finished() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(1));
            }
            if t.is_finished() {
                let _ = t.join();
            } else {
                tracing::error!("a group-commit lane did not finish its batch after shutdown; leaving it");
            }
        }
    }
}

/// A batch big enough to be applied without waiting for the syncer, and big enough for its
/// round to measure the lane's capacity.
fn full_round(max_batch: usize) -> usize {
    (max_batch / 16).max(1)
}

type Reply = oneshot::Sender<StoreResult<Committed<WriteOutcome>>>;
type Replies = Vec<Reply>;

/// A batch the writer has applied (visible, not yet durable), on its way to the syncer: one
/// result per operation (an engine whose batch spans several servers can commit part of it).
struct Applied {
    outcomes: Vec<StoreResult<WriteOutcome>>,
    replies: Replies,
    /// When the writer began applying it.
    started: Instant,
    /// The round's span (disabled unless one of its writes is traced): it ends once the
    /// batch is durable and answered.
    span: tracing::Span,
}

fn writer_loop(
    engine: Arc<dyn WriteEngine>,
    rx: Receiver<Msg>,
    wake: Sender<Msg>,
    opts: GroupCommitOptions,
    order: Arc<AtomicU64>,
    (lane, load): (usize, Arc<Load>),
) {
    let m = WriterMetrics::new();
    // The fsync runs on a thread of its own (`syncer_loop`), so this thread resolves and
    // applies the next batch meanwhile instead of idling through every fsync.
    let (to_syncer, applied_rx) = channel::<Applied>();
    let (recycle, recycled) = channel::<Replies>();
    let syncer = {
        let (engine, order, m, recycle, load) =
            (engine.clone(), order.clone(), m.clone(), recycle.clone(), load.clone());
        std::thread::Builder::new()
            .name(format!("{}-sync", std::thread::current().name().unwrap_or("likewise-group-commit")))
            .spawn(move || syncer_loop(&*engine, applied_rx, recycle, wake, &order, &m, (lane, &load)))
    };
    let syncer = match syncer {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::error!(error = %e, "cannot start the group-commit syncer; syncing on the writer thread");
            None
        }
    };
    // Batches with the syncer, not yet answered.
    let mut syncing = 0usize;
    let mut closing = false;
    let mut first_at = Instant::now();
    // Reused from batch to batch: allocating them afresh showed in profiles as page faults.
    let mut ops: Vec<WriteOp> = Vec::with_capacity(opts.max_batch.min(4096));
    let mut replies: Replies = Vec::with_capacity(opts.max_batch.min(4096));
    let mut gates: Vec<Option<Arc<OpGate>>> = Vec::with_capacity(opts.max_batch.min(4096));
    // For each operation of the batch handed back before, when that first happened.
    let mut since: Vec<Option<Instant>> = Vec::with_capacity(opts.max_batch.min(4096));
    // Operations the engine handed back (`WriteEngine::retry_later`), in their order: they
    // wait for a later batch off this one, so the lane answers the writes beside them and
    // goes on; they run first in the next batch (before any later write of the same key),
    // or on their own after `RETRY_LATER_AFTER`.
    let mut later: Vec<Later> = Vec::new();
    let mut later_at = Instant::now();
    let enough = full_round(opts.max_batch);
    loop {
        if !later.is_empty() && (closing || !ops.is_empty() || Instant::now() >= later_at) {
            if ops.is_empty() {
                first_at = Instant::now();
            }
            let n = later.len() + ops.len();
            let (mut o, mut r, mut g, mut s) =
                (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
            for l in later.drain(..) {
                o.push(l.op);
                r.push(l.reply);
                g.push(l.gate);
                s.push(Some(l.since));
            }
            o.append(&mut ops);
            r.append(&mut replies);
            g.append(&mut gates);
            s.resize(n, None);
            (ops, replies, gates, since) = (o, r, g, s);
        }
        since.resize(ops.len(), None);
        // Apply when the syncer can take the batch at once, or when it is big enough to be
        // worth its own commit. While an fsync runs, a batch applied now could only be
        // answered after the NEXT fsync anyway: applying every straggler as it arrives
        // measured as thousands of one-like commits that share the same fsyncs.
        let small = ops.len() < enough;
        let linger = small && !closing && first_at.elapsed() < opts.max_delay;
        let ready = !ops.is_empty() && (closing || (!small || syncing == 0) && !linger);
        if !ready {
            if closing && ops.is_empty() && later.is_empty() {
                break;
            }
            let first = if ops.is_empty() && !later.is_empty() {
                match rx.recv_timeout(later_at.saturating_duration_since(Instant::now())) {
                    Ok(m) => m,
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => Msg::Close,
                }
            } else if linger && syncing == 0 {
                match rx.recv_timeout(opts.max_delay.saturating_sub(first_at.elapsed())) {
                    Ok(m) => m,
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => Msg::Close,
                }
            } else {
                rx.recv().unwrap_or(Msg::Close)
            };
            // Then everything else already queued, up to a full batch.
            let mut next = Some(first);
            while let Some(msg) = next {
                match msg {
                    Msg::Op(op, r, g) => {
                        if ops.is_empty() {
                            first_at = Instant::now();
                        }
                        ops.push(op);
                        replies.push(r);
                        gates.push(g);
                    }
                    Msg::Synced(n) => syncing -= n,
                    Msg::Close => closing = true,
                }
                next = if ops.len() < opts.max_batch { rx.try_recv().ok() } else { None };
            }
            continue;
        }
        // The batch takes only operations whose callers still wait: a request past its
        // deadline cancelled its queued writes, a disconnected client dropped its answer.
        // Running them would store what nobody is told of, and under overload it would spend
        // the capacity on work already given up (`write_gate`).
        let queued = ops.len();
        take_live(&mut ops, &mut replies, &mut gates, &mut since);
        if ops.len() < queued {
            m.dropped.increment((queued - ops.len()) as u64);
        }
        if ops.is_empty() {
            continue;
        }
        let started = Instant::now();
        let span = likewise_core::trace::span(ops.iter().filter_map(op_trace), || {
            tracing::info_span!(target: likewise_core::trace::TARGET, "group_commit",
                engine = engine.name(), lane = lane as i64, batch_size = ops.len() as i64)
        });
        let mut outcomes = span.in_scope(|| engine.apply_each(&ops));
        m.batch_size.record(ops.len() as f64);
        m.apply.record(started.elapsed().as_secs_f64());
        if !closing && outcomes.iter().any(|o| o.as_ref().is_err_and(|e| engine.retry_later(e))) {
            let mut kept = (Vec::with_capacity(outcomes.len()), Vec::with_capacity(outcomes.len()));
            let batch = ops.drain(..).zip(replies.drain(..)).zip(gates.drain(..)).zip(since.drain(..));
            for ((((op, reply), gate), first), outcome) in batch.zip(outcomes) {
                let first = first.unwrap_or(started);
                match outcome {
                    Err(e) if engine.retry_later(&e) && first.elapsed() < RETRY_LATER_FOR => {
                        if let Some(g) = &gate {
                            g.requeue();
                        }
                        later.push(Later { op, reply, gate, since: first });
                    }
                    o => {
                        kept.0.push(o);
                        kept.1.push(reply);
                    }
                }
            }
            m.handed_back.increment(later.len() as u64);
            later_at = Instant::now() + RETRY_LATER_AFTER;
            (outcomes, replies) = kept;
            if replies.is_empty() {
                continue;
            }
        }
        ops.clear();
        gates.clear();
        since.clear();
        let next = recycled.try_recv().unwrap_or_else(|_| Vec::with_capacity(opts.max_batch.min(4096)));
        let batch = Applied { outcomes, replies: std::mem::replace(&mut replies, next), started, span };
        if syncer.is_some() {
            syncing += 1;
            // The syncer only ends when this sender is dropped, below.
            let _ = to_syncer.send(batch);
        } else {
            sync_and_answer(&*engine, vec![batch], &recycle, &order, &m, (lane, &load));
        }
    }
    // Anything left in the queue after Close gets `Closed` when its sender is dropped here;
    // everything applied is synced and answered before `close` returns.
    drop(to_syncer);
    if let Some(t) = syncer {
        let _ = t.join();
    }
}

/// Make applied batches durable and answer their callers. Batches that queue up while an
/// fsync runs share the next one.
fn syncer_loop(
    engine: &dyn WriteEngine,
    rx: Receiver<Applied>,
    recycle: Sender<Replies>,
    wake: Sender<Msg>,
    order: &AtomicU64,
    m: &WriterMetrics,
    load: (usize, &Load),
) {
    while let Ok(first) = rx.recv() {
        let mut batches = vec![first];
        batches.extend(rx.try_iter());
        let n = batches.len();
        sync_and_answer(engine, batches, &recycle, order, m, load);
        let _ = wake.send(Msg::Synced(n));
    }
}

/// One fsync for `batches`, all applied before it starts; then every caller gets its
/// outcome, in commit order. Nobody hears "done" before the fsync that covers their write.
fn sync_and_answer(
    engine: &dyn WriteEngine,
    batches: Vec<Applied>,
    recycle: &Sender<Replies>,
    order: &AtomicU64,
    m: &WriterMetrics,
    (lane, load): (usize, &Load),
) {
    let first_applied = batches.iter().map(|b| b.started).min();
    let ops: usize = batches.iter().map(|b| b.replies.len()).sum();
    let started = Instant::now();
    let synced =
        if batches.iter().any(|b| b.outcomes.iter().any(|o| o.is_ok())) { engine.sync() } else { Ok(()) };
    m.fsync.record(started.elapsed().as_secs_f64());
    if let Some(t) = first_applied {
        load.record(lane, ops, t.elapsed());
    }
    for Applied { outcomes, mut replies, span, .. } in batches {
        let first = order.fetch_add(replies.len() as u64, Ordering::SeqCst);
        let mut failed: Option<StoreError> = None;
        for (k, (reply, outcome)) in replies.drain(..).zip(outcomes).enumerate() {
            let answer = match (&synced, outcome) {
                (Ok(()), Ok(outcome)) => Ok(Committed { outcome, order: first + 1 + k as u64 }),
                // Each request hears the same kind of failure: a server out of reach stays a
                // 503 for every request it failed, not a 500.
                (Err(e), _) => Err(e.duplicate()),
                (Ok(()), Err(e)) => Err(e),
            };
            if let (Err(e), None) = (&answer, &failed) {
                failed = Some(e.duplicate());
            }
            let _ = reply.send(answer);
        }
        if let Some(e) = failed {
            // A refusal (a full disk) is logged by the engine once when it begins and once
            // when it ends, not for every batch it refuses meanwhile.
            if !matches!(e, StoreError::Refused { .. }) {
                tracing::error!(error = %likewise_core::error::chain(&e), "group commit failed");
            }
            m.failures.increment(1);
        }
        let _ = recycle.send(replies);
        drop(span);
    }
}

/// The trace context a write carries (likes made under a sampled trace).
fn op_trace(op: &WriteOp) -> Option<likewise_core::trace::TraceContext> {
    match op {
        WriteOp::Like(l) => l.trace,
        _ => None,
    }
}

/// Keep only the operations whose callers still wait for them, taking each into the batch
/// (`OpGate::take`); the three vectors stay aligned.
fn take_live(
    ops: &mut Vec<WriteOp>,
    replies: &mut Replies,
    gates: &mut Vec<Option<Arc<OpGate>>>,
    since: &mut Vec<Option<Instant>>,
) {
    let live: Vec<bool> = replies
        .iter()
        .zip(gates.iter())
        .map(|(r, g)| !r.is_closed() && g.as_ref().is_none_or(|g| g.take()))
        .collect();
    if live.iter().all(|l| *l) {
        return;
    }
    let mut keep = live.iter();
    ops.retain(|_| *keep.next().unwrap_or(&true));
    let mut keep = live.iter();
    replies.retain(|_| *keep.next().unwrap_or(&true));
    let mut keep = live.iter();
    gates.retain(|_| *keep.next().unwrap_or(&true));
    let mut keep = live.iter();
    since.retain(|_| *keep.next().unwrap_or(&true));
}

/// The writer's metric handles, registered once: a registry lookup per batch showed in profiles.
#[derive(Clone)]
struct WriterMetrics {
    batch_size: metrics::Histogram,
    apply: metrics::Histogram,
    fsync: metrics::Histogram,
    failures: metrics::Counter,
    dropped: metrics::Counter,
    handed_back: metrics::Counter,
}

impl WriterMetrics {
    fn new() -> Self {
        WriterMetrics {
            batch_size: metrics::histogram!("likewise_group_commit_batch_size"),
            apply: metrics::histogram!("likewise_group_commit_apply_seconds"),
            fsync: metrics::histogram!("likewise_group_commit_fsync_seconds"),
            failures: metrics::counter!("likewise_group_commit_failures_total"),
            dropped: metrics::counter!("likewise_group_commit_dropped_total"),
            handed_back: metrics::counter!("likewise_group_commit_handed_back_total"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use likewise_core::ids::UserId;
    use likewise_core::like::{LikeAction, Target};
    use parking_lot::{Condvar, Mutex};

    /// An engine that numbers ops in apply order and records, for each fsync, how many ops
    /// had been applied when it began. `hold` makes fsyncs wait until released.
    #[derive(Default)]
    struct Recorder {
        state: Mutex<RecState>,
        changed: Condvar,
    }

    #[derive(Default)]
    struct RecState {
        applied: u64,
        /// Ops applied before the last finished fsync began: all durable.
        durable: u64,
        syncing: bool,
        hold: bool,
        fail_sync: bool,
    }

    impl WriteEngine for Recorder {
        fn apply(&self, ops: &[WriteOp]) -> StoreResult<Vec<WriteOutcome>> {
            let mut s = self.state.lock();
            let first = s.applied;
            s.applied += ops.len() as u64;
            self.changed.notify_all();
            Ok((0..ops.len() as u64)
                .map(|k| {
                    WriteOutcome::Like(LikeOutcome { liked: true, changed: true, event_seq: Some(first + k) })
                })
                .collect())
        }

        fn sync(&self) -> StoreResult<()> {
            let mut s = self.state.lock();
            let covered = s.applied;
            s.syncing = true;
            self.changed.notify_all();
            while s.hold {
                self.changed.wait(&mut s);
            }
            std::thread::sleep(Duration::from_micros(200));
            s.syncing = false;
            if s.fail_sync {
                return Err(StoreError::Engine("disk on fire".into()));
            }
            s.durable = covered;
            Ok(())
        }
    }

    fn op(user: u64) -> LikeOp {
        LikeOp {
            target: Target::post(1),
            user: UserId(user),
            action: LikeAction::Like,
            target_author: UserId(0),
            post: 1,
            ts_ms: 0,
            trace: None,
        }
    }

    fn opts(max_batch: usize) -> GroupCommitOptions {
        GroupCommitOptions { max_batch, ..Default::default() }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn nobody_hears_done_before_the_fsync_that_covers_their_write() {
        let engine = Arc::new(Recorder::default());
        let gc = GroupCommitter::start(engine.clone(), opts(64));
        let mut tasks = Vec::new();
        for t in 0..32u64 {
            let (gc, engine) = (gc.clone(), engine.clone());
            tasks.push(tokio::spawn(async move {
                for i in 0..100 {
                    let c = gc.submit(op(t * 1000 + i)).await.expect("test step");
                    let index = c.outcome.event_seq.expect("test step");
                    let durable = engine.state.lock().durable;
                    assert!(index < durable, "op {index} answered with only {durable} ops durable");
                }
            }));
        }
        for t in tasks {
            t.await.expect("test step");
        }
        gc.close();
        assert_eq!(engine.state.lock().applied, 3200);
    }

    /// Hold the engine's fsyncs and start one write, which is then being synced: the next
    /// small writes wait in the writer's queue.
    async fn one_write_held_in_fsync(
        engine: &Arc<Recorder>,
        gc: &Arc<GroupCommitter>,
    ) -> tokio::task::JoinHandle<StoreResult<Committed<LikeOutcome>>> {
        engine.state.lock().hold = true;
        let first = tokio::spawn({
            let gc = gc.clone();
            async move { gc.submit(op(1)).await }
        });
        let mut s = engine.state.lock();
        while !s.syncing {
            let timed_out = engine.changed.wait_for(&mut s, Duration::from_secs(10)).timed_out();
            assert!(!timed_out, "the first batch was never synced");
        }
        first
    }

    fn release(engine: &Recorder) {
        engine.state.lock().hold = false;
        engine.changed.notify_all();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_whose_request_gave_up_before_its_batch_never_runs() {
        let engine = Arc::new(Recorder::default());
        let gc = GroupCommitter::start(engine.clone(), opts(64));
        let first = one_write_held_in_fsync(&engine, &gc).await;
        let req = Arc::new(RequestWrites::default());
        let second = tokio::spawn(req.clone().scope({
            let gc = gc.clone();
            async move { gc.submit(op(2)).await }
        }));
        while req.writes() == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let must_wait = req.cancel_pending();
        release(&engine);
        assert!(!must_wait, "the second write was still queued: the request may give up");
        first.await.expect("test step").expect("the first write");
        assert!(second.await.expect("test step").is_err(), "a cancelled write has no outcome");
        gc.submit(op(3)).await.expect("a later write");
        assert_eq!(engine.state.lock().applied, 2, "the cancelled write was applied");
        gc.close();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_whose_caller_disconnected_before_its_batch_never_runs() {
        let engine = Arc::new(Recorder::default());
        let gc = GroupCommitter::start(engine.clone(), opts(64));
        let first = one_write_held_in_fsync(&engine, &gc).await;
        let (queued_tx, queued) = tokio::sync::oneshot::channel();
        let second = tokio::spawn({
            let gc = gc.clone();
            async move {
                let submit = gc.submit(op(2));
                tokio::pin!(submit);
                // Polled once (so it is queued), then dropped as a disconnected client's
                // handler is.
                assert!(futures_util_poll_once(submit.as_mut()).await.is_none());
                let _ = queued_tx.send(());
                std::future::pending::<()>().await;
            }
        });
        queued.await.expect("queued");
        second.abort();
        let _ = second.await;
        release(&engine);
        first.await.expect("test step").expect("the first write");
        gc.submit(op(3)).await.expect("a later write");
        assert_eq!(engine.state.lock().applied, 2, "the abandoned write was applied");
        gc.close();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_that_would_outwait_its_deadline_is_refused_at_once() {
        let engine = Arc::new(Recorder::default());
        let gc = GroupCommitter::start(engine.clone(), opts(64));
        // A lane measured at 64 writes/s over full rounds ...
        for _ in 0..MIN_SAMPLES {
            gc.load.record(0, 64, Duration::from_secs(1));
        }
        let first = one_write_held_in_fsync(&engine, &gc).await;
        // ... and a queue it would take seconds to drain.
        let queued: Vec<_> = (0..SHED_FLOOR as u64)
            .map(|u| {
                let gc = gc.clone();
                tokio::spawn(async move { gc.submit(op(10 + u)).await })
            })
            .collect();
        while (gc.load.queued.load(Ordering::Relaxed) as usize) <= SHED_FLOOR {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let within_a_second = || Arc::new(RequestWrites::until(Instant::now() + Duration::from_secs(1)));
        // Refused at once: it must not join the held queue (bounded, so a regression fails
        // instead of hanging).
        let shed =
            tokio::time::timeout(Duration::from_secs(5), within_a_second().scope(gc.submit(op(99_999))))
                .await
                .map_err(|_| "queued instead of refused");
        assert!(matches!(shed, Ok(Err(StoreError::Shed { retry_after_secs: 1..=30 }))), "{shed:?}");
        // Without a deadline (workers, tools), a write always joins the queue.
        let patient = tokio::spawn({
            let gc = gc.clone();
            async move { gc.submit(op(99_998)).await }
        });
        release(&engine);
        first.await.expect("test step").expect("the first write");
        for q in queued {
            q.await.expect("test step").expect("a queued write");
        }
        patient.await.expect("test step").expect("the patient write");
        assert_eq!(engine.state.lock().applied, SHED_FLOOR as u64 + 2, "the refused write was applied");
        // Drained, a write with a deadline is taken again.
        within_a_second().scope(gc.submit(op(5))).await.expect("admitted once drained");
        gc.close();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fresh_node_takes_a_burst_past_the_floor() {
        let engine = Arc::new(Recorder::default());
        let gc = GroupCommitter::start(engine.clone(), GroupCommitOptions::default());
        let first = one_write_held_in_fsync(&engine, &gc).await;
        // A burst larger than the floor, before any round has measured the lane.
        let burst = SHED_FLOOR as u64 + 44;
        let queued: Vec<_> = (0..burst)
            .map(|u| {
                let gc = gc.clone();
                tokio::spawn(async move { gc.submit(op(10 + u)).await })
            })
            .collect();
        while gc.load.queued.load(Ordering::Relaxed) <= burst {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let within_a_second = Arc::new(RequestWrites::until(Instant::now() + Duration::from_secs(1)));
        let joined = tokio::spawn(within_a_second.scope({
            let gc = gc.clone();
            async move { gc.submit(op(99_999)).await }
        }));
        while gc.load.queued.load(Ordering::Relaxed) <= burst + 1 && !joined.is_finished() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        release(&engine);
        first.await.expect("test step").expect("the first write");
        for q in queued {
            q.await.expect("test step").expect("a queued write");
        }
        let joined = joined.await.expect("test step");
        assert!(joined.is_ok(), "an unmeasured capacity refused a write: {joined:?}");
        assert_eq!(engine.state.lock().applied, burst + 2);
        gc.close();
    }

    #[test]
    fn only_full_rounds_measure_a_lanes_capacity() {
        let load = Load::new(1, 512);
        load.queued.store(300, Ordering::Relaxed);
        assert_eq!(load.expected_wait(), None, "nothing measured: no wait is known");
        // Light traffic: rounds of one write each 5 ms (200/s) say nothing about capacity.
        for _ in 0..100 {
            load.record(0, 1, Duration::from_millis(5));
        }
        assert_eq!(load.expected_wait(), None, "short rounds measured a capacity");
        // Full rounds: 1,000 writes in 10 ms is 100,000/s, trusted after a few.
        for k in 0..MIN_SAMPLES {
            assert_eq!(load.expected_wait(), None, "trusted after {k} rounds");
            load.record(0, 1000, Duration::from_millis(10));
        }
        let wait = load.expected_wait().expect("measured");
        assert!((wait - 0.003).abs() < 1e-6, "{wait}");
    }

    /// Poll a future once: its output if it was ready.
    async fn futures_util_poll_once<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> Option<F::Output> {
        let mut f = Some(f);
        std::future::poll_fn(move |cx| {
            let r = f.take().map(|f| f.poll(cx));
            std::task::Poll::Ready(match r {
                Some(std::task::Poll::Ready(v)) => Some(v),
                _ => None,
            })
        })
        .await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_next_batch_is_applied_while_an_fsync_runs() {
        let engine = Arc::new(Recorder::default());
        // Batches of one: each is "big enough" to be applied without waiting for the syncer.
        let gc = GroupCommitter::start(engine.clone(), opts(1));
        engine.state.lock().hold = true;
        let first = tokio::spawn({
            let gc = gc.clone();
            async move { gc.submit(op(1)).await }
        });
        {
            let mut s = engine.state.lock();
            while !s.syncing {
                let timed_out = engine.changed.wait_for(&mut s, Duration::from_secs(10)).timed_out();
                assert!(!timed_out, "the first batch was never synced");
            }
        }
        let second = tokio::spawn({
            let gc = gc.clone();
            async move { gc.submit(op(2)).await }
        });
        let (applied_meanwhile, still_syncing) = {
            // The first batch's fsync is still held, and the second batch gets applied.
            let mut s = engine.state.lock();
            let until = Instant::now() + Duration::from_secs(10);
            while s.applied < 2 && Instant::now() < until {
                engine.changed.wait_until(&mut s, until);
            }
            let seen = (s.applied, s.syncing && s.durable == 0);
            // Released before asserting: a held fsync would hang the test's teardown.
            s.hold = false;
            engine.changed.notify_all();
            seen
        };
        assert_eq!(applied_meanwhile, 2, "the writer waited for the fsync before applying the next batch");
        assert!(still_syncing);
        assert_eq!(first.await.expect("test step").expect("test step").outcome.event_seq, Some(0));
        assert_eq!(second.await.expect("test step").expect("test step").outcome.event_seq, Some(1));
        gc.close();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_fsync_fails_the_writes_it_covered() {
        let engine = Arc::new(Recorder::default());
        engine.state.lock().fail_sync = true;
        let gc = GroupCommitter::start(engine.clone(), opts(64));
        let r = gc.submit(op(1)).await;
        assert!(matches!(r, Err(StoreError::Engine(m)) if m.contains("disk on fire")));
        engine.state.lock().fail_sync = false;
        assert!(gc.submit(op(2)).await.is_ok());
        gc.close();
    }

    /// An engine that, like PostgreSQL's, needs the runtime to finish a batch.
    struct NeedsRuntime(tokio::runtime::Handle, Arc<AtomicU64>);

    impl WriteEngine for NeedsRuntime {
        fn apply(&self, ops: &[WriteOp]) -> StoreResult<Vec<WriteOutcome>> {
            self.1.fetch_add(1, Ordering::SeqCst);
            self.0.block_on(async { tokio::time::sleep(Duration::from_millis(50)).await });
            Ok(ops
                .iter()
                .map(|_| WriteOutcome::Like(LikeOutcome { liked: true, changed: true, event_seq: None }))
                .collect())
        }

        fn sync(&self) -> StoreResult<()> {
            Ok(())
        }
    }

    /// Runs `f` on a thread of its own; true if it ended within `limit` (a hang is a failure,
    /// not a stuck test run).
    fn ends_within(limit: Duration, f: impl FnOnce() + Send + 'static) -> bool {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            f();
            let _ = tx.send(());
        });
        rx.recv_timeout(limit).is_ok()
    }

    /// A runtime with one worker, and a committer whose engine needs it; the count of
    /// batches the engine has begun.
    fn on_one_worker() -> (tokio::runtime::Runtime, Arc<GroupCommitter>, Arc<AtomicU64>) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let applies = Arc::new(AtomicU64::new(0));
        let gc = GroupCommitter::start(Arc::new(NeedsRuntime(rt.handle().clone(), applies.clone())), opts(8));
        (rt, gc, applies)
    }

    #[test]
    fn close_on_a_one_worker_runtime_lets_the_engine_finish() {
        let ended = ends_within(Duration::from_secs(20), || {
            let (rt, gc, applies) = on_one_worker();
            let answered = rt.block_on(async move {
                // On the runtime's only worker: the batch in flight needs that worker's timer.
                tokio::spawn(async move {
                    let pending = tokio::spawn({
                        let gc = gc.clone();
                        async move { gc.submit(op(1)).await }
                    });
                    while applies.load(Ordering::SeqCst) == 0 {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    gc.close();
                    pending.await.expect("task").is_ok()
                })
                .await
                .expect("task")
            });
            assert!(answered, "the batch in flight at close was not answered");
        });
        assert!(ended, "close() hung: the engine's batch needed the worker that was joining");
    }

    #[test]
    fn dropped_during_runtime_shutdown_does_not_hang() {
        let ended = ends_within(Duration::from_secs(30), || {
            let (rt, gc, applies) = on_one_worker();
            // The only handle lives in a task that is still waiting when the runtime goes.
            rt.spawn(async move {
                let _ = gc.submit(op(1)).await;
                std::future::pending::<()>().await;
            });
            while applies.load(Ordering::SeqCst) == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            drop(rt);
        });
        assert!(ended, "dropping the committer while the runtime shut down hung");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn close_answers_everything_applied() {
        let engine = Arc::new(Recorder::default());
        let gc = GroupCommitter::start(engine.clone(), opts(8));
        let tasks: Vec<_> = (0..200u64)
            .map(|u| {
                let gc = gc.clone();
                tokio::spawn(async move { gc.submit(op(u)).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(5)).await;
        tokio::task::spawn_blocking({
            let gc = gc.clone();
            move || gc.close()
        })
        .await
        .expect("test step");
        let applied = engine.state.lock().applied;
        let mut ok = 0;
        for t in tasks {
            match t.await.expect("test step") {
                Ok(_) => ok += 1,
                Err(e) => assert!(matches!(e, StoreError::Closed), "{e}"),
            }
        }
        // Every op that was applied was synced and answered Ok; the rest were refused.
        assert_eq!(ok, applied);
        assert_eq!(engine.state.lock().durable, applied);
    }

    /// An engine whose writes of user 1 are refused as "moving" (`retry_later`) while
    /// `fenced` is set, as a bucket move's fence refuses its buckets' writes.
    #[derive(Default)]
    struct Fencing {
        fenced: std::sync::atomic::AtomicBool,
        /// Every write applied, in order: (user, like or not).
        applied: Mutex<Vec<(u64, bool)>>,
    }

    impl WriteEngine for Fencing {
        fn apply(&self, _: &[WriteOp]) -> StoreResult<Vec<WriteOutcome>> {
            unreachable!("the committer calls apply_each")
        }

        fn apply_each(&self, ops: &[WriteOp]) -> Vec<StoreResult<WriteOutcome>> {
            let fenced = self.fenced.load(Ordering::Acquire);
            let mut applied = self.applied.lock();
            ops.iter()
                .map(|op| {
                    let WriteOp::Like(l) = op else { unreachable!("likes only") };
                    if fenced && l.user.0 == 1 {
                        return Err(StoreError::Engine("moving".into()));
                    }
                    applied.push((l.user.0, l.action == LikeAction::Like));
                    Ok(WriteOutcome::Like(LikeOutcome { liked: true, changed: true, event_seq: None }))
                })
                .collect()
        }

        fn retry_later(&self, e: &StoreError) -> bool {
            matches!(e, StoreError::Engine(m) if m == "moving")
        }

        fn sync(&self) -> StoreResult<()> {
            Ok(())
        }
    }

    /// A write the engine hands back (a moving bucket) waits for a later batch without holding
    /// the lane: the writes after it are answered meanwhile, its own key's next write waits
    /// behind it, and both run, in order, once the engine takes them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_handed_back_waits_off_the_lane_and_keeps_its_place() {
        let engine = Arc::new(Fencing::default());
        engine.fenced.store(true, Ordering::Release);
        let gc = GroupCommitter::start(engine.clone(), opts(64));
        let held = tokio::spawn({
            let gc = gc.clone();
            async move { gc.submit(op(1)).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let unlike = tokio::spawn({
            let gc = gc.clone();
            async move { gc.submit(LikeOp { action: LikeAction::Unlike, ..op(1) }).await }
        });
        // Another key's writes are answered while the fence holds user 1's.
        for u in 2..20 {
            tokio::time::timeout(Duration::from_secs(1), gc.submit(op(u)))
                .await
                .expect("a write beside a held one is answered at once")
                .expect("applied");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!held.is_finished() && !unlike.is_finished(), "a held write was answered while fenced");
        assert!(engine.applied.lock().iter().all(|(u, _)| *u != 1));
        engine.fenced.store(false, Ordering::Release);
        held.await.expect("test step").expect("applied once the fence is gone");
        unlike.await.expect("test step").expect("applied once the fence is gone");
        let mine: Vec<bool> =
            engine.applied.lock().iter().filter(|(u, _)| *u == 1).map(|(_, like)| *like).collect();
        assert_eq!(mine, vec![true, false], "the like, then the unlike, each once");
        gc.close();
    }
}
