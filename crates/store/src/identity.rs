//! The store's identity: a random name kept in `store.id` beside the store, readable while a
//! running node holds the store's lock. A command that finds a node at an address (say,
//! `server.listen`) compares the node's identity with its own data directory's, so it never
//! takes another store's answer for its own.
//!
//! A copied data directory (`cp -a`, a restored backup) copies `store.id` too, so the
//! identity also names where the store lies: the device and inode of its `store` folder.
//! A copy running beside its original is a different folder, so a different identity.

use std::hash::{BuildHasher, Hasher};
use std::io;
use std::path::Path;

/// The file, in the data directory beside `store`.
const FILE: &str = "store.id";

/// The identity of the store in `data_dir`, if it was ever opened by a build that names it;
/// an error when `store.id` is damaged.
pub fn read(data_dir: &Path) -> io::Result<Option<String>> {
    let Some(id) = read_name(data_dir)? else { return Ok(None) };
    with_place(data_dir, &id).map(Some)
}

/// The random name in `store.id`.
fn read_name(data_dir: &Path) -> io::Result<Option<String>> {
    match std::fs::read_to_string(data_dir.join(FILE)) {
        Ok(s) if is_identity(s.trim()) => Ok(Some(s.trim().to_string())),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is damaged (not 32 hex digits)", data_dir.join(FILE).display()),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// `id` and where the store lies: the device and inode of its `store` folder.
fn with_place(data_dir: &Path, id: &str) -> io::Result<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(data_dir.join("store"))?;
    Ok(format!("{id}-{:x}-{:x}", m.dev(), m.ino()))
}

/// The identity of the store in `data_dir`, its name made (durably) when it has none or a
/// damaged one.
pub fn ensure(data_dir: &Path) -> io::Result<String> {
    match read_name(data_dir) {
        Ok(Some(id)) => return with_place(data_dir, &id),
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, "the store's identity is replaced"),
    }
    let id = fresh();
    let tmp = data_dir.join(format!("{FILE}.tmp"));
    {
        let mut f = std::fs::File::create(&tmp)?;
        io::Write::write_all(&mut f, format!("{id}\n").as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, data_dir.join(FILE))?;
    crate::durable_dir::sync(data_dir)?;
    with_place(data_dir, &id)
}

/// 128 random bits as 32 hex digits (the standard library's per-process random hash keys,
/// mixed with the time and the process id: unique, not secret).
fn fresh() -> String {
    let word = |salt: u64| {
        let mut h = std::hash::RandomState::new().build_hasher();
        h.write_u64(salt);
        h.write_u128(
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()),
        );
        h.write_u32(std::process::id());
        h.finish()
    };
    format!("{:016x}{:016x}", word(1), word(2))
}

fn is_identity(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A data directory with an (empty) store folder.
    fn data_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("test I/O");
        std::fs::create_dir(dir.path().join("store")).expect("test I/O");
        dir
    }

    #[test]
    fn an_identity_is_made_once_and_read_back() {
        let dir = data_dir();
        assert_eq!(read(dir.path()).expect("read"), None);
        let id = ensure(dir.path()).expect("ensure");
        assert_eq!(ensure(dir.path()).expect("again"), id);
        assert_eq!(read(dir.path()).expect("read"), Some(id.clone()));
        let other = data_dir();
        assert_ne!(ensure(other.path()).expect("ensure"), id, "two stores, two identities");
    }

    #[test]
    fn a_copied_data_directory_is_another_store() {
        let dir = data_dir();
        let id = ensure(dir.path()).expect("ensure");
        let copy = data_dir();
        std::fs::copy(dir.path().join(FILE), copy.path().join(FILE)).expect("test I/O");
        let copied = read(copy.path()).expect("read").expect("named");
        assert_eq!(copied[..32], id[..32], "the name was copied");
        assert_ne!(copied, id, "a copy beside its original has another identity");
    }

    #[test]
    fn a_damaged_identity_is_an_error_to_read_and_replaced_on_open() {
        let dir = data_dir();
        std::fs::write(dir.path().join(FILE), b"junk").expect("test I/O");
        assert!(read(dir.path()).is_err());
        let id = ensure(dir.path()).expect("ensure");
        assert!(is_identity(&id[..32]), "{id}");
        assert_eq!(read(dir.path()).expect("read"), Some(id));
    }
}
