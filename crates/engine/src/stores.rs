//! Every port of an opened engine bundled into [`Stores`], with the write path in front, and
//! what a process needs of an engine besides its ports ([`Engine`], [`Probe`]). Which engine a
//! process runs is chosen where the binary is wired (`likewise-app`'s `engines.rs`).

use crate::group_commit::{GroupCommitOptions, GroupCommitter};
use async_trait::async_trait;
use likewise_core::StoreResult;
use likewise_core::ports::{
    CommentReader, CounterStore, EventLog, HeldMarks, IdempotencyStore, IntegrityStore, LikeReader,
    MetaStore, ModerationStore, NotificationStore, OwnLikes, RankIndex, SharedRateLimiter, SnapshotStore,
    ViewStore, WriteEngine,
};
use std::sync::Arc;

/// A dependency `/healthz` reports on besides the storage itself (the shared cache, the
/// event stream of a scaled-out deployment).
#[async_trait]
pub trait Probe: Send + Sync {
    /// Its name in `/healthz`'s `checks` (`cache`, `stream`).
    fn name(&self) -> &'static str;
    /// Ok when it answers now (the caller bounds how long it waits).
    async fn probe(&self) -> StoreResult<()>;
}

/// What a process needs of an engine beyond its ports: durability at stop, catching up the
/// indexes it derives asynchronously, and its own gauges.
#[async_trait]
pub trait Engine: Send + Sync {
    /// The engine's name in logs and errors (`embedded`, `postgres`).
    fn name(&self) -> &'static str;
    /// Make everything written so far durable (called once the write path is closed).
    fn persist(&self) -> StoreResult<()> {
        Ok(())
    }
    /// Make derived indexes that the engine maintains asynchronously (the PostgreSQL reverse
    /// index) reflect every write so far. Tests and tools only.
    async fn settle(&self) -> StoreResult<()> {
        Ok(())
    }
    /// Set the engine's own gauges (disk, memory) in `/metrics`; called at scrape time.
    fn publish_gauges(&self) {}
}

/// Every port of an opened engine, plus its write path.
#[derive(Clone)]
pub struct Stores {
    /// The group-commit write path for likes.
    pub writer: Arc<GroupCommitter>,
    /// The engine under the write path (conformance tests drive it directly).
    pub write_engine: Arc<dyn WriteEngine>,
    /// Comments.
    pub comments: Arc<dyn CommentReader>,
    /// Unique-viewer sketches.
    pub views: Arc<dyn ViewStore>,
    /// Notification inboxes.
    pub notifications: Arc<dyn NotificationStore>,
    /// Like rows and the reverse index.
    pub likes: Arc<dyn LikeReader>,
    /// The event log.
    pub events: Arc<dyn EventLog>,
    /// Counters and consumer offsets.
    pub counters: Arc<dyn CounterStore>,
    /// Posts, users, follows, settings.
    pub meta: Arc<dyn MetaStore>,
    /// Blocks, restricts, hidden words, pins, reports, the review queue and text fingerprints.
    pub moderation: Arc<dyn ModerationStore>,
    /// Consumers' saved state (trending windows).
    pub snapshots: Arc<dyn SnapshotStore>,
    /// Moderators' integrity verdicts.
    pub integrity: Arc<dyn IntegrityStore>,
    /// `Idempotency-Key`s of comment creates.
    pub idempotency: Arc<dyn IdempotencyStore>,
    /// The rank index of the "top" comment order.
    pub ranks: Arc<dyn RankIndex>,
    /// The engine itself: stop, settle, gauges.
    pub engine: Arc<dyn Engine>,
    /// Where API nodes record each viewer's own like writes for the other nodes (a shared
    /// cache); `None`: this process sees every write itself.
    pub own_likes: Option<Arc<dyn OwnLikes>>,
    /// What is known of users' held comments, shared by every API node (a shared cache);
    /// `None`: feed pages read them from storage.
    pub held_marks: Option<Arc<dyn HeldMarks>>,
    /// Rate limits shared by every API node; `None`: each process limits alone.
    pub rate_limiter: Option<Arc<dyn SharedRateLimiter>>,
    /// Dependencies other than the storage, for `/healthz` (none on the embedded engine).
    pub probes: Vec<Arc<dyn Probe>>,
    /// The embedded store's identity (its data directory's `store.id`), so a command that
    /// finds a node at an address can tell whether that node holds the same store; `None` on
    /// the scale-out engines.
    pub identity: Option<String>,
}

impl Stores {
    /// Every port served by one engine value, behind a new group committer.
    pub fn from_engine<E>(engine: Arc<E>, events: Arc<dyn EventLog>, gc: GroupCommitOptions) -> Stores
    where
        E: WriteEngine
            + CommentReader
            + ViewStore
            + NotificationStore
            + LikeReader
            + CounterStore
            + MetaStore
            + ModerationStore
            + SnapshotStore
            + IdempotencyStore
            + IntegrityStore
            + RankIndex
            + Engine
            + 'static,
    {
        Stores {
            writer: GroupCommitter::start(engine.clone(), gc),
            write_engine: engine.clone(),
            comments: engine.clone(),
            views: engine.clone(),
            notifications: engine.clone(),
            likes: engine.clone(),
            events,
            counters: engine.clone(),
            meta: engine.clone(),
            moderation: engine.clone(),
            snapshots: engine.clone(),
            idempotency: engine.clone(),
            integrity: engine.clone(),
            ranks: engine.clone(),
            engine,
            own_likes: None,
            held_marks: None,
            rate_limiter: None,
            probes: Vec::new(),
            identity: None,
        }
    }

    /// Make derived indexes reflect every write so far (see [`Engine::settle`]).
    pub async fn settle(&self) -> StoreResult<()> {
        self.engine.settle().await
    }

    /// Stop the write path (draining and syncing queued writes) and make everything durable.
    pub fn close(&self) -> StoreResult<()> {
        self.writer.close();
        self.engine.persist()
    }
}
