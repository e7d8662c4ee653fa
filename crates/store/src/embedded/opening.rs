//! Opening the embedded store: the journal check, every keyspace, the conversions of stores
//! written by earlier versions, and the background threads that run beside it.

use super::error::engine_err;
use super::like_filter_build;
use super::options::EmbeddedOptions;
use super::state::{EmbeddedStore, Inner};
use super::{comments, counters, idempotency, journal_check, journal_sync, like_filter, liker_pages};
use super::{notifications, ranks, space, tail};
use fjall::{AbstractTree, Database, Keyspace, KeyspaceCreateOptions};
use likewise_core::{StoreError, StoreResult};
use parking_lot::Mutex;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

/// Keep the active memtables within their budget: every 50 ms, while their sum exceeds it,
/// seal the largest (fjall's flush workers then write it out). A thread of its own, so the
/// write path never pays for it; it ends when the store is dropped.
fn spawn_write_buffer_governor(inner: std::sync::Weak<Inner>) {
    let spawned = std::thread::Builder::new().name("likewise-memtables".into()).spawn(move || {
        loop {
            std::thread::sleep(std::time::Duration::from_millis(50));
            let Some(inner) = inner.upgrade() else { return };
            let mut sizes: Vec<(u64, &Keyspace)> =
                inner.all.iter().map(|k| (k.tree.active_memtable().size(), k)).collect();
            let mut active: u64 = sizes.iter().map(|(s, _)| s).sum();
            sizes.sort_unstable_by_key(|s| std::cmp::Reverse(s.0));
            for (size, k) in sizes {
                if active <= inner.write_buffer_limit || size == 0 {
                    break;
                }
                match k.rotate_memtable() {
                    Ok(_) => metrics::counter!("likewise_store_memtable_rotations_total").increment(1),
                    Err(e) => tracing::warn!(error = %e, "sealing a memtable failed"),
                }
                active -= size;
            }
        }
    });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "could not start the memtable governor; per-keyspace caps still apply");
    }
}

/// Events the in-memory tail of the log holds: about 20 MiB, a second of a hot post's storm
/// (260k likes/s), so the consumers that fold a second at a time and the export's batches read
/// from memory rather than from storage beside the writer.
const EVENT_TAIL_EVENTS: usize = 262_144;

/// Bloom filter bits per key of the keyspaces that are point-read, on every level.
const FILTER_BITS_PER_KEY: f32 = 10.0;

/// Data block size of the keyspaces that are only scanned (fjall's default is 4 KiB).
const SCAN_BLOCK_BYTES: u32 = 16 * 1024;

/// Keys between full (unshared) keys in the data blocks of the keyspaces that are only
/// scanned (fjall's default is 16).
const SCAN_RESTART_INTERVAL: u8 = 32;

/// Keyspaces earlier versions wrote and this one no longer reads, removed on open:
/// `likes` duplicated `user_likes` (see `likes.rs`); every like it held is also in
/// `user_likes` and `likers`, written in the same atomic batches.
const RETIRED_KEYSPACES: [&str; 1] = ["likes"];

fn drop_retired_keyspaces(db: &Database) -> StoreResult<()> {
    for name in RETIRED_KEYSPACES {
        if db.keyspace_exists(name) {
            let k = db.keyspace(name, KeyspaceCreateOptions::default).map_err(engine_err)?;
            db.delete_keyspace(k).map_err(engine_err)?;
            tracing::info!(keyspace = name, "removed a keyspace this version no longer uses");
        }
    }
    Ok(())
}

impl EmbeddedStore {
    /// Open (or create) the store in `dir`, replaying the journal if the last run crashed.
    pub fn open(dir: &Path, opts: &EmbeddedOptions) -> StoreResult<Self> {
        let started = Instant::now();
        // The lock file may still be held for a moment by a store of this process that was
        // just dropped (its background threads let go of it last): wait a little before
        // deciding that another process holds it.
        let locked_until = Instant::now() + journal_check::LOCK_LET_GO;
        let (db, checked) = loop {
            // The journal is checked before fjall reads it (and truncates it at the first
            // damage), holding the lock fjall takes so that no running store is judged.
            let checked = match journal_check::lock(dir)? {
                journal_check::Lock::Busy => None,
                held => {
                    let checked = journal_check::before_open(dir)?;
                    drop(held);
                    Some(checked)
                }
            };
            let opened = checked.ok_or(fjall::Error::Locked).and_then(|checked| {
                Database::builder(dir)
                    .cache_size(opts.cache_bytes)
                    .max_journaling_size(opts.max_journal_bytes)
                    .worker_threads(opts.engine_threads.max(1))
                    .open()
                    .map(|db| (db, checked))
            });
            match opened {
                Ok(opened) => break opened,
                Err(fjall::Error::Locked) if Instant::now() < locked_until => {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                // The lock file is held: say by whom and what to do, not the library's name.
                Err(fjall::Error::Locked) => {
                    return Err(StoreError::Engine(format!(
                        "another likewise process holds {}: stop it, or give this one another data directory",
                        dir.display()
                    )));
                }
                Err(e) => return Err(engine_err(e)),
            }
        };
        journal_check::check_recovered(dir, &db, &checked)?;
        drop_retired_keyspaces(&db)?;
        let big = opts.memtable_bytes.max(1 << 20);
        let small = (big / 8).max(1 << 20);
        let limit = std::cell::Cell::new(0u64);
        let all = std::cell::RefCell::new(Vec::new());
        // Every level's data blocks are LZ4-compressed: fjall leaves levels 0 and 1 plain,
        // and a store of a few million likes lives in those levels whole, so it kept each
        // like's fixed-width IDs and timestamps, mostly zero bytes, as written; compressed,
        // its tables take half the bytes (docs/capacity.md, "Embedded store"). The block
        // cache holds blocks decompressed, so a cached read pays nothing; a block read from
        // disk costs a microsecond or two more.
        // The Bloom filters of point-read keyspaces take 10 bits a key on every level (1%
        // false positives): fjall's default gives level 0 a 0.01% rate, about 19 bits, 2.4 B
        // of every like in `user_likes` while its tables wait there for compaction. Most of
        // its point reads never reach a filter: the like filter in memory answers them first.
        // Keyspaces that are only ever scanned, never point-read, build no Bloom filters: they
        // would cost CPU at every flush and compaction and pinned memory, and answer nothing
        // (range reads never consult them). Their blocks are 16 KiB with a restart every 32
        // keys, which compress and prefix-share better; a scan reads on through them anyway.
        // fjall keeps a keyspace's options from its creation: keyspaces created by earlier
        // versions keep theirs, and read as before.
        let ks_with = |name: &str, memtable: u64, point_reads: bool| {
            use fjall::config::{BlockSizePolicy, BloomConstructionPolicy, CompressionPolicy};
            use fjall::config::{FilterPolicy, FilterPolicyEntry, RestartIntervalPolicy};
            limit.set(limit.get() + memtable);
            let mut create = KeyspaceCreateOptions::default()
                .max_memtable_size(memtable)
                .data_block_compression_policy(CompressionPolicy::all(fjall::CompressionType::Lz4));
            if point_reads {
                create = create.filter_policy(FilterPolicy::all(FilterPolicyEntry::Bloom(
                    BloomConstructionPolicy::BitsPerKey(FILTER_BITS_PER_KEY),
                )));
            } else {
                create = create
                    .filter_policy(FilterPolicy::disabled())
                    .data_block_size_policy(BlockSizePolicy::all(SCAN_BLOCK_BYTES))
                    .data_block_restart_interval_policy(RestartIntervalPolicy::all(SCAN_RESTART_INTERVAL));
            }
            let k = db.keyspace(name, || create).map_err(engine_err)?;
            all.borrow_mut().push(k.clone());
            Ok::<_, StoreError>(k)
        };
        let ks = |name: &str, memtable: u64| ks_with(name, memtable, true);
        let user_likes = ks("user_likes", big)?;
        let inner = Inner {
            like_filter: like_filter::LikeFilter::sized_for(user_likes.approximate_len() as u64),
            user_likes,
            likers: ks_with("liker_pages", big, false)?,
            events: ks_with("events", big, false)?,
            counters: ks("counters", small)?,
            offsets: ks("offsets", small)?,
            posts: ks("posts", small)?,
            users: ks("users", small)?,
            follows: ks("follows", small)?,
            followers: ks("followers", small)?,
            settings: ks("settings", small)?,
            comments: ks("comments", big)?,
            top_comments: ks("top_comments", small)?,
            replies: ks("replies", small)?,
            comment_posts: ks("comment_posts", small)?,
            held_replies: ks_with("held_replies", small, false)?,
            views: ks("views", small)?,
            hourly_views: ks("hourly_views", small)?,
            hourly_lock: Mutex::new(()),
            notif_items: ks("notif_items", small)?,
            notif_keys: ks("notif_keys", small)?,
            notif_actors: ks_with("notif_actors", big, false)?,
            notif_time: ks_with("notif_time", small, false)?,
            notif_age: ks_with("notif_age", small, false)?,
            notif_lock: Mutex::new(()),
            blocks: ks("blocks", small)?,
            restricts: ks("restricts", small)?,
            hidden_words: ks("hidden_words", small)?,
            pins: ks("pins", small)?,
            reports: ks("reports", small)?,
            report_counts: ks("report_counts", small)?,
            mod_queue: ks("mod_queue", small)?,
            holds: ks("holds", small)?,
            appeals: ks("appeals", small)?,
            fingerprints: ks("fingerprints", small)?,
            snapshots: ks("snapshots", small)?,
            snapshot_lock: Mutex::new(()),
            integrity_decisions: ks("integrity_decisions", small)?,
            integrity_times: ks_with("integrity_times", small, false)?,
            integrity_lock: Mutex::new(()),
            rank_order: ks_with("rank_order", small, false)?,
            rank_held: ks_with("rank_held", small, false)?,
            rank_held_by: ks_with("rank_held_by", small, false)?,
            rank_of: ks("rank_of", small)?,
            rank_versions: ks("rank_versions", small)?,
            rank_history: ks_with("rank_history", small, false)?,
            rank_history_times: ks_with("rank_history_times", small, false)?,
            rank_lock: Mutex::new(()),
            comment_keys: ks("comment_keys", small)?,
            comment_key_times: ks_with("comment_key_times", small, false)?,
            key_count: AtomicU64::new(0),
            id_gen: Mutex::new(likewise_core::comment::id::CommentIdGen::new(None)),
            next_seq: AtomicU64::new(0),
            durable_seq: AtomicU64::new(0),
            last_batch: AtomicU64::new(0),
            write_lock: Mutex::new(()),
            tail: Mutex::new(tail::EventTail::new(EVENT_TAIL_EVENTS)),
            report_lock: Mutex::new(()),
            pin_lock: Mutex::new(()),
            write_buffer_limit: limit.get().min(opts.write_buffer_bytes.max(1 << 20)),
            all: all.take(),
            journal_sync: journal_sync::JournalSync::new(dir),
            progress: journal_check::record_open(dir, &db, checked)?,
            space: space::SpaceGuard::new(dir, opts.min_free_bytes),
            db,
        };
        // fjall makes each new keyspace's own folder durable, not its entry in `keyspaces/`: a
        // power cut after the first start lost every keyspace, and recovery then dropped the
        // acknowledged writes in the journal with them (found by the power-cut tests).
        crate::durable_dir::sync(&dir.join("keyspaces")).map_err(engine_err)?;
        // Stores written before likers pages hold one likers row per like: convert them.
        liker_pages::convert_old_rows(&inner.db, &inner.likers)?;
        // Stores written before the by-author index of unlisted rank entries: build it.
        ranks::index_held_by_author(&inner)?;
        // Stores written before the by-author index of held replies: build it.
        comments::index_held_replies(&inner)?;
        // Stores written before the retention of notification items: index their ages.
        notifications::index_item_ages(&inner)?;
        let head = counters::last_seq(&inner.events)?;
        *inner.id_gen.lock() =
            likewise_core::comment::id::CommentIdGen::new(comments::highest_id(&inner.comment_posts)?);
        inner.next_seq.store(head + 1, std::sync::atomic::Ordering::SeqCst);
        // What recovery found is what the disk holds.
        inner.durable_seq.store(head, std::sync::atomic::Ordering::SeqCst);
        inner
            .key_count
            .store(idempotency::count_keys(&inner.comment_key_times)?, std::sync::atomic::Ordering::SeqCst);
        let inner = Arc::new(inner);
        spawn_write_buffer_governor(Arc::downgrade(&inner));
        like_filter_build::spawn_build(Arc::downgrade(&inner));
        let secs = started.elapsed().as_secs_f64();
        metrics::gauge!("likewise_store_open_seconds").set(secs);
        tracing::info!(dir = %dir.display(), open_seconds = secs, event_head = head, "embedded store opened");
        Ok(EmbeddedStore { inner })
    }
}

#[cfg(test)]
mod durability_tests {
    use super::*;
    use likewise_core::ids::UserId;
    use likewise_core::like::{LikeAction, LikeOp, Target};
    use likewise_core::ports::{EventLog, WriteEngine};
    use likewise_core::write::WriteOp;

    /// A committed batch is readable before its fsync, but the durable head moves only with
    /// the sync that covers it; after a reopen, everything found on disk is durable.
    #[tokio::test]
    async fn the_durable_head_trails_visible_events_until_their_sync() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = EmbeddedStore::open(dir.path(), &EmbeddedOptions::default()).expect("open");
        let like = |user| {
            WriteOp::Like(LikeOp {
                target: Target::post(1),
                user: UserId(user),
                action: LikeAction::Like,
                target_author: UserId(7),
                ts_ms: 1,
                post: 1,
                trace: None,
            })
        };
        store.apply(&[like(1), like(2)]).expect("apply");
        store.sync().expect("sync");
        assert_eq!((store.head().await.expect("head"), store.durable_head().await.expect("d")), (2, Some(2)));
        store.apply(&[like(3)]).expect("apply");
        assert_eq!(store.read_after(2, 10).await.expect("read").len(), 1, "visible at once");
        assert_eq!(store.durable_head().await.expect("durable"), Some(2), "not on disk yet");
        store.sync().expect("sync");
        assert_eq!(store.durable_head().await.expect("durable"), Some(3));
        drop(store);
        let store = EmbeddedStore::open(dir.path(), &EmbeddedOptions::default()).expect("reopen");
        assert_eq!(store.durable_head().await.expect("durable"), Some(3));
    }
}

#[cfg(test)]
mod memory_tests {
    use super::*;

    #[test]
    fn the_governor_keeps_active_memtables_within_their_budget() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts =
            EmbeddedOptions { memtable_bytes: 64 << 20, write_buffer_bytes: 2 << 20, ..Default::default() };
        let store = EmbeddedStore::open(dir.path(), &opts).expect("open");
        let inner = &store.inner;
        assert_eq!(store.memory().write_buffer_limit_bytes, 2 << 20);
        let active = || inner.all.iter().map(|k| k.tree.active_memtable().size()).sum::<u64>();
        // 16 MiB into two keyspaces whose own caps (64 MiB) would never seal them.
        let value = [7u8; 200];
        for round in 0..40u64 {
            let mut batch = inner.db.batch();
            for i in 0..1000u64 {
                let key = (round * 1000 + i).to_be_bytes();
                batch.insert(&inner.likers, key, value);
                batch.insert(&inner.events, key, value);
            }
            batch.commit().expect("commit");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while active() > 2 << 20 && Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(active() <= 2 << 20, "active memtables hold {} bytes", active());
        // Sealed memtables were flushed to tables, and nothing was lost.
        assert!(inner.likers.tree.table_count() + inner.events.tree.table_count() >= 2);
        assert_eq!(inner.likers.approximate_len(), 40_000);
        assert_eq!(inner.events.get(39_999u64.to_be_bytes()).expect("get").as_deref(), Some(&value[..]));
    }

    #[test]
    fn scan_only_keyspaces_build_no_filters_and_point_read_ones_do() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = EmbeddedStore::open(dir.path(), &EmbeddedOptions::default()).expect("open");
        let inner = &store.inner;
        let mut batch = inner.db.batch();
        for i in 0..10_000u64 {
            for k in [&inner.likers, &inner.events, &inner.user_likes] {
                batch.insert(k, i.to_be_bytes(), [1u8; 8]);
            }
        }
        batch.commit().expect("commit");
        for k in [&inner.likers, &inner.events, &inner.user_likes] {
            k.rotate_memtable_and_wait().expect("flush");
            assert_eq!(k.tree.table_count(), 1);
        }
        assert_eq!(inner.likers.tree.pinned_filter_size(), 0);
        assert_eq!(inner.events.tree.pinned_filter_size(), 0);
        let filter = inner.user_likes.tree.pinned_filter_size();
        assert!(filter > 0, "the existence reads keep their filter");
        // 10 bits a key on level 0 too, not fjall's 0.01% false positives (19 bits).
        assert!(filter <= 10_000 * 12 / 8, "{filter} filter bytes for 10,000 keys");
    }

    #[test]
    fn opening_removes_the_retired_likes_keyspace_and_keeps_the_rest() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let db = Database::builder(dir.path()).open().expect("db");
            let old = db.keyspace("likes", KeyspaceCreateOptions::default).expect("likes");
            let kept = db.keyspace("user_likes", KeyspaceCreateOptions::default).expect("user_likes");
            old.insert([1u8; 17], [7u8; 9]).expect("insert");
            kept.insert([2u8; 17], crate::keys::num_value(5)).expect("insert");
            db.persist(fjall::PersistMode::SyncAll).expect("persist");
        }
        let store = EmbeddedStore::open(dir.path(), &EmbeddedOptions::default()).expect("open");
        assert!(!store.inner.db.keyspace_exists("likes"));
        assert!(store.inner.user_likes.contains_key([2u8; 17]).expect("get"), "other keyspaces are kept");
    }
}
