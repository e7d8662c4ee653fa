//! Opens the embedded engine and bundles its ports into [`Stores`].

use crate::embedded::{EmbeddedOptions, EmbeddedStore};
use likewise_core::{StoreError, StoreResult};
use likewise_engine::Stores;
use likewise_engine::group_commit::GroupCommitOptions;
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
    let identity = crate::identity::ensure(&cfg.data_dir).map_err(|e| io("cannot name", e))?;
    let mut stores = from_embedded(store, cfg.group_commit.clone());
    stores.identity = Some(identity);
    Ok(stores)
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
