//! The scheduler: one seed chooses every client write, consumer step, crash and clock jump,
//! runs the real consumers (aggregators, reverse-index writers and relays of two shards, the
//! notifier, the ranker) over the simulated ports, checks the step properties after every
//! action, then quiesces (no more faults, every consumer runs dry, the clock passes every
//! hold) and checks the final ones.
//!
//! Partitioned ([`World::partitioned`]): the notifier runs as two worker processes' notifiers
//! sharing the stream's two post partitions, each partition owned (its lease) by one of them,
//! each process reading its partitions through one stream reader (`cluster::shared_log`), as
//! a worker process does.
//! Handovers move a partition's lease to the other process: given back first (the old holder
//! stops reading it, then the new one takes it), or taken over from a holder that has not
//! noticed it lost the lease (it reads on until its partition's fence refuses it). A process
//! can also die (its memory gone, its leases kept until it starts again).

use super::check;
use super::ports::{SimMeta, SimPorts};
use super::rng::Rng;
use super::state::{DUPLICATE_WINDOW_MS, Row, SHARDS, Sim};
use likewise_core::counter::COUNTERS_CONSUMER;
use likewise_core::event::Event;
use likewise_core::ids::{PostId, UserId};
use likewise_core::like::Target;
use likewise_core::ports::EventLog;
use likewise_core::ports::cluster::{EventStream, ReverseIndex, Scope, part_consumer, shard_consumer};
use likewise_engine::Stores;
use likewise_service::{Engagement, ServiceOptions};
use likewise_workers::cluster::shared_log::SharedLog;
use likewise_workers::notifier::{NOTIFIER, Notifier, NotifierOptions};
use likewise_workers::{Aggregator, AggregatorOptions, ranker, relay, reverse_index};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// Users who like (1..=USERS); user `p` wrote post `p`.
pub const USERS: u64 = 5;
/// The notifier's hold window.
pub const HOLD_MS: u64 = 5_000;

/// A likeable target, its post and its author.
#[derive(Debug, Clone, Copy)]
pub struct Likeable {
    /// The post or comment.
    pub target: Target,
    /// Its post.
    pub post: u64,
    /// Its author (the recipient of its like notifications).
    pub author: UserId,
}

/// Four posts (two per shard) and four comments, each comment by someone other than its
/// post's author; two of them (101 and 104) by the same author on the same post, so the likes
/// of both aggregate in one `comment_liked` item and an unlike of one must leave a liker of
/// the other in it.
pub fn likeables() -> Vec<Likeable> {
    let mut v: Vec<Likeable> =
        (1..=4).map(|p| Likeable { target: Target::post(p), post: p, author: UserId(p) }).collect();
    for (id, post, author) in [(101, 1, 2), (102, 2, 3), (103, 3, 1), (104, 1, 2)] {
        v.push(Likeable { target: Target::comment(id), post, author: UserId(author) });
    }
    v
}

/// The stream's subject partition of a post's events (two here).
pub fn part_of(post: u64) -> u16 {
    ((post / 2) % 2) as u16
}

fn shard_of(post: u64) -> usize {
    (post % SHARDS as u64) as usize
}

/// One seed's deployment.
pub struct World {
    /// The simulated state.
    pub sim: Sim,
    ports: Arc<SimPorts>,
    svc: Arc<Engagement>,
    aggregators: Vec<Option<Aggregator>>,
    notifier: Option<Notifier>,
    /// Partitioned: each process's notifier, and the process that owns each partition.
    processes: [Option<Notifier>; 2],
    /// Each process's one stream reader for the partitions it holds (gone with its notifier),
    /// as a worker process reads them (`cluster::shared_log`).
    readers: [Option<Arc<SharedLog>>; 2],
    /// Readers made so far: each one's stream consumer has a name of its own.
    readers_made: u64,
    owner: [usize; 2],
    /// Whether the notifier runs partitioned.
    pub partitioned: bool,
    reverse: Vec<Option<(Arc<dyn EventLog>, u64)>>,
    ranker_offset: u64,
    ranker_dirty: BTreeSet<PostId>,
    row_seq: Vec<u64>,
    /// What happened, in order (printed when a property fails).
    pub trace: Vec<String>,
}

fn agg_options(shard: usize) -> AggregatorOptions {
    AggregatorOptions {
        consumer: shard_consumer(COUNTERS_CONSUMER, shard),
        read_chunk: 3,
        max_events_per_commit: 6,
        // The rank index needs comment rows, which the simulation does not keep.
        rank_index: false,
        ..AggregatorOptions::default()
    }
}

fn notifier_options() -> NotifierOptions {
    NotifierOptions { hold: Duration::from_millis(HOLD_MS), ..NotifierOptions::default() }
}

impl World {
    /// A deployment for `seed`; `base` serves the ports the consumers only read and the
    /// simulation leaves alone (settings and follows, whose reads fail now and then).
    pub fn new(seed: u64, base: &Stores, partitioned: bool) -> Self {
        let sim = Sim::new(Rng::new(seed));
        let ports = Arc::new(SimPorts(sim.clone()));
        let mut stores = base.clone();
        stores.counters = ports.clone();
        stores.notifications = ports.clone();
        stores.likes = ports.clone();
        stores.meta = Arc::new(SimMeta(sim.clone(), base.meta.clone()));
        let opts = ServiceOptions {
            count_capacity: 64,
            meta_capacity: 64,
            // Uncached, so the notifier reads settings at every release, and may fail there.
            meta_ttl: Duration::ZERO,
            viewer_capacity: 64,
            ..ServiceOptions::default()
        };
        let svc = Engagement::new(stores, opts);
        svc.shared.set_broadcast(ports.clone());
        World {
            sim,
            ports,
            svc,
            aggregators: (0..SHARDS).map(|_| None).collect(),
            notifier: None,
            processes: [None, None],
            readers: [None, None],
            readers_made: 0,
            owner: [0, 1],
            partitioned,
            reverse: (0..SHARDS).map(|_| None).collect(),
            ranker_offset: 0,
            ranker_dirty: BTreeSet::new(),
            row_seq: vec![0; SHARDS],
            trace: Vec::new(),
        }
    }

    fn note(&mut self, what: String) {
        let now = self.sim.lock().now_ms % 1_000_000;
        self.trace.push(format!("t={now:06} {what}"));
    }

    /// Did the consumer that just ran die at a port call? (Clears the flag.)
    fn crashed(&self) -> bool {
        std::mem::take(&mut self.sim.lock().crashed)
    }

    /// One client transaction: 1 to 3 likes or unlikes of targets on one shard, written to
    /// the like rows and, for each real change, as an event in the shard's outbox (one row
    /// per subject partition), as the PostgreSQL write path does.
    pub fn client(&mut self) {
        let all = likeables();
        let mut w = self.sim.lock();
        let first = all[w.rng.range(0, all.len() as u64) as usize];
        let shard = shard_of(first.post);
        let same: Vec<Likeable> = all.iter().copied().filter(|l| shard_of(l.post) == shard).collect();
        // The API node's clock: up to 2 s off the simulated one either way.
        let ts = (w.now_ms + w.rng.range(0, 4_000)).saturating_sub(2_000);
        let mut parts: [Vec<Event>; 2] = [Vec::new(), Vec::new()];
        let mut done = Vec::new();
        for i in 0..w.rng.range(1, 4) {
            let l = if i == 0 { first } else { same[w.rng.range(0, same.len() as u64) as usize] };
            let user = UserId(w.rng.range(1, USERS + 1));
            let like = w.rng.chance(600);
            let key = (l.target, user);
            let changed = match (like, w.likes.contains_key(&key)) {
                (true, false) => w.likes.insert(key, ts).is_none(),
                (false, true) => w.likes.remove(&key).is_some(),
                _ => false,
            };
            done.push(format!(
                "{}{}:{}{}",
                if like { "+" } else { "-" },
                user.0,
                target_name(l.target),
                if changed { "" } else { "(no-op)" }
            ));
            if changed {
                parts[part_of(l.post) as usize]
                    .push(Event::like(0, like, l.target, l.author, user, ts, l.post));
            }
        }
        for (part, events) in parts.into_iter().enumerate() {
            if !events.is_empty() {
                self.row_seq[shard] += 1;
                let seq = self.row_seq[shard];
                w.outbox[shard].push(Row { seq, part: part as u16, events, relayed: None });
            }
        }
        drop(w);
        self.note(format!("client shard {shard} ts={} {}", ts % 1_000_000, done.join(" ")));
    }

    /// One pass of shard `s`'s relay.
    pub async fn relay(&mut self, s: usize, batch: usize) -> bool {
        let r = relay::relay_once(&*self.ports, &*self.ports, s, batch).await;
        self.crashed(); // the relay keeps no state: a restart is the next pass
        let head = self.sim.lock().head();
        self.note(format!("relay {s}: {r:?}, stream head {head}"));
        matches!(r, Ok(n) if n > 0)
    }

    /// One step of shard `s`'s counter aggregator, built from its stored offset if needed.
    /// True when it applied events.
    pub async fn aggregator(&mut self, s: usize) -> bool {
        if self.aggregators[s].is_none() {
            let opts = agg_options(s);
            let built = async {
                let offset = Aggregator::stored_offset(&self.svc, &opts).await?;
                let log = self.ports.consumer(&opts.consumer, Scope::Shard(s), offset).await?;
                Aggregator::with_log(self.svc.clone(), opts, log).await
            }
            .await;
            match built {
                Ok((a, _)) if !self.crashed() => self.aggregators[s] = Some(a),
                other => {
                    self.note(format!("aggregator {s} failed to start: {:?}", other.err()));
                    return false;
                }
            }
        }
        let Some(mut agg) = self.aggregators[s].take() else { return false };
        let r = agg.step(&[]).await;
        let mut note = format!("aggregator {s}: {:?}", r.as_ref().map(|r| (r.events, r.more)));
        if self.crashed() {
            note.push_str(" CRASH");
        } else {
            if r.is_err() {
                agg.resync_offset().await;
            }
            if self.crashed() {
                note.push_str(" CRASH in resync");
            } else {
                self.aggregators[s] = Some(agg);
            }
        }
        self.note(note);
        matches!(r, Ok(rep) if rep.events > 0 || rep.more)
    }

    /// One round of shard `s`'s reverse-index writer. True when it read events.
    pub async fn reverse(&mut self, s: usize) -> bool {
        let name = reverse_index::consumer(s);
        if self.reverse[s].is_none() {
            let built = async {
                let offset = ReverseIndex::offset(&*self.ports, &name).await?;
                let log = self.ports.consumer(&name, Scope::Shard(s), offset).await?;
                Ok::<_, likewise_core::StoreError>((log, offset))
            }
            .await;
            match built {
                Ok(b) if !self.crashed() => self.reverse[s] = Some(b),
                other => {
                    self.note(format!("reverse {s} failed to start: {:?}", other.err()));
                    return false;
                }
            }
        }
        let Some((log, mut offset)) = self.reverse[s].take() else { return false };
        let r = reverse_index::step(&*self.ports, &*log, &name, &mut offset).await;
        let mut note = format!("reverse {s}: {r:?}");
        if self.crashed() {
            note.push_str(" CRASH");
        } else {
            self.reverse[s] = Some((log, offset));
        }
        self.note(note);
        matches!(r, Ok(n) if n > 0)
    }

    /// Partitioned: one step of process `i`'s notifier, started if it is not running, after
    /// it took the partitions it owns and does not read yet (each at its stored offset).
    async fn process_step(&mut self, i: usize) {
        let mut n = match self.processes[i].take() {
            Some(n) => n,
            None => {
                // A process starting: a new reader, on a stream consumer of its own.
                self.readers_made += 1;
                let (ports, name) =
                    (self.ports.clone(), format!("{NOTIFIER}.shared{i}-{}", self.readers_made));
                self.readers[i] = Some(SharedLog::new(
                    Box::new(move |offset| {
                        let (ports, name) = (ports.clone(), name.clone());
                        Box::pin(async move { ports.consumer(&name, Scope::All, offset).await })
                    }),
                    |e| part_of(e.post),
                ));
                Notifier::without_parts(self.svc.clone(), &notifier_options())
            }
        };
        let Some(reader) = self.readers[i].clone() else { return };
        for part in 0..2u16 {
            if self.owner[part as usize] != i || n.partitions().contains(&part) {
                continue;
            }
            let name = part_consumer(NOTIFIER, part);
            let log = async {
                let offset = Notifier::start_offset(&*self.svc, Some(part)).await?;
                Ok::<_, likewise_core::StoreError>(reader.view(part, offset, &name))
            }
            .await;
            let taken = match log {
                Ok(log) => n.take(part, log).await,
                Err(e) => Err(e),
            };
            if self.crashed() {
                self.note(format!("process {i} CRASH taking partition {part}"));
                return;
            }
            if let Err(e) = taken {
                self.note(format!("process {i} did not take partition {part}: {e}"));
            }
        }
        let now = self.sim.lock().now_ms;
        let r = n.step(now).await;
        let offsets: Vec<Option<u64>> =
            (0..2).map(|p| self.sim.lock().offsets.get(&part_consumer(NOTIFIER, p)).copied()).collect();
        let mut note = format!("process {i} notifier {:?}: {r:?}, offsets {offsets:?}", n.partitions());
        if self.crashed() {
            note.push_str(" CRASH");
        } else {
            self.processes[i] = Some(n);
        }
        self.note(note);
    }

    /// Partitioned: move partition `part`'s lease to the other process, given back first
    /// (`orderly`), or taken over from a holder that has not noticed.
    fn handover(&mut self, part: u16, orderly: bool) {
        let from = self.owner[part as usize];
        let to = 1 - from;
        if orderly && let Some(n) = self.processes[from].as_mut() {
            n.give(part);
        }
        self.owner[part as usize] = to;
        self.note(format!(
            "partition {part}: process {from} -> {to} ({})",
            if orderly { "given back" } else { "taken over" }
        ));
    }

    /// One notifier step at the simulated clock.
    pub async fn notifier(&mut self) {
        if self.partitioned {
            let i = self.sim.lock().rng.range(0, 2) as usize;
            return self.process_step(i).await;
        }
        if self.notifier.is_none() {
            let built = async {
                let offset = Notifier::stored_offset(&self.svc).await?;
                let log = self.ports.consumer(NOTIFIER, Scope::All, offset).await?;
                Notifier::with_log(self.svc.clone(), &notifier_options(), log).await
            }
            .await;
            match built {
                Ok(n) if !self.crashed() => self.notifier = Some(n),
                other => {
                    self.note(format!("notifier failed to start: {:?}", other.err().map(|e| e.to_string())));
                    return;
                }
            }
        }
        let now = self.sim.lock().now_ms;
        let Some(mut n) = self.notifier.take() else { return };
        let r = n.step(now).await;
        let stored = self.sim.lock().offsets.get(NOTIFIER).copied();
        let mut note = format!("notifier: {r:?}, offset {stored:?}");
        if self.crashed() {
            note.push_str(" CRASH");
        } else {
            self.notifier = Some(n);
        }
        self.note(note);
    }

    /// One ranker round over the aggregators' commits.
    pub async fn ranker(&mut self) {
        let log = self.svc.shared.remote_events();
        let r = ranker::round(&*self.svc, &*log, &mut self.ranker_offset, &mut self.ranker_dirty, 200).await;
        self.note(format!("ranker: {r:?}"));
    }

    /// The relay retries a failed pass within 200 ms, so a row whose publish was not recorded
    /// is published again well inside the stream's duplicate window (a documented limit:
    /// past it, the stream would take it as a new message). Here relays run at random and the
    /// clock jumps, so a shard with such a row older than half the window makes one pass
    /// without faults.
    async fn relay_overdue(&mut self) {
        let overdue: Vec<usize> = {
            let w = self.sim.lock();
            (0..SHARDS)
                .filter(|s| {
                    w.outbox[*s].iter().filter(|r| r.relayed.is_none()).any(|r| {
                        w.published
                            .get(&(*s, r.seq))
                            .is_some_and(|(_, at)| w.now_ms.saturating_sub(*at) > DUPLICATE_WINDOW_MS / 2)
                    })
                })
                .collect()
        };
        for s in overdue {
            let was = std::mem::replace(&mut self.sim.lock().faults_on, false);
            self.note(format!("relay {s} overdue"));
            self.relay(s, usize::MAX).await;
            self.sim.lock().faults_on = was;
        }
    }

    /// Kill one consumer between steps (`kill -9`): its memory is gone, storage stays.
    pub fn kill(&mut self, which: u64) {
        match which {
            0 if self.partitioned => {
                let (what, part) = {
                    let mut w = self.sim.lock();
                    (w.rng.range(0, 3), w.rng.range(0, 2) as u16)
                };
                match what {
                    0 => {
                        self.processes[part as usize] = None;
                        self.note(format!("kill notifier process {part}"));
                    }
                    1 => self.handover(part, true),
                    _ => self.handover(part, false),
                }
                return;
            }
            0 => self.notifier = None,
            1 | 2 => self.aggregators[(which - 1) as usize] = None,
            _ => self.reverse[(which - 3) as usize % SHARDS] = None,
        }
        self.note(format!("kill consumer {which}"));
    }

    /// Move the clock: mostly a little, sometimes a jump (forward, or back as an NTP step).
    pub fn tick(&mut self) {
        let mut w = self.sim.lock();
        let d = if w.rng.chance(900) {
            w.rng.range(0, 1_500) as i64
        } else if w.rng.chance(700) {
            w.rng.range(5_000, 30_000) as i64
        } else {
            -(w.rng.range(0, 3_000) as i64)
        };
        w.now_ms = w.now_ms.saturating_add_signed(d);
        w.clock_high = w.clock_high.max(w.now_ms);
        drop(w);
        self.note(format!("clock {d:+}"));
    }

    /// The stream's messages, one a line (printed when a seed is replayed).
    pub fn dump(&self) -> Vec<String> {
        let w = self.sim.lock();
        w.stream
            .iter()
            .map(|m| {
                let evs: Vec<String> = m
                    .events
                    .iter()
                    .map(|e| {
                        let sign =
                            if e.kind == likewise_core::event::EventKind::LikeCreated { "+" } else { "-" };
                        format!("{sign}{}:{} ts={}", e.actor.0, target_name(e.target), e.ts_ms % 1_000_000)
                    })
                    .collect();
                format!("msg {} shard {}: {}", m.seq, m.shard, evs.join(" "))
            })
            .collect()
    }

    /// Run one seed: random actions with properties checked after each, then quiesce and
    /// check the final properties.
    pub async fn run(&mut self) -> Result<(), String> {
        let steps = self.sim.lock().rng.range(40, 160);
        for _ in 0..steps {
            let action = self.sim.lock().rng.pick(&[25, 6, 6, 8, 8, 5, 5, 10, 2, 4, 14]);
            match action {
                0 => self.client(),
                1 | 2 => {
                    let batch = self.sim.lock().rng.range(1, 4) as usize;
                    self.relay(action - 1, batch).await;
                }
                3 | 4 => {
                    self.aggregator(action - 3).await;
                }
                5 | 6 => {
                    self.reverse(action - 5).await;
                }
                7 => self.notifier().await,
                8 => self.ranker().await,
                9 => {
                    let which = self.sim.lock().rng.range(0, 5);
                    self.kill(which);
                }
                _ => self.tick(),
            }
            self.relay_overdue().await;
            check::step(&self.sim.lock())?;
        }
        self.quiesce().await;
        check::step(&self.sim.lock())?;
        let head = self.svc.shared.remote_events().head().await.map_err(|e| e.to_string())?;
        check::quiet(&self.sim.lock(), (self.ranker_offset, head), &self.ranker_dirty)
    }

    /// No more faults: relay everything, run every consumer dry, let every hold pass.
    async fn quiesce(&mut self) {
        self.sim.lock().faults_on = false;
        self.note("quiesce".into());
        for _ in 0..4 {
            for s in 0..SHARDS {
                for _ in 0..100 {
                    if !self.relay(s, 16).await {
                        break;
                    }
                }
            }
            for s in 0..SHARDS {
                for _ in 0..100 {
                    if !self.aggregator(s).await {
                        break;
                    }
                }
                for _ in 0..100 {
                    if !self.reverse(s).await {
                        break;
                    }
                }
            }
            {
                let mut w = self.sim.lock();
                w.now_ms = w.clock_high + HOLD_MS + 3_000;
                w.clock_high = w.now_ms;
            }
            if self.partitioned {
                for i in [0, 1, 0, 1] {
                    self.process_step(i).await;
                }
            } else {
                self.notifier().await;
                self.notifier().await;
            }
            self.ranker().await;
        }
    }
}

/// `p3` for post 3, `c101` for comment 101.
pub fn target_name(t: Target) -> String {
    match t.kind {
        likewise_core::like::TargetKind::Post => format!("p{}", t.id),
        likewise_core::like::TargetKind::Comment => format!("c{}", t.id),
    }
}
