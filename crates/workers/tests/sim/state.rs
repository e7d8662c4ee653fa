//! The simulated world behind the ports, and the fault injector. Everything lives behind
//! one mutex and is only touched from one thread, so a run is a function of its seed.

use super::rng::Rng;
use likewise_core::counter::CounterKey;
use likewise_core::event::Event;
use likewise_core::ids::UserId;
use likewise_core::like::Target;
use likewise_core::notify::{NotifItem, NotifKey};
use likewise_core::ports::cluster::Scope;
use likewise_core::{StoreError, StoreResult};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

/// Shards of the simulated deployment (a post's rows live on shard `post % SHARDS`).
pub const SHARDS: usize = 2;
/// JetStream's duplicate window: a row re-published within it is dropped by the stream.
pub const DUPLICATE_WINDOW_MS: u64 = 120_000;
/// How long the stream waits for an acknowledgement before delivering a message again
/// (60 s in production; shorter here so that redeliveries happen in short runs).
pub const ACK_WAIT_MS: u64 = 4_000;

/// What an injected fault does to one port call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The call works.
    None,
    /// The call fails and changes nothing.
    Before,
    /// The call's change lands, then it fails (the answer is lost).
    After,
}

/// How often faults strike, per port call (per mille). Chosen per seed.
#[derive(Debug, Clone, Copy)]
pub struct FaultRates {
    /// A call fails.
    pub fail: u64,
    /// A failing call also kills the consumer that made it (a crash at that step boundary).
    pub crash: u64,
    /// A fetch of the stream brings nothing or only part of what is there (a delay).
    pub slow_fetch: u64,
    /// A fetch's reply is lost on the way (the stream counts the messages delivered).
    pub lost_fetch: u64,
    /// An acknowledgement is lost on the way (the stream redelivers after the ack wait).
    pub lost_ack: u64,
}

/// One committed outbox row of a shard.
#[derive(Debug, Clone)]
pub struct Row {
    /// The row's sequence on its shard.
    pub seq: u64,
    /// Its subject partition.
    pub part: u16,
    /// Its events (one transaction's, for one partition).
    pub events: Vec<Event>,
    /// The stream sequence, once recorded as relayed.
    pub relayed: Option<u64>,
}

/// One message of the stream.
#[derive(Debug, Clone)]
pub struct Msg {
    /// The stream sequence (every event of the message has it as its `seq`).
    pub seq: u64,
    /// The shard that published it.
    pub shard: usize,
    /// Its subject partition.
    pub part: u16,
    /// The events.
    pub events: Vec<Event>,
}

/// The stream's side of a durable consumer.
#[derive(Debug, Clone)]
pub struct Durable {
    /// Which messages it sees.
    pub scope: Scope,
    /// The next stream sequence to deliver for the first time.
    pub next: u64,
    /// Delivered and not acknowledged: stream sequence -> when delivered.
    pub pending: BTreeMap<u64, u64>,
    /// The last delivery's consumer sequence (every delivery takes the next one).
    pub delivered: u64,
}

/// A stored inbox item and its actors' exact contributions ((actor, source) -> when added).
#[derive(Debug, Clone)]
pub struct StoredItem {
    /// The item.
    pub item: NotifItem,
    /// The contributions behind `actor_count` (which counts their distinct actors).
    pub actors: BTreeMap<(UserId, u64), u64>,
}

impl StoredItem {
    /// The distinct actors (the members).
    pub fn members(&self) -> std::collections::BTreeSet<UserId> {
        self.actors.keys().map(|(a, _)| *a).collect()
    }
}

/// What the notifier published, with the clock at that moment.
#[derive(Debug, Clone)]
pub struct Push {
    /// The latest the clock had read by then (what was released was due by it).
    pub clock_high: u64,
    /// The item as published.
    pub item: NotifItem,
}

/// The world.
pub struct Inner {
    /// Every choice of the run.
    pub rng: Rng,
    /// The simulated clock (ms).
    pub now_ms: u64,
    /// The latest the clock has read so far (it also steps back).
    pub clock_high: u64,
    /// Injected faults (off while the run quiesces).
    pub rates: FaultRates,
    /// Whether faults are injected now.
    pub faults_on: bool,
    /// The consumer now running died at a port call.
    pub crashed: bool,
    /// The like rows: (target, user) -> when liked. The truth.
    pub likes: BTreeMap<(Target, UserId), u64>,
    /// Each shard's outbox.
    pub outbox: Vec<Vec<Row>>,
    /// The stream.
    pub stream: Vec<Msg>,
    /// Published row identities (shard, row seq) -> (stream seq, when first published).
    pub published: HashMap<(usize, u64), (u64, u64)>,
    /// Durable consumers by name.
    pub durables: HashMap<String, Durable>,
    /// Consumer offsets (the counters' and the inbox's, stored with their effects).
    pub offsets: HashMap<String, u64>,
    /// Counters.
    pub counters: HashMap<CounterKey, i64>,
    /// Inboxes.
    pub inbox: BTreeMap<NotifKey, StoredItem>,
    /// The next inbox item ID.
    pub next_item: u64,
    /// The reverse index: (user, target) -> when liked.
    pub reverse: BTreeMap<(UserId, Target), u64>,
    /// Everything the notifier published.
    pub pushes: Vec<Push>,
}

impl Inner {
    /// Decide the fate of one port call that writes (`write`) or only reads.
    pub fn fault(&mut self, write: bool) -> Fault {
        if !self.faults_on || !self.rng.chance(self.rates.fail) {
            return Fault::None;
        }
        if self.rng.chance(self.rates.crash) {
            self.crashed = true;
        }
        if write && self.rng.chance(500) { Fault::After } else { Fault::Before }
    }

    /// True with probability `per_mille / 1000` while faults are on.
    pub fn roll(&mut self, per_mille: u64) -> bool {
        self.faults_on && self.rng.chance(per_mille)
    }

    /// The error an injected fault returns.
    pub fn injected(&self, what: &str) -> StoreError {
        StoreError::Engine(format!("injected fault: {what}"))
    }

    /// Fail a read-only call now and then.
    pub fn read_fault(&mut self, what: &str) -> StoreResult<()> {
        match self.fault(false) {
            Fault::None => Ok(()),
            _ => Err(self.injected(what)),
        }
    }

    /// The last stream sequence (0 when empty).
    pub fn head(&self) -> u64 {
        self.stream.last().map_or(0, |m| m.seq)
    }
}

/// The shared handle on the world.
#[derive(Clone)]
pub struct Sim(pub Arc<Mutex<Inner>>);

impl Sim {
    /// A new, empty world for one seed.
    pub fn new(mut rng: Rng) -> Self {
        let rates = FaultRates {
            fail: [0, 20, 60, 120][rng.range(0, 4) as usize],
            crash: rng.range(0, 700),
            slow_fetch: rng.range(0, 600),
            lost_fetch: rng.range(0, 60),
            lost_ack: rng.range(0, 100),
        };
        Sim(Arc::new(Mutex::new(Inner {
            rng,
            now_ms: 1_700_000_000_000,
            clock_high: 1_700_000_000_000,
            rates,
            faults_on: true,
            crashed: false,
            likes: BTreeMap::new(),
            outbox: vec![Vec::new(); SHARDS],
            stream: Vec::new(),
            published: HashMap::new(),
            durables: HashMap::new(),
            offsets: HashMap::new(),
            counters: HashMap::new(),
            inbox: BTreeMap::new(),
            next_item: 1,
            reverse: BTreeMap::new(),
            pushes: Vec::new(),
        })))
    }

    /// Lock the world (never held across an `.await`).
    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        match self.0.lock() {
            Ok(g) => g,
            // A panic elsewhere already fails the run; keep reading the state for its report.
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}
