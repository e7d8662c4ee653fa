//! The embedded store's state: every keyspace handle, lock and in-memory structure, opened
//! in `opening.rs`. Its fields are the leaf types of the files beside it; the code that works
//! on it lives in the files of each port.

use super::error::engine_err;
use super::journal_check;
use super::journal_sync;
use super::like_filter;
use super::space;
use super::tail;
use fjall::{Database, Keyspace};
use likewise_core::StoreResult;
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// The embedded store. Cheap to clone (all handles are reference-counted).
#[derive(Clone)]
pub struct EmbeddedStore {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) db: Database,
    pub(super) user_likes: Keyspace,
    /// "Certainly not liked" for the write path's existence checks (`like_filter.rs`).
    pub(super) like_filter: like_filter::LikeFilter,
    pub(super) likers: Keyspace,
    pub(super) events: Keyspace,
    pub(super) counters: Keyspace,
    pub(super) offsets: Keyspace,
    pub(super) posts: Keyspace,
    pub(super) users: Keyspace,
    pub(super) follows: Keyspace,
    pub(super) followers: Keyspace,
    pub(super) settings: Keyspace,
    pub(super) comments: Keyspace,
    pub(super) top_comments: Keyspace,
    pub(super) replies: Keyspace,
    pub(super) comment_posts: Keyspace,
    /// An author's held replies (`comments.rs`).
    pub(super) held_replies: Keyspace,
    pub(super) views: Keyspace,
    /// Per-(post, hour) unique-viewer sketches; layout in `views.rs`.
    pub(super) hourly_views: Keyspace,
    /// One merger of hourly sketches at a time (read, merge, write back).
    pub(super) hourly_lock: Mutex<()>,
    pub(super) notif_items: Keyspace,
    pub(super) notif_keys: Keyspace,
    pub(super) notif_actors: Keyspace,
    pub(super) notif_time: Keyspace,
    /// Every item by its last update, oldest first, for the retention (`notifications.rs`).
    pub(super) notif_age: Keyspace,
    /// One writer of inboxes at a time (the notification consumer).
    pub(super) notif_lock: Mutex<()>,
    // Moderation keyspaces; layouts in `moderation.rs`.
    pub(super) blocks: Keyspace,
    pub(super) restricts: Keyspace,
    pub(super) hidden_words: Keyspace,
    pub(super) pins: Keyspace,
    pub(super) reports: Keyspace,
    pub(super) report_counts: Keyspace,
    pub(super) mod_queue: Keyspace,
    pub(super) holds: Keyspace,
    pub(super) appeals: Keyspace,
    pub(super) fingerprints: Keyspace,
    /// Consumers' saved state, by name (`snapshots.rs`).
    pub(super) snapshots: Keyspace,
    /// Fenced snapshot saves and new fences, one at a time (`snapshots.rs`).
    pub(super) snapshot_lock: Mutex<()>,
    /// Integrity verdicts and their time index (`integrity.rs`), changed under the lock.
    pub(super) integrity_decisions: Keyspace,
    pub(super) integrity_times: Keyspace,
    pub(super) integrity_lock: Mutex<()>,
    /// The rank index of the "top" order and where each entry is (`ranks.rs`).
    pub(super) rank_order: Keyspace,
    pub(super) rank_held: Keyspace,
    pub(super) rank_held_by: Keyspace,
    pub(super) rank_of: Keyspace,
    /// Each post's index version, where its entries were before they moved, and when.
    pub(super) rank_versions: Keyspace,
    pub(super) rank_history: Keyspace,
    pub(super) rank_history_times: Keyspace,
    /// Serialises `change_ranks`' read-modify-write.
    pub(super) rank_lock: Mutex<()>,
    /// `Idempotency-Key`s of comment creates and their expiry index (`idempotency.rs`).
    pub(super) comment_keys: Keyspace,
    pub(super) comment_key_times: Keyspace,
    /// How many keys `comment_keys` holds.
    pub(super) key_count: AtomicU64,
    /// Comment IDs: seeded from the highest stored ID, so unique across restarts.
    pub(super) id_gen: Mutex<likewise_core::comment::id::CommentIdGen>,
    /// Next event sequence; only the write path (one thread at a time) advances it.
    pub(super) next_seq: AtomicU64,
    /// The last event sequence known to be on disk: committed batches are visible before the
    /// group committer's fsync makes them durable, and only events up to here may leave the
    /// process (`EventLog::durable_head`).
    pub(super) durable_seq: AtomicU64,
    /// fjall's sequence number of the group commit's last batch, where it is known exactly:
    /// what a sync records as durable (`journal_check.rs`). fjall's counter ([`fjall::Database::seqno`])
    /// also numbers every flush and compaction, which write no journal batch, so "the counter
    /// less one" could name a number no journal holds, and the next start then refused a whole
    /// journal as cut (found by the power-cut tests).
    pub(super) last_batch: AtomicU64,
    /// Serialises `apply` so sequence order equals commit order even with several callers.
    pub(super) write_lock: Mutex<()>,
    /// The newest events, decoded, for the consumers that follow the head (`tail.rs`).
    pub(super) tail: Mutex<tail::EventTail>,
    /// Serialises `add_report`'s read-modify-write of a comment's report count, and
    /// `add_appeal`'s check-then-insert.
    pub(super) report_lock: Mutex<()>,
    /// Serialises `change_pin`'s read-modify-write of a post's pin list.
    pub(super) pin_lock: Mutex<()>,
    /// Budget of the active memtables (see [`EmbeddedOptions::write_buffer_bytes`](super::options::EmbeddedOptions::write_buffer_bytes)).
    pub(super) write_buffer_limit: u64,
    /// Every keyspace handle, for memory accounting.
    pub(super) all: Vec<Keyspace>,
    /// The group commit's fsync, outside fjall's journal lock (`journal_sync.rs`).
    pub(super) journal_sync: journal_sync::JournalSync,
    /// How far the journal is durable, for the check at the next open (`journal_check.rs`).
    pub(super) progress: journal_check::ProgressFile,
    /// Refuses write batches while the disk is nearly full (`space.rs`).
    pub(super) space: space::SpaceGuard,
}

impl Inner {
    /// fsync the journal (fjall's own, locked) and record how far it is durable.
    pub(super) fn persist(&self) -> StoreResult<()> {
        let upto = self.last_batch.load(std::sync::atomic::Ordering::SeqCst);
        self.db.persist(fjall::PersistMode::SyncAll).map_err(engine_err)?;
        self.progress.durable(upto, None);
        Ok(())
    }
}
