//! TLS to PostgreSQL with rustls (no OpenSSL build dependency): libpq's `sslmode` and
//! `sslrootcert` connection parameters, in URLs (`?sslmode=verify-full&sslrootcert=/ca.pem`)
//! and in key/value strings.
//!
//! tokio-postgres knows `sslmode=disable|prefer|require` and rejects `sslrootcert`, so both are
//! taken out of the connection string here and applied as libpq applies them:
//! - `disable`: plaintext;
//! - `prefer` (the default): TLS when the server offers it, else plaintext; the certificate
//!   is not checked;
//! - `require`: TLS or no connection; the certificate is checked against `sslrootcert` when
//!   it is given (as libpq does), else not at all;
//! - `verify-ca`: TLS, and the server's certificate must chain to a CA of `sslrootcert`;
//! - `verify-full`: `verify-ca`, and the certificate must name the host connected to.
//!
//! `verify-*` without `sslrootcert`, or with `sslrootcert=system`, trust the system's roots.
//! [`redact`] hides the password of a connection string wherever one is logged or shown.

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::path::Path;
use std::sync::Arc;
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Plaintext.
    Disable,
    /// TLS when offered, unchecked.
    Prefer,
    /// TLS, checked only against an explicit `sslrootcert`.
    Require,
    /// TLS, chain checked.
    VerifyCa,
    /// TLS, chain and host name checked.
    VerifyFull,
}

/// A shard's connection settings: the driver's configuration and the TLS connector for it.
pub struct Connect {
    /// What tokio-postgres parses (without `sslmode`'s verify modes and `sslrootcert`).
    pub config: tokio_postgres::Config,
    /// The TLS connector every connection of this shard uses.
    pub tls: MakeRustlsConnect,
    /// The `sslmode` asked for.
    pub mode: Mode,
}

/// Parse a libpq connection string (URL or key/value) with its TLS parameters.
pub fn connect(conn: &str) -> Result<Connect, String> {
    let (rest, mode, root) = take_tls_params(conn)?;
    let mut config: tokio_postgres::Config =
        rest.parse().map_err(|e| format!("bad PostgreSQL connection string {}: {e}", redact(conn)))?;
    config.ssl_mode(match mode {
        Mode::Disable => SslMode::Disable,
        Mode::Prefer => SslMode::Prefer,
        Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
    });
    let tls = MakeRustlsConnect::new(client_config(mode, root.as_deref())?);
    Ok(Connect { config, tls, mode })
}

/// The rustls client configuration for `mode` and the CA file (`None`: not given).
pub fn client_config(mode: Mode, root: Option<&str>) -> Result<ClientConfig, String> {
    let provider = crate::tls::provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let checked = matches!((mode, root), (Mode::VerifyCa | Mode::VerifyFull, _) | (Mode::Require, Some(_)));
    let config = if checked {
        let roots = Arc::new(roots(root)?);
        let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider)
            .build()
            .map_err(|e| format!("TLS: {e}"))?;
        if mode == Mode::VerifyFull {
            builder.with_webpki_verifier(webpki).with_no_client_auth()
        } else {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyName(webpki)))
                .with_no_client_auth()
        }
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unchecked(provider)))
            .with_no_client_auth()
    };
    Ok(config)
}

/// The CAs of `path` (PEM), or the system's roots for `None` and `"system"`.
fn roots(path: Option<&str>) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match path {
        Some(p) if p != "system" => {
            let (added, _) =
                store.add_parsable_certificates(crate::tls::ca_file("sslrootcert", Path::new(p))?);
            if added == 0 {
                return Err(format!("sslrootcert {p}: no usable certificate in the file"));
            }
        }
        _ => {
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
            if store.is_empty() {
                return Err("sslmode verify-ca/verify-full: no sslrootcert and no system roots".into());
            }
        }
    }
    Ok(store)
}

/// Take `sslmode` and `sslrootcert` out of a connection string: the rest, the mode (libpq's
/// default `prefer`) and the CA file.
fn take_tls_params(conn: &str) -> Result<(String, Mode, Option<String>), String> {
    let mut mode = Mode::Prefer;
    let mut root = None;
    let mut take = |key: &str, value: &str| -> Result<bool, String> {
        match key {
            "sslmode" => {
                mode = match value {
                    "disable" => Mode::Disable,
                    // libpq's `allow` tries plaintext first; TLS when offered is as safe.
                    "allow" | "prefer" => Mode::Prefer,
                    "require" => Mode::Require,
                    "verify-ca" => Mode::VerifyCa,
                    "verify-full" => Mode::VerifyFull,
                    other => {
                        return Err(format!(
                            "sslmode {other:?} is not one of disable, prefer, require, verify-ca, verify-full"
                        ));
                    }
                };
                Ok(true)
            }
            "sslrootcert" => {
                root = Some(value.to_string());
                Ok(true)
            }
            _ => Ok(false),
        }
    };
    let rest = if conn.starts_with("postgres://") || conn.starts_with("postgresql://") {
        match conn.split_once('?') {
            None => conn.to_string(),
            Some((base, query)) => {
                let mut kept = Vec::new();
                for pair in query.split('&').filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                    if !take(k, &percent_decode(v))? {
                        kept.push(pair);
                    }
                }
                if kept.is_empty() { base.to_string() } else { format!("{base}?{}", kept.join("&")) }
            }
        }
    } else {
        let mut kept = Vec::new();
        for pair in conn.split_whitespace() {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if !take(k.trim(), v.trim_matches('\''))? {
                kept.push(pair);
            }
        }
        kept.join(" ")
    };
    Ok((rest, mode, root))
}

/// `s` with its `%XX` escapes decoded (bytes that are not UTF-8 become U+FFFD).
pub(crate) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1).and_then(|b| hex(*b)), bytes.get(i + 2).and_then(|b| hex(*b))) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub use likewise_core::redact::redact;

/// `prefer`, and `require` without a CA: encrypted, the peer not authenticated (libpq's
/// behaviour). Handshake signatures are still checked.
#[derive(Debug)]
struct Unchecked(Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca` (and `require` with a CA): the chain is checked, the name is not.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests;
