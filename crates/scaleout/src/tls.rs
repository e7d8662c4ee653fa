//! What TLS to every engine shares: one rustls crypto provider for the whole process and CA
//! files read with clear errors. PostgreSQL (`postgres::tls`), Redis (`shared_cache`) and NATS
//! (`stream`) all use rustls with ring, and none links OpenSSL.
//!
//! The redis and async-nats crates build their TLS configuration on the process's default
//! provider; rustls panics when it cannot tell which one that is (two providers compiled in,
//! none installed). [`install_provider`] installs ring before any engine connects, so the
//! choice never depends on which crate features the build happens to unify.
//!
//! `testing` (feature `testing`) makes certificates and starts TLS servers for tests.

#[cfg(any(test, feature = "testing"))]
pub mod testing;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use std::path::Path;
use std::sync::Arc;

/// The crypto provider of every TLS connection to the engines: ring.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Install ring as the process's default provider unless one is installed already (an
/// embedding program may have chosen its own; it is kept).
pub fn install_provider() {
    if CryptoProvider::get_default().is_none() {
        // Another thread may win the race; then its provider (also ring) stays.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The certificates of the PEM file `path`, named `key` in errors (the setting it came from).
/// A file that cannot be read or holds no certificate is an error.
pub fn ca_file(key: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let shown = path.display();
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{key} {shown}: {e}"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{key} {shown}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{key} {shown}: no certificate in the file"));
    }
    Ok(certs)
}

/// The rustls error somewhere in `e`'s chain of causes (also inside an `io::Error`, where
/// TLS handshake failures usually travel), so a refused certificate can be told from an
/// unreachable server.
pub fn tls_cause<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(t) = err.downcast_ref::<rustls::Error>() {
            return Some(t);
        }
        if let Some(t) = err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(t);
        }
        next = err.source();
    }
    None
}
