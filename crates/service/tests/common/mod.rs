//! Helpers shared by the service's integration tests.

/// A fresh data directory, in memory where there is a tmpfs: these tests are about what
/// readers see, not durability, and every write's fsync would otherwise dominate their run.
pub fn scratch_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(d) = tempfile::tempdir_in(shm)
    {
        return d;
    }
    tempfile::tempdir().expect("tempdir")
}
