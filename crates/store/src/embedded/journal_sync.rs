//! The group commit's fsync, without holding fjall's journal lock.
//!
//! fjall's `Database::persist` fsyncs the journal while holding the journal's lock, and every
//! batch commit takes that lock too. So while one batch was being fsynced (0.3-1.5 ms here)
//! the writer thread could not commit the next one, and the fsync stood on the write path's
//! critical path. This syncs the same bytes through a file descriptor of our own:
//!
//! 1. `persist(Buffer)`, under the lock: the journal's user-space buffer goes to the kernel
//!    (one `write`, microseconds). Every batch committed before this call is now in the page
//!    cache of the journal file it was written to.
//! 2. Find the newest journal file (`<store>/<id>.jnl`, the highest id is the active one) and
//!    `fsync` it through our own descriptor, with no fjall lock held; commits proceed.
//!
//! Why that covers every batch committed before step 1: such a batch sits either in the
//! journal found in step 2, which is fsynced, or in an older one. fjall seals a journal only
//! by rotating it, and rotation fsyncs the old journal (`SyncAll`) before it opens the next,
//! so an older journal is already durable. An fsync error is final, as fjall makes it for
//! its own: later syncs fail too, so nothing is acknowledged after a write the kernel may
//! have dropped.
//!
//! This depends on fjall's journal layout (file names, rotation fsync), checked by the tests
//! below against the fjall version in `Cargo.lock`. If no journal file is found, it falls
//! back to fjall's own locked fsync.

use super::error::engine_err;
use fjall::{Database, PersistMode};
use likewise_core::{StoreError, StoreResult};
use parking_lot::Mutex;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// See the module docs.
pub(super) struct JournalSync {
    pub(super) dir: PathBuf,
    /// The journal file last synced, by id, kept open between syncs.
    open: Mutex<Option<(u64, File)>>,
    /// Set by the first failed fsync; every later sync fails.
    failed: AtomicBool,
}

impl JournalSync {
    pub(super) fn new(dir: &Path) -> Self {
        JournalSync { dir: dir.to_path_buf(), open: Mutex::new(None), failed: AtomicBool::new(false) }
    }

    /// Make every batch committed before this call durable; the id of the journal file it
    /// fsynced (None: fjall's own fsync did). A failure leaves their outcome unknown
    /// ([`StoreError::OutcomeUnknown`]): their bytes may have reached the journal before the
    /// error, and a later start would then replay them.
    pub(super) fn sync(&self, db: &Database) -> StoreResult<Option<u64>> {
        self.sync_journal(db).map_err(|e| match e {
            StoreError::Backend { engine, source } => StoreError::OutcomeUnknown { engine, source },
            StoreError::Engine(m) => StoreError::OutcomeUnknown { engine: "fjall", source: m.into() },
            e => e,
        })
    }

    fn sync_journal(&self, db: &Database) -> StoreResult<Option<u64>> {
        if self.failed.load(Ordering::Acquire) {
            return Err(StoreError::Engine("an earlier fsync of the journal failed".into()));
        }
        db.persist(PersistMode::Buffer).map_err(engine_err)?;
        let Some(id) = newest_journal(&self.dir)? else {
            return db.persist(PersistMode::SyncAll).map(|()| None).map_err(engine_err);
        };
        let mut open = self.open.lock();
        let f = match &mut *open {
            Some((i, f)) if *i == id => f,
            slot => {
                let f = File::options().write(true).open(journal_path(&self.dir, id)).map_err(engine_err)?;
                &mut slot.insert((id, f)).1
            }
        };
        f.sync_all().map(|()| Some(id)).map_err(|e| {
            self.failed.store(true, Ordering::Release);
            tracing::error!(error = %e, "fsync of the journal failed; the store accepts no more writes");
            engine_err(e)
        })
    }
}

fn journal_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id}.jnl"))
}

/// The id of the newest journal file in the store's directory.
fn newest_journal(dir: &Path) -> StoreResult<Option<u64>> {
    let mut newest = None;
    for entry in std::fs::read_dir(dir).map_err(engine_err)? {
        let name = entry.map_err(engine_err)?.file_name();
        if let Some(id) =
            name.to_str().and_then(|n| n.strip_suffix(".jnl")).and_then(|n| n.parse::<u64>().ok())
        {
            newest = newest.max(Some(id));
        }
    }
    Ok(newest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjall::KeyspaceCreateOptions;
    use std::time::{Duration, Instant};

    /// Bytes the journal cannot compress.
    fn noise(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// Whether the journal file `sync` last fsynced holds `bytes` (fjall preallocates its
    /// journals, so their length says nothing).
    fn synced_journal_holds(sync: &JournalSync, bytes: &[u8]) -> bool {
        let id = sync.open.lock().as_ref().map(|(i, _)| *i).expect("a journal was synced");
        let data = std::fs::read(journal_path(&sync.dir, id)).expect("test I/O");
        data.windows(bytes.len()).any(|w| w == bytes)
    }

    /// A commit as the write path makes them: no durability of its own.
    fn commit(db: &Database, ks: &fjall::Keyspace, key: &str, value: &[u8]) {
        let mut b = fjall::OwnedWriteBatch::with_capacity(db.clone(), 1).durability(None);
        b.insert(ks, key, value);
        b.commit().expect("test I/O");
    }

    fn open_store() -> (tempfile::TempDir, Database, fjall::Keyspace, JournalSync) {
        let dir = tempfile::tempdir().expect("test I/O");
        let db = Database::builder(dir.path()).open().expect("test I/O");
        let ks = db.keyspace("k", KeyspaceCreateOptions::default).expect("test I/O");
        let sync = JournalSync::new(dir.path());
        (dir, db, ks, sync)
    }

    #[test]
    fn syncs_the_journal_fjall_writes_to() {
        let (dir, db, ks, sync) = open_store();
        let value = noise(4096, 1);
        commit(&db, &ks, "a", &value);
        sync.sync(&db).expect("test I/O");
        // The commit's bytes left fjall's buffer for the file this fsyncs.
        assert_eq!(sync.open.lock().as_ref().map(|(i, _)| *i), newest_journal(dir.path()).expect("test I/O"));
        assert!(synced_journal_holds(&sync, &value[..256]));
    }

    #[test]
    fn follows_the_journal_across_rotations() {
        let (dir, db, ks, sync) = open_store();
        ks.insert("a", "1").expect("test I/O");
        sync.sync(&db).expect("test I/O");
        let first = newest_journal(dir.path()).expect("test I/O").expect("test I/O");
        // fjall starts a new journal at a flush once the active one passes 64 MB.
        // (One incompressible megabyte, reused: fjall compresses each entry on its own.)
        let big = noise(1 << 20, 2);
        for i in 0..70u64 {
            ks.insert(i.to_be_bytes(), &big).expect("test I/O");
        }
        ks.rotate_memtable().expect("test I/O");
        let until = Instant::now() + Duration::from_secs(30);
        while newest_journal(dir.path()).expect("test I/O") == Some(first) {
            assert!(Instant::now() < until, "fjall did not rotate its journal");
            std::thread::sleep(Duration::from_millis(20));
        }
        let value = noise(4096, 99);
        commit(&db, &ks, "b", &value);
        sync.sync(&db).expect("test I/O");
        let second = newest_journal(dir.path()).expect("test I/O").expect("test I/O");
        assert!(second > first);
        assert_eq!(sync.open.lock().as_ref().map(|(i, _)| *i), Some(second), "syncs the new journal");
        assert!(synced_journal_holds(&sync, &value[..256]));
        drop((ks, db));
        let db = Database::builder(dir.path()).open().expect("test I/O");
        let ks = db.keyspace("k", KeyspaceCreateOptions::default).expect("test I/O");
        assert!(ks.get("a").expect("test I/O").is_some() && ks.get("b").expect("test I/O").is_some());
    }
}
