//! A consumer shared by several worker processes: its work is split into the stream's post
//! partitions, each run under a lease of its own ([`LeaseName::Part`]), and each process
//! aims for a fair share of them, as the members of a Kafka consumer group do.
//!
//! Every 3 s a process counts the members ([`Leases::members`]: the worker processes that
//! joined), and every second it aims for `ceil(partitions / members)` partitions:
//! - fewer held: it takes free ones (a process that starts takes its share once the others
//!   released theirs; the partitions of one that died are free once its lease session ended);
//! - more held (a member joined): it stops the extras' work, waits for it to end, and gives
//!   their leases back, so the newcomer can take them;
//! - a lease lost (its session broke): that partition's work is stopped; a successor is
//!   fenced off from whatever the old work still writes (each partition has its own writer
//!   fence and offset).
//!
//! Nothing is lost or doubled on a handover: a partition's work commits its offset together
//! with its effects, and its successor starts from that offset.
//!
//! The work of every partition a process holds is one [`SharedWork`] (one notifier reading
//! them all): partitions are handed to it and taken back in batches, so a process that loses
//! or gives back many partitions waits for its work once, not once per partition.

use likewise_core::ports::cluster::{Lease, LeaseName, Leases, Partitioned};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How often the leases are checked (and free partitions taken while short of the share).
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// The members are counted every this many checks: a count is a transaction on shard 0,
/// and an idle worker should make few (a change of members is seen within 3 s).
const COUNT_EVERY: u32 = 3;

/// The work of the partitions a process holds.
#[async_trait::async_trait]
pub trait SharedWork: Send + Sync {
    /// Start the work of `parts`, whose leases this process just took.
    async fn take(&self, parts: &[u16]);
    /// Stop the work of `parts`, returning once none of it can write any more: their leases
    /// are given back after (the successor must not start while this work still writes).
    async fn give(&self, parts: &[u16]);
}

/// The share a process aims for: `ceil(parts / members)`.
pub fn fair_share(parts: u16, members: usize) -> usize {
    (parts as usize).div_ceil(members.max(1))
}

/// Run `work` on each partition of `consumer` (of `parts`) this process holds, taking and
/// giving back partitions as members come and go, until `shutdown`.
pub async fn shared(
    leases: Arc<dyn Leases>,
    consumer: Partitioned,
    parts: u16,
    mut shutdown: watch::Receiver<bool>,
    work: Arc<dyn SharedWork>,
) {
    let what = consumer.name();
    let mut held: BTreeMap<u16, Box<dyn Lease>> = BTreeMap::new();
    let mut joined = false;
    let mut members = 1;
    let mut checks: u32 = 0;
    // Where this process starts looking for free partitions: processes starting together
    // then mostly try different ones.
    let seed = std::process::id()
        ^ std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let first = (seed % u32::from(parts.max(1))) as u16;
    loop {
        if *shutdown.borrow() {
            break;
        }
        if !joined {
            match leases.join().await {
                Ok(()) => joined = true,
                Err(e) => tracing::warn!(error = %e, %what, "cannot join the members; retrying"),
            }
        }
        if checks.is_multiple_of(COUNT_EVERY) {
            match leases.members().await {
                Ok(n) => members = n,
                Err(e) => {
                    tracing::warn!(error = %e, %what, "cannot count the members; keeping the last count")
                }
            }
        }
        checks = checks.wrapping_add(1);
        // Lost leases: their work stops (a successor is fenced off from it anyway).
        let mut lost = Vec::new();
        for (part, lease) in &held {
            if !lease.holds().await {
                lost.push(*part);
            }
        }
        if !lost.is_empty() {
            tracing::warn!(%what, parts = ?lost, "partition leases lost: stopping their work");
            give_back(&*work, &mut held, &lost).await;
        }
        let target = if joined { fair_share(parts, members) } else { 0 };
        // More than the share: the highest partitions go back first.
        if held.len() > target {
            let extra: Vec<u16> = held.keys().rev().take(held.len() - target).copied().collect();
            tracing::info!(%what, parts = ?extra, members, target, "partitions given back for a fair share");
            give_back(&*work, &mut held, &extra).await;
        }
        // Fewer: take free ones, unless shutting down (what is taken now would be given
        // back at once: a handover for nothing).
        if held.len() < target && !*shutdown.borrow() {
            // Only those nobody holds, when the engine can tell (a process short of its
            // share while the others hold theirs would otherwise try every one, every second).
            let taken = match leases.taken_parts(consumer).await {
                Ok(t) => t.unwrap_or_default(),
                Err(e) => {
                    tracing::warn!(error = %e, %what, "cannot list the taken partitions");
                    Vec::new()
                }
            };
            let mut new = Vec::new();
            for i in 0..parts {
                if held.len() >= target || *shutdown.borrow() {
                    break;
                }
                let part = (first + i) % parts;
                if held.contains_key(&part) || taken.contains(&part) {
                    continue;
                }
                match leases.try_take(LeaseName::Part(consumer, part)).await {
                    Ok(Some(lease)) => {
                        held.insert(part, lease);
                        new.push(part);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, %what, part, "cannot take a partition lease; retrying");
                        break;
                    }
                }
            }
            if !new.is_empty() {
                tracing::info!(%what, parts = ?new, members, target, "partition leases taken: running");
                work.take(&new).await;
            }
        }
        metrics::gauge!("likewise_partitions_held", "consumer" => what).set(held.len() as f64);
        metrics::gauge!("likewise_partition_members", "consumer" => what).set(members as f64);
        tokio::select! {
            _ = tokio::time::sleep(CHECK_EVERY) => {}
            _ = shutdown.changed() => {}
        }
    }
    let all: Vec<u16> = held.keys().copied().collect();
    give_back(&*work, &mut held, &all).await;
}

/// Stop the work of `parts`, wait for it to end, then give their leases back (in that
/// order: a successor must not start while this work still writes).
async fn give_back(work: &dyn SharedWork, held: &mut BTreeMap<u16, Box<dyn Lease>>, parts: &[u16]) {
    work.give(parts).await;
    for part in parts {
        drop(held.remove(part));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use likewise_core::StoreResult;
    use std::collections::{HashMap, HashSet};
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Leases of several processes on one table, as the engine's session locks behave: a
    /// process's leases and its membership end together when its session dies.
    /// A mutex whose poisoning (an assertion failed under it) is ignored.
    #[derive(Default)]
    struct Mutex<T>(std::sync::Mutex<T>);
    impl<T> Mutex<T> {
        fn lock(&self) -> std::sync::MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(|e| e.into_inner())
        }
    }

    #[derive(Default)]
    struct Table {
        owners: Mutex<HashMap<LeaseName, u32>>,
        members: Mutex<HashSet<u32>>,
        /// Partition -> the process running its work now.
        running: Mutex<HashMap<u16, u32>>,
    }

    struct Process {
        table: Arc<Table>,
        me: u32,
        alive: Arc<AtomicBool>,
    }

    struct FakeLease {
        table: Arc<Table>,
        me: u32,
        name: LeaseName,
        alive: Arc<AtomicBool>,
    }

    #[async_trait::async_trait]
    impl Lease for FakeLease {
        async fn holds(&self) -> bool {
            self.alive.load(Ordering::SeqCst) && self.table.owners.lock().get(&self.name) == Some(&self.me)
        }
    }

    impl Drop for FakeLease {
        fn drop(&mut self) {
            let mut o = self.table.owners.lock();
            if o.get(&self.name) == Some(&self.me) {
                o.remove(&self.name);
            }
        }
    }

    #[async_trait::async_trait]
    impl Leases for Process {
        async fn try_take(&self, name: LeaseName) -> StoreResult<Option<Box<dyn Lease>>> {
            let mut o = self.table.owners.lock();
            if o.contains_key(&name) || !self.alive.load(Ordering::SeqCst) {
                return Ok(None);
            }
            o.insert(name, self.me);
            let (table, me, alive) = (self.table.clone(), self.me, self.alive.clone());
            Ok(Some(Box::new(FakeLease { table, me, name, alive })))
        }
        async fn members(&self) -> StoreResult<usize> {
            Ok(self.table.members.lock().len().max(1))
        }
        async fn join(&self) -> StoreResult<()> {
            self.table.members.lock().insert(self.me);
            Ok(())
        }
        async fn taken_parts(&self, _: Partitioned) -> StoreResult<Option<Vec<u16>>> {
            Ok(Some(
                self.table
                    .owners
                    .lock()
                    .keys()
                    .copied()
                    .filter_map(|n| match n {
                        LeaseName::Part(_, p) => Some(p),
                        _ => None,
                    })
                    .collect(),
            ))
        }
    }

    const PARTS: u16 = 16;

    struct Member {
        alive: Arc<AtomicBool>,
        shutdown: watch::Sender<bool>,
        task: tokio::task::JoinHandle<()>,
    }

    /// The work of process `me`: it runs a partition from `take` until `give`.
    struct Work {
        table: Arc<Table>,
        me: u32,
    }

    #[async_trait::async_trait]
    impl SharedWork for Work {
        async fn take(&self, parts: &[u16]) {
            let mut running = self.table.running.lock();
            for part in parts {
                let before = running.insert(*part, self.me);
                assert!(before.is_none(), "partition {part} started by {} while {before:?} runs it", self.me);
            }
        }
        async fn give(&self, parts: &[u16]) {
            let mut running = self.table.running.lock();
            for part in parts {
                if running.get(part) == Some(&self.me) {
                    running.remove(part);
                }
            }
        }
    }

    fn start(table: &Arc<Table>, me: u32) -> Member {
        let alive = Arc::new(AtomicBool::new(true));
        let leases: Arc<dyn Leases> = Arc::new(Process { table: table.clone(), me, alive: alive.clone() });
        let (shutdown, rx) = watch::channel(false);
        let work = Arc::new(Work { table: table.clone(), me });
        let task = tokio::spawn(shared(leases, Partitioned::Notifier, PARTS, rx, work));
        Member { alive, shutdown, task }
    }

    /// How many partitions each process runs, once every partition runs somewhere.
    async fn settled(table: &Arc<Table>, want: &[(u32, usize)]) {
        for _ in 0..30 {
            tokio::time::sleep(CHECK_EVERY).await;
            let running = table.running.lock().clone();
            let mut per: HashMap<u32, usize> = HashMap::new();
            for m in running.values() {
                *per.entry(*m).or_default() += 1;
            }
            if running.len() == PARTS as usize
                && want.iter().all(|(m, n)| per.get(m).copied().unwrap_or(0) == *n)
            {
                return;
            }
        }
        panic!("not settled on {want:?}: {:?}", table.running.lock());
    }

    /// One process runs every partition; a second and a third take a fair share each
    /// (`ceil(16 / n)` at most, every partition run by exactly one); when one dies, the
    /// others take its share over; a shutdown gives everything back.
    #[tokio::test]
    async fn processes_share_the_partitions_and_take_over_a_dead_ones() {
        let table = Arc::new(Table::default());
        let a = start(&table, 1);
        settled(&table, &[(1, 16)]).await;
        let b = start(&table, 2);
        settled(&table, &[(1, 8), (2, 8)]).await;
        let c = start(&table, 3);
        // ceil(16 / 3) = 6: two hold 6, the third the 4 left.
        for _ in 0..30 {
            tokio::time::sleep(CHECK_EVERY).await;
            let running = table.running.lock().clone();
            let mut per: HashMap<u32, usize> = HashMap::new();
            for m in running.values() {
                *per.entry(*m).or_default() += 1;
            }
            let mut counts: Vec<usize> = per.values().copied().collect();
            counts.sort();
            if running.len() == 16 && counts == [4, 6, 6] {
                break;
            }
        }
        let mut counts: Vec<usize> = {
            let running = table.running.lock();
            (1..=3).map(|m| running.values().filter(|x| **x == m).count()).collect()
        };
        counts.sort();
        assert_eq!(counts, [4, 6, 6]);
        // B dies: its session ends, taking its leases and its membership.
        b.alive.store(false, Ordering::SeqCst);
        table.members.lock().remove(&2);
        table.owners.lock().retain(|_, m| *m != 2);
        b.task.abort();
        // Its work is gone with it (here: stopped when its leases are found lost, had it run on).
        table.running.lock().retain(|_, m| *m != 2);
        settled(&table, &[(1, 8), (3, 8)]).await;
        for m in [a, c] {
            m.shutdown.send(true).expect("shutdown");
            m.task.await.expect("join");
        }
        assert!(table.running.lock().is_empty());
        assert!(table.owners.lock().is_empty(), "every lease given back");
    }

    /// Leases whose member count is answered as shutdown is signalled: the lease loop is
    /// then past its shutdown check, short of its share.
    struct ShutdownWhileCounting(Process, watch::Sender<bool>);

    #[async_trait::async_trait]
    impl Leases for ShutdownWhileCounting {
        async fn try_take(&self, name: LeaseName) -> StoreResult<Option<Box<dyn Lease>>> {
            self.0.try_take(name).await
        }
        async fn members(&self) -> StoreResult<usize> {
            let _ = self.1.send(true);
            self.0.members().await
        }
        async fn join(&self) -> StoreResult<()> {
            self.0.join().await
        }
        async fn taken_parts(&self, c: Partitioned) -> StoreResult<Option<Vec<u16>>> {
            self.0.taken_parts(c).await
        }
    }

    /// A process told to shut down while it counts the members, before it took its share,
    /// takes no partition (each would be handed over twice for nothing).
    #[tokio::test]
    async fn no_partition_is_taken_once_shutdown_is_signalled() {
        let table = Arc::new(Table::default());
        let (shutdown, rx) = watch::channel(false);
        let process = Process { table: table.clone(), me: 1, alive: Arc::new(AtomicBool::new(true)) };
        let leases: Arc<dyn Leases> = Arc::new(ShutdownWhileCounting(process, shutdown));
        let work = Arc::new(Counting(Work { table: table.clone(), me: 1 }, Default::default()));
        shared(leases, Partitioned::Notifier, PARTS, rx, work.clone()).await;
        assert_eq!(work.1.load(Ordering::SeqCst), 0, "partitions taken after shutdown");
        assert!(table.owners.lock().is_empty(), "leases kept: {:?}", table.owners.lock());
    }

    /// Work counting the partitions it was handed.
    struct Counting(Work, std::sync::atomic::AtomicUsize);

    #[async_trait::async_trait]
    impl SharedWork for Counting {
        async fn take(&self, parts: &[u16]) {
            self.1.fetch_add(parts.len(), Ordering::SeqCst);
            self.0.take(parts).await
        }
        async fn give(&self, parts: &[u16]) {
            self.0.give(parts).await
        }
    }

    /// An in-memory event log read by post partition, as the stream's partition consumers.
    struct PartLog {
        events: Arc<Mutex<Vec<likewise_core::event::Event>>>,
        part: u16,
    }

    #[async_trait::async_trait]
    impl likewise_core::ports::EventLog for PartLog {
        async fn read_after(&self, after: u64, max: usize) -> StoreResult<Vec<likewise_core::event::Event>> {
            let events = self.events.lock();
            Ok(events
                .iter()
                .filter(|e| e.seq > after && likewise_core::ports::cluster::part_of_post(e.post) == self.part)
                .take(max)
                .cloned()
                .collect())
        }
        async fn head(&self) -> StoreResult<u64> {
            Ok(self.events.lock().last().map_or(0, |e| e.seq))
        }
        async fn truncate(&self, _: u64) -> StoreResult<u64> {
            Ok(0)
        }
    }

    /// A process running trending's partitions: its lease loop and its trending loop.
    struct TrendingProcess {
        alive: Arc<AtomicBool>,
        shutdown: watch::Sender<bool>,
        leases: tokio::task::JoinHandle<()>,
        trending: tokio::task::JoinHandle<()>,
    }

    /// Work whose `give` reaches it late: a process slow to stop what it lost.
    struct SlowGive(Arc<dyn SharedWork>, Duration);

    #[async_trait::async_trait]
    impl SharedWork for SlowGive {
        async fn take(&self, parts: &[u16]) {
            self.0.take(parts).await
        }
        async fn give(&self, parts: &[u16]) {
            tokio::time::sleep(self.1).await;
            self.0.give(parts).await
        }
    }

    fn start_trending(
        table: &Arc<Table>,
        me: u32,
        give_after: Duration,
        snapshots: &Arc<dyn likewise_core::ports::SnapshotStore>,
        events: &Arc<Mutex<Vec<likewise_core::event::Event>>>,
    ) -> TrendingProcess {
        use likewise_core::ports::cluster::PARTITIONS;
        let alive = Arc::new(AtomicBool::new(true));
        let leases: Arc<dyn Leases> = Arc::new(Process { table: table.clone(), me, alive: alive.clone() });
        let (shutdown, rx) = watch::channel(false);
        let (commands, crx) = tokio::sync::mpsc::unbounded_channel();
        let events = events.clone();
        let open = move |part: u16, _offset: u64| {
            let log: Arc<dyn likewise_core::ports::EventLog> =
                Arc::new(PartLog { events: events.clone(), part });
            async move { Ok(log) }
        };
        let opts = crate::trending::TrendingOptions {
            save_every: Duration::from_millis(200),
            follow_every: Duration::from_millis(50),
            ..Default::default()
        };
        let trending =
            tokio::spawn(crate::trending::run_shared(snapshots.clone(), opts, open, crx, rx.clone()));
        let work = Arc::new(SlowGive(Arc::new(super::super::PartsChannel(commands)), give_after));
        let leases = tokio::spawn(shared(leases, Partitioned::Trending, PARTITIONS as u16, rx, work));
        TrendingProcess { alive, shutdown, leases, trending }
    }

    /// The trending partitions held per process, from the lease table.
    fn trending_shares(table: &Table) -> HashMap<u32, usize> {
        let mut per = HashMap::new();
        for (name, m) in table.owners.lock().iter() {
            if let LeaseName::Part(Partitioned::Trending, _) = name {
                *per.entry(*m).or_default() += 1;
            }
        }
        per
    }

    async fn trending_settled(table: &Table, want: &[(u32, usize)]) {
        for _ in 0..60 {
            let per = trending_shares(table);
            if want.iter().all(|(m, n)| per.get(m).copied().unwrap_or(0) == *n) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        panic!("not settled on {want:?}: {:?}", trending_shares(table));
    }

    /// Trending's partitions handed between two processes on one store while likes flow:
    /// the second takes half, gives them back on shutdown, takes half again, then is cut off
    /// (its leases lost, its trending loop still running, as a process that lost its store
    /// session but not its work would) and the first takes everything over, fencing the
    /// deposed loop's saves off. The merged partition rankings then equal the ranking of one
    /// state that took every event: every like counted once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn trending_partitions_change_hands_with_nothing_folded_twice() {
        use likewise_core::event::Event;
        use likewise_core::ids::UserId;
        use likewise_core::like::Target;
        use likewise_core::ports::cluster::PARTITIONS;
        use likewise_core::trending::{RANKED, Trending, Window, decode_ranking, merge};
        let dir = likewise_store::testing::scratch_dir();
        let stores = likewise_store::testing::open_small(dir.path());
        let snapshots = stores.snapshots.clone();
        let table = Arc::new(Table::default());
        let events: Arc<Mutex<Vec<Event>>> = Arc::default();
        let feeding = Arc::new(AtomicBool::new(true));
        let feeder = {
            let (events, feeding) = (events.clone(), feeding.clone());
            tokio::spawn(async move {
                let mut seq = 0u64;
                while feeding.load(Ordering::SeqCst) {
                    let now = likewise_service::now_ms();
                    {
                        let mut ev = events.lock();
                        for _ in 0..50 {
                            seq += 1;
                            let post = 1 + (seq * 7_919) % 300;
                            let created = !seq.is_multiple_of(5);
                            let e = Event::like(
                                seq,
                                created,
                                Target::post(post),
                                UserId(1),
                                UserId(seq),
                                now,
                                post,
                            );
                            ev.push(e);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        };
        let a = start_trending(&table, 1, Duration::ZERO, &snapshots, &events);
        trending_settled(&table, &[(1, 64)]).await;
        let b = start_trending(&table, 2, Duration::ZERO, &snapshots, &events);
        trending_settled(&table, &[(1, 32), (2, 32)]).await;
        // B shuts down: it gives its partitions back, and A takes them.
        b.shutdown.send(true).expect("shutdown");
        b.leases.await.expect("join");
        b.trending.await.expect("join");
        table.members.lock().remove(&2);
        trending_settled(&table, &[(1, 64)]).await;
        let b = start_trending(&table, 3, Duration::from_secs(6), &snapshots, &events);
        trending_settled(&table, &[(1, 32), (3, 32)]).await;
        // B is cut off: its session ends (leases and membership), and its trending loop
        // hears of it 6 s late, running on and trying to save meanwhile (refused once A
        // fenced the partitions it took over).
        b.alive.store(false, Ordering::SeqCst);
        table.members.lock().remove(&3);
        table.owners.lock().retain(|_, m| *m != 3);
        trending_settled(&table, &[(1, 64)]).await;
        // The deposed loop, refused once, takes no fence again: the fences stand still.
        let fences = || async {
            let mut out = Vec::new();
            for p in 0..PARTITIONS as u16 {
                let name = format!("{}#fence", likewise_service::trending::part_name(p));
                out.push(stores.counters.offset(&name).await.expect("fence"));
            }
            out
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        let before = fences().await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(fences().await, before, "partitions fenced again after the takeover");
        feeding.store(false, Ordering::SeqCst);
        feeder.await.expect("feeder");
        // Everything folded and saved, every partition's rankings from one minute.
        let all = events.lock().clone();
        let head = all.last().map_or(0, |e| e.seq);
        let names: Vec<String> = (0..PARTITIONS as u16).map(likewise_service::trending::part_name).collect();
        let mut whole = Trending::default();
        all.iter().for_each(|e| whole.apply(e));
        for _ in 0..200 {
            let loaded = snapshots.load_snapshots(&names).await.expect("load");
            let caught_up = loaded.iter().enumerate().all(|(p, s)| {
                let last = all
                    .iter()
                    .rev()
                    .find(|e| likewise_core::ports::cluster::part_of_post(e.post) == p as u16);
                s.as_ref().map_or(last.is_none(), |(o, _)| *o == last.map_or(0, |e| e.seq))
            });
            let minutes: std::collections::BTreeSet<u64> = loaded
                .iter()
                .flatten()
                .filter_map(|(_, b)| decode_ranking(b, Window::Hour))
                .map(|(at, _)| at / 60_000)
                .collect();
            if caught_up && minutes.len() == 1 {
                for w in [Window::Hour, Window::Day] {
                    let mut at = 0;
                    let lists: Vec<_> = loaded
                        .iter()
                        .flatten()
                        .filter_map(|(_, b)| decode_ranking(b, w))
                        .map(|(t, r)| {
                            at = t;
                            r
                        })
                        .collect();
                    let merged = merge(lists, RANKED);
                    assert_eq!(merged, whole.rank(w, at, RANKED), "{w:?} (head {head})");
                    assert!(!merged.is_empty());
                }
                b.shutdown.send(true).expect("shutdown");
                b.leases.await.expect("join");
                b.trending.await.expect("join");
                a.shutdown.send(true).expect("shutdown");
                a.leases.await.expect("join");
                a.trending.await.expect("join");
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the partitions did not catch up with the log");
    }
}
