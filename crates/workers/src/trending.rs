//! The trending consumer: folds like and comment events into per-post one-minute windows
//! (`likewise_core::trending`) and saves them, with both rankings, as one snapshot together
//! with its offset (`SnapshotStore`), every `save_every`.
//!
//! It survives restarts (it resumes from the snapshot and its offset), and it is replayable:
//! delete the `trending` snapshot and it rebuilds from the start of the log's retention.
//! Replaying an event it already folded is impossible: state and offset move in one write.
//!
//! Partitions ([`run_shared`]): in a scaled-out worker role each post partition has a state,
//! a snapshot (`trending.p7`), an offset and a writer fence of its own, and one trending loop
//! per process folds every partition the process holds, saving the snapshots of those that
//! changed in one fenced write (`SnapshotStore::save_snapshots`): a process that lost a
//! partition's lease while a save was in flight cannot overwrite its successor's snapshot.
//! A partition that never saved starts from the whole-log snapshot's posts of that partition
//! and its offset (a deployment that ran trending whole moves over with nothing lost or
//! folded twice). Readers merge the partitions' rankings (`likewise_service::trending`).

use crate::notifier::PartCommand;
use likewise_core::ports::{EventLog, SnapshotSave, SnapshotStore};
use likewise_core::trending::{MAX_POSTS_PER_PART, Trending};
use likewise_core::{StoreError, StoreResult};
use likewise_service::trending::{TRENDING, part_name};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// Trending tuning.
#[derive(Debug, Clone)]
pub struct TrendingOptions {
    /// How often the snapshot is saved.
    pub save_every: Duration,
    /// How often it is saved while no event came: the rankings move with the clock alone
    /// too, but slowly (a scale-out deployment saves less often when idle, a transaction
    /// each time).
    pub idle_save_every: Duration,
    /// How often new events are folded in: often enough that they are read from the log's
    /// in-memory tail rather than from storage.
    pub follow_every: Duration,
    /// Events read per log call.
    pub read_chunk: usize,
}

impl Default for TrendingOptions {
    fn default() -> Self {
        TrendingOptions {
            save_every: Duration::from_secs(1),
            idle_save_every: Duration::from_secs(1),
            follow_every: Duration::from_millis(50),
            read_chunk: 16_384,
        }
    }
}

/// The saved state and its offset (empty at 0 when none was saved, or it cannot be read).
pub async fn load(snapshots: &dyn SnapshotStore) -> StoreResult<(u64, Trending)> {
    Ok(match snapshots.load_snapshot(TRENDING).await? {
        Some((offset, body)) => match Trending::decode(&body) {
            Some(t) => (offset, t),
            None => {
                tracing::warn!("trending snapshot unreadable; rebuilding from the log");
                (0, Trending::default())
            }
        },
        None => (0, Trending::default()),
    })
}

/// Where partition `part` resumes: its own snapshot and offset, or, when it never saved,
/// the whole-log snapshot's posts of that partition at that snapshot's offset (empty at 0
/// when there is none).
pub async fn load_part(snapshots: &dyn SnapshotStore, part: u16) -> StoreResult<(u64, Trending)> {
    match snapshots.load_snapshot(&part_name(part)).await? {
        Some((offset, body)) => Ok(match Trending::decode(&body) {
            Some(t) => (offset, t),
            None => {
                tracing::warn!(part, "trending partition snapshot unreadable; rebuilding from the log");
                (0, Trending::default())
            }
        }),
        None => {
            let (offset, mut state) = load(snapshots).await?;
            state.retain_part(part);
            Ok((offset, state))
        }
    }
}

/// Fold in the events after `upto` (until the log is drained, at most 1,000,000), moving
/// `upto` past them. Returns how many were folded.
pub async fn fold(
    log: &dyn EventLog,
    state: &mut Trending,
    upto: &mut u64,
    read_chunk: usize,
) -> StoreResult<usize> {
    fold_counted(log, state, upto, read_chunk, "all").await
}

/// [`fold`], counting the events read under partition label `part`.
async fn fold_counted(
    log: &dyn EventLog,
    state: &mut Trending,
    upto: &mut u64,
    read_chunk: usize,
    part: &str,
) -> StoreResult<usize> {
    let mut n = 0;
    loop {
        let events = log.read_after(*upto, read_chunk).await?;
        metrics::counter!("likewise_consumer_events_total", "consumer" => TRENDING, "partition" => part.to_string())
            .increment(events.len() as u64);
        let _span = likewise_core::trace::consumer_span("trending", &events);
        for e in &events {
            state.apply(e);
        }
        n += events.len();
        match events.last() {
            Some(last) => *upto = last.seq,
            None => break,
        }
        if events.len() < read_chunk || n >= 1_000_000 {
            break;
        }
    }
    Ok(n)
}

/// Save the state with every event up to `upto` folded in, as the snapshot at `upto`;
/// `folded` events were folded in since the last save.
async fn checkpoint(
    log: &dyn EventLog,
    snapshots: &dyn SnapshotStore,
    state: &mut Trending,
    offset: &mut u64,
    upto: u64,
    folded: u64,
) -> StoreResult<()> {
    let now = likewise_service::now_ms();
    state.prune(now);
    snapshots.save_snapshot(TRENDING, upto, &state.encode(now)).await?;
    // Events, not positions: a stream position counts messages of every partition.
    metrics::counter!("likewise_trending_events_total").increment(folded);
    *offset = upto;
    log.committed(upto).await?;
    metrics::gauge!("likewise_trending_posts").set(state.len() as f64);
    Ok(())
}

/// Fold in the new events and save. Returns the events folded in.
pub async fn round(
    log: &dyn EventLog,
    snapshots: &dyn SnapshotStore,
    state: &mut Trending,
    offset: &mut u64,
    read_chunk: usize,
) -> StoreResult<usize> {
    let mut upto = *offset;
    let n = fold(log, state, &mut upto, read_chunk).await?;
    checkpoint(log, snapshots, state, offset, upto, n as u64).await?;
    Ok(n)
}

/// Run from `(offset, state)` (see [`load`]) until shutdown.
pub async fn run(
    log: Arc<dyn EventLog>,
    snapshots: Arc<dyn SnapshotStore>,
    (mut offset, mut state): (u64, Trending),
    opts: TrendingOptions,
    shutdown: watch::Receiver<bool>,
) {
    let mut ticker = crate::Ticker::new(opts.follow_every.min(opts.save_every), shutdown);
    let mut upto = offset;
    let mut last_save = std::time::Instant::now();
    let mut unsaved = 0u64;
    while ticker.next().await {
        let step = async {
            unsaved += fold(&*log, &mut state, &mut upto, opts.read_chunk).await? as u64;
            let every =
                if upto == offset { opts.idle_save_every.max(opts.save_every) } else { opts.save_every };
            if last_save.elapsed() >= every {
                last_save = std::time::Instant::now();
                checkpoint(&*log, &*snapshots, &mut state, &mut offset, upto, unsaved).await?;
                unsaved = 0;
            }
            Ok::<_, likewise_core::StoreError>(())
        };
        if let Err(e) = step.await {
            tracing::warn!(error = %e, "trending round failed; retrying");
            match load(&*snapshots).await {
                Ok((o, t)) => (offset, state) = (o, t),
                Err(e) => tracing::warn!(error = %e, "reloading the trending snapshot failed"),
            }
            upto = offset;
            unsaved = 0;
        }
    }
}

/// What the trending loop keeps for one partition it holds.
struct Part {
    log: Arc<dyn EventLog>,
    state: Trending,
    /// The offset of its saved snapshot.
    offset: u64,
    /// The events folded into `state` so far.
    upto: u64,
    /// Its writer fence.
    fence: u64,
    /// The minute its saved rankings were computed at (0: none saved by this loop).
    ranked_minute: u64,
    /// The label of its events metric.
    label: String,
    /// Events folded into `state` since its last save.
    unsaved: u64,
}

impl Part {
    /// Partition `part`: fenced first (a predecessor's save still in flight lands before the
    /// load below or not at all), then resumed from [`load_part`], its log opened by `open`
    /// at that offset.
    async fn open<O, F>(snapshots: &dyn SnapshotStore, part: u16, open: &O) -> StoreResult<Part>
    where
        O: Fn(u16, u64) -> F,
        F: Future<Output = StoreResult<Arc<dyn EventLog>>>,
    {
        let fence = snapshots.fence_snapshot(&part_name(part)).await?;
        let (offset, state) = load_part(snapshots, part).await?;
        let log = open(part, offset).await?;
        tracing::debug!(part, offset, fence, "trending partition resumes");
        Ok(Part {
            log,
            state,
            offset,
            upto: offset,
            fence,
            ranked_minute: 0,
            label: part.to_string(),
            unsaved: 0,
        })
    }
}

/// How long a partition that could not be opened, or whose fence was taken over, waits
/// before it is opened again while still held.
const REOPEN_AFTER: Duration = Duration::from_secs(2);

/// One trending loop for every partition this process holds, until `shutdown` or until
/// `commands` closes: partitions are taken and given back between rounds, as `commands` say
/// (a given-back partition's answer is sent once no save of it can be in flight); `open(part,
/// offset)` makes a partition's log, positioned after `offset`.
///
/// Every `follow_every` each partition's new events are folded in; every `save_every` the
/// partitions that folded something, or whose saved rankings are from an earlier minute
/// (rankings move with the clock alone), are saved in one fenced write.
pub async fn run_shared<O, F>(
    snapshots: Arc<dyn SnapshotStore>,
    opts: TrendingOptions,
    open: O,
    mut commands: mpsc::UnboundedReceiver<PartCommand>,
    shutdown: watch::Receiver<bool>,
) where
    O: Fn(u16, u64) -> F,
    F: Future<Output = StoreResult<Arc<dyn EventLog>>>,
{
    let mut parts: BTreeMap<u16, Part> = BTreeMap::new();
    let mut wanted: BTreeSet<u16> = BTreeSet::new();
    let mut not_before: HashMap<u16, Instant> = HashMap::new();
    let mut ticker = crate::Ticker::new(opts.follow_every.min(opts.save_every), shutdown);
    let mut last_save = Instant::now();
    loop {
        tokio::select! {
            biased;
            command = commands.recv() => {
                match command {
                    Some(PartCommand::Take(taken)) => wanted.extend(taken),
                    Some(PartCommand::Give(given, done)) => {
                        for part in given {
                            wanted.remove(&part);
                            not_before.remove(&part);
                            parts.remove(&part);
                        }
                        let _ = done.send(());
                    }
                    None => return,
                }
                continue;
            }
            more = ticker.next() => if !more { return },
        }
        let now = Instant::now();
        let due: Vec<u16> = wanted
            .iter()
            .copied()
            .filter(|p| !parts.contains_key(p) && not_before.get(p).is_none_or(|t| *t <= now))
            .collect();
        if !due.is_empty() {
            let opened = futures_util::future::join_all(due.iter().map(|&part| {
                let (snapshots, open) = (&snapshots, &open);
                async move { (part, Part::open(&**snapshots, part, open).await) }
            }))
            .await;
            for (part, p) in opened {
                match p {
                    Ok(p) => {
                        not_before.remove(&part);
                        parts.insert(part, p);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, part, "trending partition not opened; retrying");
                        not_before.insert(part, Instant::now() + REOPEN_AFTER);
                    }
                }
            }
        }
        // Every partition's read at once: a read can wait out its bound (a stream consumer
        // deleted by a successor answers nothing), and one after the other a process holding
        // 32 partitions would take 32 such waits per round, hearing of a lost partition (and
        // of shutdown) only at the end of them.
        let chunk = opts.read_chunk;
        let reads = futures_util::future::join_all(parts.iter_mut().map(|(part, p)| async move {
            let read = fold_counted(&*p.log, &mut p.state, &mut p.upto, chunk, &p.label).await;
            if let Ok(n) = read {
                p.unsaved += n as u64;
            }
            (*part, read)
        }))
        .await;
        let mut broken = Vec::new();
        for (part, read) in reads {
            if let Err(e) = read {
                // Part of a read may be folded: start again from the snapshot.
                tracing::warn!(error = %e, part, "trending partition read failed; reopening it");
                broken.push(part);
            }
        }
        for part in broken {
            parts.remove(&part);
            not_before.insert(part, Instant::now() + REOPEN_AFTER);
        }
        if last_save.elapsed() < opts.save_every {
            continue;
        }
        last_save = Instant::now();
        let now_ms = likewise_service::now_ms();
        let minute = now_ms / 60_000;
        let mut saves = Vec::new();
        for (part, p) in parts.iter_mut() {
            if p.upto == p.offset && p.ranked_minute == minute {
                continue;
            }
            p.state.prune_to(now_ms, MAX_POSTS_PER_PART);
            saves.push((
                *part,
                SnapshotSave {
                    name: part_name(*part),
                    fence: p.fence,
                    upto: p.upto,
                    body: p.state.encode(now_ms),
                },
            ));
        }
        if saves.is_empty() {
            continue;
        }
        let batch: Vec<SnapshotSave> = saves.iter().map(|(_, s)| s.clone()).collect();
        match snapshots.save_snapshots(&batch).await {
            Ok(()) => {
                let mut folded = 0;
                for (part, save) in &saves {
                    let Some(p) = parts.get_mut(part) else { continue };
                    folded += std::mem::take(&mut p.unsaved);
                    p.offset = save.upto;
                    p.ranked_minute = minute;
                    if let Err(e) = p.log.committed(save.upto).await {
                        tracing::warn!(error = %e, part, "acknowledging trending events failed");
                    }
                }
                metrics::counter!("likewise_trending_events_total").increment(folded);
                let posts: usize = parts.values().map(|p| p.state.len()).sum();
                metrics::gauge!("likewise_trending_posts").set(posts as f64);
            }
            Err(StoreError::Superseded(names)) => {
                // Taken over elsewhere: another process fenced them, which it does only once
                // it holds their leases, so this one lost them (and gives them back once it
                // notices). Dropped and not opened again until taken again: a new fence
                // taken here meanwhile would fence off their rightful holder.
                metrics::counter!("likewise_trending_superseded_total").increment(1);
                tracing::warn!(consumers = %names, "trending partitions taken over elsewhere");
                let gone: Vec<&str> = names.split(',').collect();
                let lost: Vec<u16> =
                    parts.keys().copied().filter(|p| gone.contains(&part_name(*p).as_str())).collect();
                for part in lost {
                    parts.remove(&part);
                    wanted.remove(&part);
                    not_before.remove(&part);
                }
            }
            // Saved again next round (the states keep what they folded; a save that landed
            // unanswered is overwritten by a newer one).
            Err(e) => tracing::warn!(error = %e, "saving the trending partitions failed; retrying"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use likewise_core::event::Event;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::oneshot;

    /// A log whose every read waits for the next step of a clock and finds nothing, as a
    /// read from a stream consumer that a successor deleted waits out its bound.
    struct Waiting {
        clock: watch::Receiver<u64>,
        /// Reads started.
        reads: Arc<AtomicUsize>,
        /// Reads waiting.
        waiting: Arc<AtomicUsize>,
    }

    #[async_trait::async_trait]
    impl EventLog for Waiting {
        async fn read_after(&self, _: u64, _: usize) -> StoreResult<Vec<Event>> {
            let mut clock = self.clock.clone();
            clock.borrow_and_update();
            self.reads.fetch_add(1, Ordering::SeqCst);
            self.waiting.fetch_add(1, Ordering::SeqCst);
            let _ = clock.changed().await;
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            Ok(Vec::new())
        }
        async fn head(&self) -> StoreResult<u64> {
            Ok(0)
        }
        async fn truncate(&self, _: u64) -> StoreResult<u64> {
            Ok(0)
        }
    }

    /// Steps `clock` whenever a read waits, until `done` finishes, returning how many steps
    /// that took: how many read bounds were waited out, however slow the machine.
    async fn steps_until<T>(
        clock: &watch::Sender<u64>,
        waiting: &AtomicUsize,
        done: impl Future<Output = T>,
    ) -> u64 {
        tokio::pin!(done);
        let mut steps = 0;
        loop {
            tokio::select! {
                _ = &mut done => return steps,
                _ = tokio::time::sleep(Duration::from_millis(20)) => {
                    if waiting.load(Ordering::SeqCst) == 0 {
                        continue;
                    }
                    steps += 1;
                    clock.send_modify(|t| *t += 1);
                }
            }
        }
    }

    /// A loop holding 32 partitions whose reads each wait out a bound (a process resumed
    /// after a pause, whose partitions' stream consumers were taken over meanwhile) answers
    /// a give-back of them all, and a shutdown, within a bound or two, not one bound per
    /// partition: its reads are made together. Counted in bounds (clock steps), not time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn partitions_whose_reads_wait_are_given_back_and_shut_down_at_once() {
        let dir = likewise_store::testing::scratch_dir();
        let stores = likewise_store::testing::open_small(dir.path());
        let all: Vec<u16> = (0..32).collect();
        for give in [true, false] {
            let (clock, ticks) = watch::channel(0u64);
            let reads = Arc::new(AtomicUsize::new(0));
            let waiting = Arc::new(AtomicUsize::new(0));
            let (commands, rx) = mpsc::unbounded_channel();
            let (stop, shutdown) = watch::channel(false);
            let open = {
                let (reads, waiting) = (reads.clone(), waiting.clone());
                move |_: u16, _: u64| {
                    let (clock, reads, waiting) = (ticks.clone(), reads.clone(), waiting.clone());
                    let log: Arc<dyn EventLog> = Arc::new(Waiting { clock, reads, waiting });
                    async move { Ok(log) }
                }
            };
            let opts = TrendingOptions { follow_every: Duration::from_millis(10), ..Default::default() };
            let run = tokio::spawn(run_shared(stores.snapshots.clone(), opts, open, rx, shutdown));
            commands.send(PartCommand::Take(all.clone())).expect("take");
            // Every partition opened, and a second round of reads under way.
            let reading = async {
                while reads.load(Ordering::SeqCst) < 40 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            };
            steps_until(&clock, &waiting, reading).await;
            let steps = if give {
                let (done, given) = oneshot::channel();
                commands.send(PartCommand::Give(all.clone(), done)).expect("give");
                let steps = steps_until(&clock, &waiting, given).await;
                stop.send(true).expect("stop");
                steps_until(&clock, &waiting, run).await;
                steps
            } else {
                stop.send(true).expect("stop");
                steps_until(&clock, &waiting, run).await
            };
            let what = if give { "given back" } else { "shut down" };
            assert!(steps <= 8, "{what} after {steps} read bounds");
        }
    }
}
