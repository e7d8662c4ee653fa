//! The token signing secret: `auth.secret` when set, otherwise a random secret kept in the
//! data directory (created on first use, readable by the owner only), so `serve` and
//! `likewise token --data-dir DIR` agree without configuration. It also keys cursors, so
//! `serve` loads it even when tokens come from an identity provider alone (`tokens.rs`).

use anyhow::Context;
use rand::RngCore;
use std::path::Path;

/// File name of the generated secret inside the data directory.
pub const SECRET_FILE: &str = "auth.secret";

/// The configured secret, or the data directory's (created if `create`).
pub fn load_or_create(configured: Option<&str>, data_dir: &Path, create: bool) -> anyhow::Result<Vec<u8>> {
    if let Some(s) = configured {
        return Ok(s.as_bytes().to_vec());
    }
    let path = data_dir.join(SECRET_FILE);
    if path.exists() {
        let s = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let s = s.trim();
        anyhow::ensure!(s.len() >= 32, "{} is too short to be a secret", path.display());
        return Ok(s.as_bytes().to_vec());
    }
    anyhow::ensure!(
        create,
        "no auth.secret configured and no {} yet: start `likewise serve` with this data directory first, or set LIKEWISE__AUTH__SECRET",
        path.display()
    );
    likewise_store::durable_dir::create_all(data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    write_private(&path, &hex)?;
    // The file's entry survives a power cut only once its directory is fsynced.
    likewise_store::durable_dir::sync(data_dir).with_context(|| format!("syncing {}", data_dir.display()))?;
    Ok(hex.into_bytes())
}

#[cfg(unix)]
fn write_private(path: &Path, contents: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(contents.as_bytes())?;
    f.sync_all()?;
    Ok(())
}

#[cfg(not(unix))]
fn write_private(path: &Path, contents: &str) -> anyhow::Result<()> {
    std::fs::write(path, contents).with_context(|| format!("creating {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_secret_is_reused() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(load_or_create(None, dir.path(), false).is_err());
        let a = load_or_create(None, dir.path(), true).expect("create");
        let b = load_or_create(None, dir.path(), false).expect("reuse");
        assert_eq!(a, b);
        assert_eq!(
            load_or_create(Some("configured-secret-xx"), dir.path(), false).expect("cfg"),
            b"configured-secret-xx"
        );
    }
}
