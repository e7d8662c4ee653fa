//! What other crates' tests need from the embedded engine: a store opened with small caches
//! in a scratch directory (feature `testing`).

use crate::embedded::{EmbeddedOptions, EmbeddedStore};
use likewise_engine::Stores;
use likewise_engine::group_commit::GroupCommitOptions;
use std::path::Path;

/// Engine options sized for tests: small caches and memtables, so many stores fit at once.
pub fn small_options() -> EmbeddedOptions {
    EmbeddedOptions {
        cache_bytes: 8 << 20,
        memtable_bytes: 2 << 20,
        max_journal_bytes: 64 << 20,
        ..Default::default()
    }
}

/// Every port of an embedded store in `dir`, opened with [`small_options`], behind a group
/// committer with default options. Panics when the store cannot be opened (tests only).
pub fn open_small(dir: &Path) -> Stores {
    #[allow(clippy::expect_used)]
    let store = EmbeddedStore::open(dir, &small_options()).expect("open the embedded store");
    crate::open::from_embedded(store, GroupCommitOptions::default())
}

/// A fresh data directory, in memory where there is a tmpfs: tests about what readers see,
/// not durability, would otherwise spend their time in fsync.
pub fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(d) = tempfile::tempdir_in(shm)
    {
        return d;
    }
    #[allow(clippy::expect_used)]
    tempfile::tempdir().expect("a temporary directory")
}
