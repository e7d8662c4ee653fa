//! The store's identity: a random name kept in `store.id` beside the store, readable while a
//! running node holds the store's lock. A command that finds a node at an address (say,
//! `server.listen`) compares the node's identity with its own data directory's, so it never
//! takes another store's answer for its own.

use std::hash::{BuildHasher, Hasher};
use std::io;
use std::path::Path;

/// The file, in the data directory beside `store`.
const FILE: &str = "store.id";

/// The identity of the store in `data_dir`, if it was ever opened by a build that names it.
pub fn read(data_dir: &Path) -> io::Result<Option<String>> {
    match std::fs::read_to_string(data_dir.join(FILE)) {
        Ok(s) if is_identity(s.trim()) => Ok(Some(s.trim().to_string())),
        Ok(_) => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The identity of the store in `data_dir`, made (durably) when it has none or a damaged one.
pub fn ensure(data_dir: &Path) -> io::Result<String> {
    if let Some(id) = read(data_dir)? {
        return Ok(id);
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
    Ok(id)
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

    #[test]
    fn an_identity_is_made_once_and_read_back() {
        let dir = tempfile::tempdir().expect("test I/O");
        assert_eq!(read(dir.path()).expect("read"), None);
        let id = ensure(dir.path()).expect("ensure");
        assert!(is_identity(&id), "{id}");
        assert_eq!(ensure(dir.path()).expect("again"), id);
        assert_eq!(read(dir.path()).expect("read"), Some(id.clone()));
        let other = tempfile::tempdir().expect("test I/O");
        assert_ne!(ensure(other.path()).expect("ensure"), id, "two stores, two identities");
    }

    #[test]
    fn a_damaged_identity_is_replaced() {
        let dir = tempfile::tempdir().expect("test I/O");
        std::fs::write(dir.path().join(FILE), b"").expect("test I/O");
        assert_eq!(read(dir.path()).expect("read"), None);
        assert!(is_identity(&ensure(dir.path()).expect("ensure")));
    }
}
