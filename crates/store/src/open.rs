//! Opens the embedded engine and bundles an engine's ports into [`Stores`]. Which engine a
//! process runs is chosen where the binary is wired (`likewise-app`'s `engines.rs`): the one
//! place that knows every engine, including the optional scale-out ones.

use crate::embedded::{EmbeddedOptions, EmbeddedStore};
use crate::group_commit::{GroupCommitOptions, GroupCommitter};
use async_trait::async_trait;
use likewise_core::ports::{
    CommentReader, CounterStore, EventLog, HeldMarks, IdempotencyStore, IntegrityStore, LikeReader,
    MetaStore, ModerationStore, NotificationStore, OwnLikes, RankIndex, SharedRateLimiter, SnapshotStore,
    ViewStore, WriteEngine,
};
use likewise_core::{StoreError, StoreResult};
use std::path::PathBuf;
use std::sync::Arc;

/// How to open the embedded engine.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Where the embedded engine keeps its files.
    pub data_dir: PathBuf,
    /// Embedded engine tuning.
    pub embedded: EmbeddedOptions,
    /// Write-path batching.
    pub group_commit: GroupCommitOptions,
}

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

/// Marks a first start in progress: the file in the data directory beside `store`, made
/// durable before the store is created and removed once it has opened.
const CREATING: &str = "store.creating";

/// Open (or create) the embedded engine in `cfg.data_dir`.
///
/// A first start that failed (a full disk, say) must not block the next one: fjall writes its
/// `version` marker early in creating a store, and a store left with an empty or missing
/// marker refused every later start (`InvalidVersion(None)`) until the folder was deleted by
/// hand. So a first start is bracketed by [`CREATING`]: a store found with that marker still
/// present, or without a complete `version`, never finished opening, so it never acknowledged
/// a write; it is removed and created afresh, with a warning.
pub fn open(cfg: &StoreConfig) -> StoreResult<Stores> {
    // fjall fsyncs inside its folder, not the entries leading to it (see `durable_dir`).
    let dir = cfg.data_dir.join("store");
    let io = |what: &str, e: std::io::Error| StoreError::Engine(format!("{what} {}: {e}", dir.display()));
    crate::durable_dir::create_all(&cfg.data_dir).map_err(|e| io("cannot create", e))?;
    let marker = cfg.data_dir.join(CREATING);
    let first = begin_first_start(&dir, &marker).map_err(|e| io("cannot prepare", e))?;
    crate::durable_dir::create_all(&dir).map_err(|e| io("cannot create", e))?;
    let store = EmbeddedStore::open(&dir, &cfg.embedded)?;
    if first {
        std::fs::remove_file(&marker)
            .and_then(|()| crate::durable_dir::sync(&cfg.data_dir))
            .map_err(|e| io("cannot finish creating", e))?;
    }
    Ok(from_embedded(store, cfg.group_commit.clone()))
}

/// fjall's `version` marker: "FJL" and the format's byte.
const VERSION_BYTES: u64 = 4;

/// Before opening the store at `dir`: remove what an unfinished first start left, and when the
/// store is yet to be created, mark the first start (`marker`, durable). True on a first start.
fn begin_first_start(dir: &std::path::Path, marker: &std::path::Path) -> std::io::Result<bool> {
    let version = std::fs::metadata(dir.join("version")).map(|m| m.len()).unwrap_or(0);
    let unfinished = marker.exists() || version < VERSION_BYTES;
    if !unfinished {
        return Ok(false);
    }
    if dir.exists() {
        tracing::warn!(
            dir = %dir.display(),
            "the store's first start did not finish (a full disk?); it never acknowledged a write: \
             creating it afresh"
        );
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::File::create(marker)?.sync_all()?;
    if let Some(parent) = marker.parent() {
        crate::durable_dir::sync(parent)?;
    }
    Ok(true)
}

/// Wrap an already opened embedded store.
pub fn from_embedded(store: EmbeddedStore, gc: GroupCommitOptions) -> Stores {
    let arc = Arc::new(store);
    Stores::from_engine(arc.clone(), arc, gc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embedded::EmbeddedOptions;

    fn config(dir: &std::path::Path) -> StoreConfig {
        StoreConfig {
            data_dir: dir.join("data"),
            embedded: EmbeddedOptions::default(),
            group_commit: GroupCommitOptions::default(),
        }
    }

    fn opens(cfg: &StoreConfig) {
        let stores = open(cfg).expect("the store opens");
        stores.close().expect("close");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_store_left_with_an_empty_version_marker_is_created_afresh() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cfg = config(tmp.path());
        // What a first start on a full disk left: the folder, a journal, a 0-byte marker.
        let store = cfg.data_dir.join("store");
        std::fs::create_dir_all(&store).expect("mkdir");
        std::fs::write(store.join("version"), b"").expect("version");
        std::fs::write(store.join("0.jnl"), b"").expect("journal");
        opens(&cfg);
        assert_eq!(std::fs::metadata(store.join("version")).expect("version").len(), VERSION_BYTES);
        assert!(!cfg.data_dir.join(CREATING).exists(), "the first start finished");
        opens(&cfg);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_store_whose_first_start_never_finished_is_created_afresh_and_a_finished_one_is_kept() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cfg = config(tmp.path());
        opens(&cfg);
        let kept = cfg.data_dir.join("store").join("kept-by-a-later-start");
        std::fs::write(&kept, b"").expect("write");
        opens(&cfg);
        assert!(kept.exists(), "a store that opened before is never touched");
        // The first start failed after fjall wrote its marker (creating a keyspace, say).
        std::fs::write(cfg.data_dir.join(CREATING), b"").expect("marker");
        opens(&cfg);
        assert!(!kept.exists(), "the unfinished store was created afresh");
        assert!(!cfg.data_dir.join(CREATING).exists());
    }
}
