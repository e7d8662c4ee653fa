//! Directories that survive a power cut.
//!
//! A new directory, or a new file in one, is durable only once the directory that holds its
//! entry is fsynced. fjall fsyncs the directories inside its own folder, never the folder's
//! parent: a data directory created by the first start, with every write acknowledged in it,
//! vanished whole at a power cut (found by `crates/cli/tests/powercut.rs`).

use std::fs::File;
use std::io;
use std::path::Path;

/// Create `dir` and its missing ancestors, and fsync every directory from the nearest
/// existing ancestor down to `dir`, so each new entry survives a power cut. The parent of
/// `dir` is fsynced even when nothing was missing: an earlier start may have created `dir`
/// and lost power before it was made durable.
pub fn create_all(dir: &Path) -> io::Result<()> {
    // The nearest existing ancestor of `dir`'s parent: the last entry that needs an fsync.
    let mut top = parent(dir);
    while !top.is_dir() && top != parent(top) {
        top = parent(top);
    }
    std::fs::create_dir_all(dir)?;
    let mut d = dir;
    loop {
        sync(d)?;
        if d == top || d == parent(d) {
            return Ok(());
        }
        d = parent(d);
    }
}

/// The parent of `p` (`.` for a relative name with none; the root for the root).
fn parent(p: &Path) -> &Path {
    match p.parent() {
        Some(q) if q.as_os_str().is_empty() => Path::new("."),
        Some(q) => q,
        None => p,
    }
}

/// fsync directory `dir`: the entries created, renamed or removed in it survive a power cut.
pub fn sync(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_missing_ancestors_and_accepts_existing_ones() {
        let root = tempfile::tempdir().expect("test I/O");
        let dir = root.path().join("a/b/c");
        create_all(&dir).expect("create");
        assert!(dir.is_dir());
        create_all(&dir).expect("again");
        create_all(root.path()).expect("an existing directory");
    }
}
