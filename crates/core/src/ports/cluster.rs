//! The ports of a scaled-out deployment, beyond storage: what the background workers need to
//! coordinate several processes, and what the nodes tell each other.
//!
//! - [`Leases`]: one process at a time runs a shard's workers (or the notifier); the others
//!   stand by.
//! - [`Outbox`] and [`EventStream`]: the relay moves each shard's committed outbox rows to the
//!   stream, in order; consumers read the stream through durable [`EventLog`]s.
//! - [`ReverseIndex`]: where the reverse-index writer puts each user's likes.
//! - [`Broadcast`] and [`Bus`]: the cluster bus between nodes (cache invalidations, new
//!   counts, status changes not counted yet, live notifications), fire and forget.
//!
//! The scale-out engines implement them (`likewise-scaleout`); the workers that use them
//! (`likewise-workers`) know only these traits, so they run the same on a simulated engine.

use super::EventLog;
use crate::StoreResult;
use crate::comment::uncounted::Move;
use crate::counter::CounterKey;
use crate::event::Event;
use crate::ids::{CommentId, PostId, UserId};
use crate::like::Target;
use crate::notify::NotifItem;
pub use crate::reverse::ReverseChange;
use async_trait::async_trait;
use std::sync::Arc;

/// The name of consumer `name`'s instance on shard `shard` (`counters@3`): a consumer that
/// writes a shard's counters keeps its offset on that shard.
pub fn shard_consumer(name: &str, shard: usize) -> String {
    format!("{name}@{shard}")
}

/// The stream's subject partitions per shard: a post's events travel on partition
/// `post % PARTITIONS`, and a [`Partitioned`] consumer runs one instance per partition.
pub const PARTITIONS: u64 = 64;

/// What a lease guards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaseName {
    /// A shard's relay, counter aggregator and reverse-index writer.
    Shard(usize),
    /// The notifier as one consumer for the whole deployment (the worker role runs it in
    /// partitions instead: [`LeaseName::Part`]).
    Notifier,
    /// The event export (one for the whole deployment).
    Export,
    /// The integrity consumer (one for the whole deployment). Named for trending, which ran
    /// under it too until it was partitioned ([`Partitioned::Trending`]): a worker of either
    /// version takes the same lease for integrity.
    Trending,
    /// One partition of a consumer shared by several worker processes ([`Partitioned`]):
    /// the events of the posts `post % PARTITIONS == part`, on every shard.
    Part(Partitioned, u16),
}

/// A consumer whose work is split by post partition over the worker processes: each
/// partition runs under a lease of its own ([`LeaseName::Part`]), with an offset (and a
/// writer fence) of its own ([`part_consumer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Partitioned {
    /// The notifier: an item is per (recipient, post), so a post's partition owns it fully.
    Notifier,
    /// Trending: a post's windows are its own, so a post's partition owns them fully; each
    /// partition keeps its own top posts, and readers merge them (`likewise_core::trending`).
    Trending,
}

impl Partitioned {
    /// Every partitioned consumer.
    pub const ALL: [Partitioned; 2] = [Partitioned::Notifier, Partitioned::Trending];

    /// Its consumer name (`notifications`, `trending`): its partitions' names start with it
    /// ([`part_consumer`]), and it is the `consumer` label of its metrics.
    pub fn name(self) -> &'static str {
        match self {
            Partitioned::Notifier => "notifications",
            Partitioned::Trending => "trending",
        }
    }
}

/// The partition of post `post`'s events (`post % PARTITIONS`).
pub fn part_of_post(post: u64) -> u16 {
    (post % PARTITIONS) as u16
}

/// The name of partition `part` of consumer `name` (`notifications.p7`): the key of its
/// offset, of its writer fence and of its durable consumer on the stream. (Not `@`, which
/// names a shard: [`shard_consumer`].)
pub fn part_consumer(name: &str, part: u16) -> String {
    format!("{name}.p{part}")
}

/// A lease this process holds; dropping it gives it back.
#[async_trait]
pub trait Lease: Send + Sync {
    /// Whether the lease is still held (false once its connection was lost).
    async fn holds(&self) -> bool;
}

/// Leases: at most one holder per name across the deployment.
#[async_trait]
pub trait Leases: Send + Sync {
    /// Take `name` if nobody holds it; `None` when another process does.
    async fn try_take(&self, name: LeaseName) -> StoreResult<Option<Box<dyn Lease>>>;

    /// How many worker processes share the partitioned consumers now, this one included
    /// once it called [`Leases::join`] (at least 1). Each aims for `ceil(partitions / members)`
    /// partitions.
    async fn members(&self) -> StoreResult<usize> {
        Ok(1)
    }

    /// The partitions of `consumer` some process holds a lease of now, when the engine can
    /// tell in one round trip (`None`: try every partition not held here).
    async fn taken_parts(&self, _consumer: Partitioned) -> StoreResult<Option<Vec<u16>>> {
        Ok(None)
    }

    /// Count this process among [`Leases::members`] until it ends (or loses its connection
    /// to the store: then it stops counting, and its partition leases are lost with it).
    async fn join(&self) -> StoreResult<()> {
        Ok(())
    }
}

/// One committed outbox row: one transaction's events for one subject partition, packed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRow {
    /// The row's sequence on its shard (commit order of the rows' keys).
    pub seq: u64,
    /// The subject partition (`post % partitions`).
    pub part: u16,
    /// The packed events (`crate::event::pack`).
    pub body: Vec<u8>,
}

/// The shards' transactional outboxes, as the relay sees them.
#[async_trait]
pub trait Outbox: Send + Sync {
    /// How many shards there are.
    fn shard_count(&self) -> usize;
    /// The shard holding a post's rows (and its counters, its aggregator's offset).
    fn shard_of_post(&self, post: PostId) -> usize;
    /// Up to `max` rows of `shard` not relayed yet, in `seq` order.
    async fn unrelayed(&self, shard: usize, max: usize) -> StoreResult<Vec<OutboxRow>>;
    /// Record that rows `(seq, stream sequence)` are on the stream.
    async fn mark_relayed(&self, shard: usize, relayed: &[(u64, u64)]) -> StoreResult<()>;
    /// Delete relayed rows written before `before_ms`; returns how many.
    async fn prune(&self, shard: usize, before_ms: u64) -> StoreResult<u64>;
    /// Wake-ups for `shard`'s relay when rows are committed, so an idle relay need not poll;
    /// `None` when the engine has none (the relay then polls as often as while busy). Rows
    /// committed once this returns are announced; rows committed before it may not be.
    async fn wakeups(&self, _shard: usize) -> StoreResult<Option<Box<dyn OutboxWakeups>>> {
        Ok(None)
    }
}

/// A subscription to one shard's new outbox rows ([`Outbox::wakeups`]).
#[async_trait]
pub trait OutboxWakeups: Send {
    /// Wait until rows were committed since the last call, or `timeout` passed: `Ok(true)`
    /// when announced, `Ok(false)` on the timeout, an error when the subscription broke
    /// (subscribe again). Announcements that came meanwhile are consumed together.
    async fn wait(&mut self, timeout: std::time::Duration) -> StoreResult<bool>;
}

/// Which events a consumer reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// One shard's events (its counter aggregator, its reverse-index writer).
    Shard(usize),
    /// Every shard's (the notifier).
    All,
    /// One post partition's events on every shard (`post % PARTITIONS == part`: one
    /// partition of a [`Partitioned`] consumer).
    Part(u16),
}

/// The deployment's event stream.
#[async_trait]
pub trait EventStream: Send + Sync {
    /// Publish `rows` of `shard`, in order, each exactly once within the stream's duplicate
    /// window (a re-publish after a crash is recognised by the row's identity), and return
    /// each row's stream sequence once the stream has acknowledged it.
    async fn publish(&self, shard: usize, rows: &[OutboxRow]) -> StoreResult<Vec<u64>>;
    /// A durable consumer `name` of `scope`, positioned after `offset` (the offset its owner
    /// committed with its effects): delivered but uncommitted events come again.
    async fn consumer(&self, name: &str, scope: Scope, offset: u64) -> StoreResult<Arc<dyn EventLog>>;
}

/// The user-keyed like index of a sharded deployment, written from the stream.
#[async_trait]
pub trait ReverseIndex: Send + Sync {
    /// Apply a round's final states (idempotent: a replayed round writes the same rows).
    async fn apply(&self, changes: &[ReverseChange]) -> StoreResult<()>;
    /// Where `consumer` is.
    async fn offset(&self, consumer: &str) -> StoreResult<u64>;
    /// Move `consumer` to `upto` (after its round was applied).
    async fn set_offset(&self, consumer: &str, upto: u64) -> StoreResult<()>;
}

/// Repairs of a sharded store's likers lists ("who liked this"), which PostgreSQL keeps as
/// pages beside the like rows (`likewise reconcile`).
#[async_trait]
pub trait LikerPageRepair: Send + Sync {
    /// Every target of `shard` whose pages disagree with its like rows.
    async fn drifted(&self, shard: usize) -> StoreResult<Vec<Target>>;
    /// Rebuild `target`'s pages if they disagree with its rows: `Some((rows, entries))` when
    /// they did (and were rebuilt), `None` when they agreed.
    async fn repair(&self, target: Target) -> StoreResult<Option<(i64, i64)>>;
}

/// A cache entry other nodes must drop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalidation {
    /// A post's metadata.
    Post(PostId),
    /// A user's profile.
    User(UserId),
    /// Whom a user follows.
    Follows(UserId),
    /// A viewer's settings.
    Settings(UserId),
    /// Whom a user blocks.
    Blocks(UserId),
    /// Whether `.0` restricts `.1`.
    Restrict(UserId, UserId),
    /// A user's hidden words.
    HiddenWords(UserId),
    /// A post's top-comments ranking (pins or a ranked comment's status changed).
    Top(PostId),
    /// A comment record (its status changed or it was deleted).
    Comment(CommentId),
}

/// How a node tells the others. Fire and forget: a lost message costs freshness until a
/// TTL, never data.
pub trait Broadcast: Send + Sync {
    /// Announce a cache entry to drop.
    fn invalidate(&self, inv: Invalidation);
    /// Send stored inbox changes to every node's live listeners.
    fn notifications(&self, items: &[NotifItem]);
    /// Send an aggregator commit (new counter values, ranking events) to every node.
    fn counters(&self, epoch: u64, values: &[(CounterKey, i64)], events: &[Event]);
    /// Tell every node of a status change about to be written whose move of the counts the
    /// counters have not taken in yet (`made`), or that it was withdrawn, its write having
    /// changed nothing (`likewise_core::comment::uncounted`).
    fn count_move(&self, m: Move, made: bool);
}

/// What another node said.
#[derive(Debug, Clone, PartialEq)]
pub enum BusMessage {
    /// Drop a cache entry.
    Invalidate(Invalidation),
    /// An aggregator committed: the log position, new absolute values, ranking events.
    Counters {
        /// The aggregator's log position.
        epoch: u64,
        /// New absolute counter values.
        values: Vec<(CounterKey, i64)>,
        /// The ranking-relevant events of the commit.
        events: Vec<Event>,
    },
    /// Stored inbox changes, for the node holding the recipient's live stream.
    Notifications(Vec<NotifItem>),
    /// A status change's move of the counts, registered (`made`) or withdrawn.
    CountMove {
        /// The move.
        mv: Move,
        /// Registered (true) or withdrawn (false).
        made: bool,
    },
}

/// The cluster bus: send with [`Broadcast`], receive with [`Bus::subscribe`]. A node never
/// receives its own messages.
#[async_trait]
pub trait Bus: Broadcast {
    /// Start receiving the other nodes' messages.
    async fn subscribe(&self) -> StoreResult<Box<dyn BusInbox>>;
}

/// A subscription to the cluster bus.
#[async_trait]
pub trait BusInbox: Send {
    /// The next message; `None` once the bus is gone.
    async fn recv(&mut self) -> Option<BusMessage>;
}
