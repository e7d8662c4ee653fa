//! Tokens from an identity provider: its public keys, read from a JWKS document on disk
//! (`auth.jwks_file`), and the verification of the tokens it signs.
//!
//! - The token's `kid` chooses the key. Each key verifies exactly one algorithm: the JWK's
//!   `alg`, or the one its type implies (`RSA`: RS256; `EC` on P-256: ES256; `OKP` on
//!   Ed25519: EdDSA). A token whose header names another algorithm is refused, so a key never
//!   verifies under an algorithm its owner did not choose.
//! - Keys of other kinds (symmetric keys, other curves, encryption keys, RS384, ...), RSA
//!   keys shorter than [`MIN_RSA_BITS`] and keys without a `kid` are skipped with a warning. A document without one usable key is an
//!   error at start-up.
//! - The file is re-read when it changes, so keys rotate without a restart: at most once per
//!   [`CHECK_INTERVAL`] a request looks at the file's modification time, size and inode (one
//!   `stat`); a changed file is parsed and its key set replaces the old one whole, under the
//!   next *generation*. The verified-token cache trusts an entry only under the generation it
//!   was verified with, so a token signed by a removed key is refused from the first request
//!   that sees the new file. A file that no longer parses (say, half written) keeps the
//!   previous keys, with a warning.
//! - `auth.issuer` and `auth.audience`, when set, must be in every token these keys sign
//!   ([`Expected`]); a token carrying an `aud` is refused unless `auth.audience` is among its
//!   values (RFC 7519, 4.1.3). HS256 tokens may name the same audience (see
//!   `TokenKeys::with_jwks`).

use super::{Claims, decode_claims, validation};
use crate::error::ApiError;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Header, Validation};
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// The shortest RSA modulus accepted, in bits: shorter keys (1024 bits, say) can be factored
/// by a determined attacker and are disallowed for signatures since 2013 (NIST SP 800-131A).
pub const MIN_RSA_BITS: usize = 2048;

/// How often a request may look at the JWKS file for changes.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The JWKS file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum JwksError {
    /// Reading the file failed.
    #[error("reading {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a JWKS document (`{"keys": [...]}`).
    #[error("{} is not a JWKS document: {source}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        source: serde_json::Error,
    },
    /// No key of the document can verify tokens here.
    #[error("{} holds no usable key (RSA of 2048 bits or more, EC P-256 or Ed25519, each with a kid)", path.display())]
    NoUsableKey {
        /// The file.
        path: PathBuf,
    },
}

/// What a token signed by the identity provider must carry besides a valid signature.
#[derive(Debug, Clone, Default)]
pub struct Expected {
    /// `iss` must be present and equal this, when set (`auth.issuer`).
    pub issuer: Option<String>,
    /// `aud` must be present and be or contain this, when set (`auth.audience`).
    pub audience: Option<String>,
}

/// One public key and the one algorithm it verifies.
struct VerifyKey {
    alg: Algorithm,
    key: DecodingKey,
}

/// The keys of one version of the document.
struct KeySet {
    generation: u64,
    keys: HashMap<String, VerifyKey>,
    /// The document's bytes: a rewrite with the same content keeps the generation.
    source: Vec<u8>,
}

/// What identifies a version of the file without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

impl Stamp {
    /// The stamp of a file that could not be looked at.
    const MISSING: Stamp = Stamp { modified: None, len: 0, inode: 0 };

    fn of(m: &std::fs::Metadata) -> Stamp {
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(m);
        #[cfg(not(unix))]
        let inode = 0;
        Stamp { modified: m.modified().ok(), len: m.len(), inode }
    }
}

/// The identity provider's keys, reloaded when their file changes. Cheap to clone (shared).
#[derive(Clone)]
pub struct Jwks {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    /// `aud` tokens must carry (`auth.audience`).
    audience: Option<String>,
    /// Validation per accepted algorithm: RS256, ES256, EdDSA.
    validations: [Validation; 3],
    current: parking_lot::RwLock<Arc<KeySet>>,
    /// `current.generation`, readable without the lock.
    generation: AtomicU64,
    epoch: Instant,
    /// Milliseconds after `epoch` when the file may be looked at again.
    next_check_ms: AtomicU64,
    interval_ms: AtomicU64,
    /// The file version last looked at (parsed or not).
    seen: parking_lot::Mutex<Stamp>,
}

/// The algorithms tokens from the identity provider may use, in the order of `validations`.
const ACCEPTED: [Algorithm; 3] = [Algorithm::RS256, Algorithm::ES256, Algorithm::EdDSA];

impl Jwks {
    /// Read the JWKS document at `path`; tokens must also meet `expected`.
    pub fn open(path: impl Into<PathBuf>, expected: Expected) -> Result<Jwks, JwksError> {
        let path = path.into();
        let read = |path: &Path| {
            let meta = std::fs::metadata(path)?;
            Ok((Stamp::of(&meta), std::fs::read(path)?))
        };
        let (stamp, bytes) = read(&path).map_err(|source| JwksError::Read { path: path.clone(), source })?;
        let set = parse(&path, bytes, 1)?;
        if set.keys.is_empty() {
            return Err(JwksError::NoUsableKey { path });
        }
        tracing::info!(path = %path.display(), keys = set.keys.len(), "identity provider keys loaded");
        let validations = ACCEPTED.map(|alg| {
            let mut v = validation(alg);
            let mut required = vec!["exp", "sub"];
            if let Some(iss) = &expected.issuer {
                v.set_issuer(&[iss]);
                required.push("iss");
            }
            if let Some(aud) = &expected.audience {
                v.set_audience(&[aud]);
                required.push("aud");
            }
            v.set_required_spec_claims(&required);
            v
        });
        Ok(Jwks {
            inner: Arc::new(Inner {
                path,
                audience: expected.audience.clone(),
                validations,
                current: parking_lot::RwLock::new(Arc::new(set)),
                generation: AtomicU64::new(1),
                epoch: Instant::now(),
                next_check_ms: AtomicU64::new(0),
                interval_ms: AtomicU64::new(CHECK_INTERVAL.as_millis() as u64),
                seen: parking_lot::Mutex::new(stamp),
            }),
        })
    }

    /// Look at the file at most once per `interval` instead of [`CHECK_INTERVAL`].
    pub fn with_check_interval(self, interval: Duration) -> Jwks {
        self.inner.interval_ms.store(interval.as_millis() as u64, Ordering::Relaxed);
        self
    }

    /// The current key-set generation, after looking at the file if that is due.
    pub fn generation(&self) -> u64 {
        self.reload_if_due();
        self.inner.generation.load(Ordering::Acquire)
    }

    /// The audience its tokens must name (`auth.audience`), if one is set.
    pub fn audience(&self) -> Option<&str> {
        self.inner.audience.as_deref()
    }

    /// The key IDs currently accepted, sorted.
    pub fn key_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.inner.current.read().keys.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// Verify `token` (whose parsed header is `header`): its claims and the generation of
    /// the key set that verified it.
    pub(super) fn verify(&self, token: &str, header: &Header) -> Result<(Claims, u64), ApiError> {
        let set = self.inner.current.read().clone();
        let kid =
            header.kid.as_deref().ok_or_else(|| ApiError::unauthenticated("token names no key (kid)"))?;
        let key =
            set.keys.get(kid).ok_or_else(|| ApiError::unauthenticated("token signed by an unknown key"))?;
        if header.alg != key.alg {
            return Err(ApiError::unauthenticated("token algorithm does not match its key"));
        }
        let v = ACCEPTED
            .iter()
            .position(|a| *a == key.alg)
            .map(|i| &self.inner.validations[i])
            .ok_or_else(|| ApiError::unauthenticated("invalid token"))?;
        let claims = decode_claims(token, &key.key, v)?;
        Ok((claims, set.generation))
    }

    fn reload_if_due(&self) {
        let i = &self.inner;
        let now = i.epoch.elapsed().as_millis() as u64;
        let due = i.next_check_ms.load(Ordering::Relaxed);
        // One request per interval looks; the others go on with the keys they have.
        if now < due
            || i.next_check_ms
                .compare_exchange(
                    due,
                    now.saturating_add(i.interval_ms.load(Ordering::Relaxed)),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            return;
        }
        self.reload_if_changed();
    }

    /// Re-read the file if its stamp changed since it was last looked at.
    fn reload_if_changed(&self) {
        let i = &self.inner;
        let path = i.path.display();
        let mut seen = i.seen.lock();
        let stamp = match std::fs::metadata(&i.path) {
            Ok(m) => Stamp::of(&m),
            Err(e) => {
                if *seen != Stamp::MISSING {
                    tracing::warn!(path = %path, error = %e, "identity provider keys unreadable; keeping the previous ones");
                    *seen = Stamp::MISSING;
                }
                return;
            }
        };
        if *seen == stamp {
            return;
        }
        *seen = stamp;
        let bytes = match std::fs::read(&i.path) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(path = %path, error = %e, "identity provider keys unreadable; keeping the previous ones");
                return;
            }
        };
        let current = i.current.read().clone();
        if bytes == current.source {
            return;
        }
        match parse(&i.path, bytes, current.generation + 1) {
            Ok(set) => {
                if set.keys.is_empty() {
                    tracing::warn!(path = %path, "identity provider keys: none usable; every token they signed is refused");
                }
                let generation = set.generation;
                tracing::info!(path = %path, keys = set.keys.len(), generation, "identity provider keys reloaded");
                *i.current.write() = Arc::new(set);
                i.generation.store(generation, Ordering::Release);
            }
            Err(e) => {
                tracing::warn!(error = %e, "identity provider keys not reloaded; keeping the previous ones")
            }
        }
    }
}

/// The key set of a JWKS document (usable keys only; the others are logged and skipped).
fn parse(path: &Path, source: Vec<u8>, generation: u64) -> Result<KeySet, JwksError> {
    #[derive(serde::Deserialize)]
    struct Document {
        keys: Vec<serde_json::Value>,
    }
    let doc: Document =
        serde_json::from_slice(&source).map_err(|e| JwksError::Parse { path: path.into(), source: e })?;
    let mut keys = HashMap::new();
    for (n, value) in doc.keys.into_iter().enumerate() {
        let kid = value.get("kid").and_then(|k| k.as_str()).map(str::to_owned);
        match usable(value) {
            Ok((kid, _)) if keys.contains_key(&kid) => {
                tracing::warn!(path = %path.display(), kid, "JWKS: a second key with this kid is skipped");
            }
            Ok((kid, key)) => {
                keys.insert(kid, key);
            }
            Err(why) => tracing::warn!(path = %path.display(), key = n, kid, why = %why, "JWKS: key skipped"),
        }
    }
    Ok(KeySet { generation, keys, source })
}

/// A JWK's key ID and verifying key, or why it cannot verify tokens here.
fn usable(value: serde_json::Value) -> Result<(String, VerifyKey), Cow<'static, str>> {
    let jwk: Jwk = serde_json::from_value(value).map_err(|_| "not a JWK of a known key type")?;
    let kid = jwk.common.key_id.clone().ok_or("no kid")?;
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        return Err("an encryption key (use: enc)".into());
    }
    let alg = pinned_algorithm(&jwk)?;
    if let AlgorithmParameters::RSA(p) = &jwk.algorithm {
        let bits = modulus_bits(&p.n).ok_or("malformed key parameters")?;
        if bits < MIN_RSA_BITS {
            return Err(format!("an RSA key of {bits} bits (at least {MIN_RSA_BITS} are needed)").into());
        }
    }
    let key = DecodingKey::from_jwk(&jwk).map_err(|_| "malformed key parameters")?;
    Ok((kid, VerifyKey { alg, key }))
}

/// The length in bits of an RSA modulus given as a JWK's `n` (unpadded base64url, big-endian).
fn modulus_bits(n: &str) -> Option<usize> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(n).ok()?;
    let first = bytes.iter().position(|b| *b != 0)?;
    Some((bytes.len() - first) * 8 - bytes[first].leading_zeros() as usize)
}

/// The one algorithm a key verifies: its `alg` when given, which must fit its type, else the
/// one its type implies.
fn pinned_algorithm(jwk: &Jwk) -> Result<Algorithm, &'static str> {
    let implied = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => Algorithm::ES256,
        AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => Algorithm::EdDSA,
        AlgorithmParameters::OctetKey(_) => return Err("a symmetric key (the HS256 secret is auth.secret)"),
        _ => return Err("a curve other than P-256 and Ed25519"),
    };
    let named = match jwk.common.key_algorithm {
        None => return Ok(implied),
        Some(KeyAlgorithm::RS256) => Algorithm::RS256,
        Some(KeyAlgorithm::ES256) => Algorithm::ES256,
        Some(KeyAlgorithm::EdDSA) => Algorithm::EdDSA,
        Some(_) => return Err("an algorithm other than RS256, ES256 and EdDSA"),
    };
    if named != implied {
        return Err("alg does not fit the key type");
    }
    Ok(named)
}

#[cfg(test)]
mod tests;
