//! Free disk space, checked before every write batch.
//!
//! fjall treats a failed journal write as fatal: the first write that meets a full disk
//! poisons the database, and from then on it refuses every write until the process is
//! restarted, even after space returns. So the write path stops short of the disk's end:
//! while the file system holding the store has less than [`EmbeddedOptions::min_free_bytes`]
//! free, each group-commit batch is refused before anything of it is written, with
//! [`StoreError::Refused`] (a 503 with `Retry-After`), and `/healthz` reports the storage
//! down. Reads go on. The reserve is what fjall still needs meanwhile: the consumers'
//! writes for events already stored, memtable flushes and compactions. Once space is back
//! above the reserve, the next batch is taken; nothing needs reopening.
//!
//! [`EmbeddedOptions::min_free_bytes`]: super::EmbeddedOptions::min_free_bytes

use likewise_core::{StoreError, StoreResult};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// `Retry-After` of a write refused for want of space: time for an operator or a cleanup
/// job to act, short enough that the service resumes soon after.
pub(super) const RETRY_AFTER_SECS: u64 = 5;

/// See the module docs.
pub(super) struct SpaceGuard {
    dir: PathBuf,
    min_free: u64,
    /// Whether the last check found too little space: each change is logged once.
    short: AtomicBool,
}

impl SpaceGuard {
    pub(super) fn new(dir: &Path, min_free: u64) -> Self {
        SpaceGuard { dir: dir.to_path_buf(), min_free, short: AtomicBool::new(false) }
    }

    /// Ok when a write batch may go ahead: the store's file system has at least the reserve
    /// free (or its free space cannot be read, which is left to the write itself to find).
    pub(super) fn check(&self) -> StoreResult<()> {
        if self.min_free == 0 {
            return Ok(());
        }
        let Some(free) = free_bytes(&self.dir) else { return Ok(()) };
        metrics::gauge!("likewise_store_disk_free_bytes").set(free as f64);
        let short = free < self.min_free;
        if self.short.swap(short, Ordering::AcqRel) != short {
            let (free_mib, reserve_mib) = (free >> 20, self.min_free >> 20);
            if short {
                tracing::error!(
                    dir = %self.dir.display(), free_mib, reserve_mib,
                    "the disk is nearly full: writes are refused (503) until space is freed \
                     (store.min_free_mb); reads go on"
                );
            } else {
                tracing::warn!(dir = %self.dir.display(), free_mib, reserve_mib, "disk space is back: writes are taken again");
            }
        }
        if short {
            return Err(StoreError::Refused {
                reason: "the disk is full".into(),
                retry_after_secs: RETRY_AFTER_SECS,
            });
        }
        Ok(())
    }
}

/// Bytes an unprivileged writer may still use on the file system holding `dir`.
pub(super) fn free_bytes(dir: &Path) -> Option<u64> {
    let s = rustix::fs::statvfs(dir).ok()?;
    Some(s.f_bavail.saturating_mul(s.f_frsize))
}

/// A write's error from fjall, classified: a full disk, or a database fjall stopped after
/// an earlier I/O error (it checks that before writing anything), refused the batch before
/// any of it could be read back: a 503, not a 500.
pub(super) fn commit_err(e: fjall::Error) -> StoreError {
    match &e {
        fjall::Error::Io(io) if io.kind() == std::io::ErrorKind::StorageFull => {
            StoreError::Refused { reason: "the disk is full".into(), retry_after_secs: RETRY_AFTER_SECS }
        }
        fjall::Error::Poisoned => StoreError::Refused {
            reason: "the store stopped after an I/O error; restart the service".into(),
            retry_after_secs: 30,
        },
        _ => super::error::engine_err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserve_above_the_free_space_refuses_and_none_takes_everything() {
        let dir = tempfile::tempdir().expect("tempdir");
        let free = free_bytes(dir.path()).expect("statvfs");
        let refused = SpaceGuard::new(dir.path(), free.saturating_mul(2).max(1 << 40)).check();
        assert!(matches!(refused, Err(StoreError::Refused { retry_after_secs: RETRY_AFTER_SECS, .. })));
        assert!(SpaceGuard::new(dir.path(), 0).check().is_ok());
        assert!(SpaceGuard::new(dir.path(), 1).check().is_ok());
    }
}
