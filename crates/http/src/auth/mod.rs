//! Bearer tokens: JWT HS256 with `sub` (the user ID), `exp`, and optional `role: "service"`.
//! Extractors turn a request into a [`Viewer`] (acts as the user in `sub`) or a [`Service`]
//! (a trusted internal caller); every failure is a JSON 401 or 403.

mod fast;

use crate::AppState;
use crate::error::ApiError;
use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation, decode, encode};
use likewise_core::ids::{UserId, parse_id};
use likewise_service::cache::Usage;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Token claims.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The user ID, as a decimal string.
    pub sub: String,
    /// Expiry, seconds since the Unix epoch.
    pub exp: u64,
    /// `"service"` for trusted internal callers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

/// Signs and verifies tokens with one shared secret.
#[derive(Clone)]
pub struct TokenKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    verified: Arc<VerifiedTokens>,
    fast: Arc<fast::FastVerifier>,
}

/// Tokens already verified, with who they name and when they expire. A client sends the same
/// token with every request, and checking the signature (base64, JSON, HMAC-SHA256) is a
/// visible share of a like's CPU cost; a hit only hashes the token and checks the expiry.
/// Keyed by the whole token string, so only a byte-identical token can hit.
type TokenShard = parking_lot::Mutex<std::collections::HashMap<Box<str>, (Caller, u64)>>;

struct VerifiedTokens {
    shards: Vec<TokenShard>,
    per_shard: usize,
    hasher: std::collections::hash_map::RandomState,
}

impl VerifiedTokens {
    fn new(capacity: usize) -> Self {
        const SHARDS: usize = 16;
        VerifiedTokens {
            shards: (0..SHARDS).map(|_| parking_lot::Mutex::new(std::collections::HashMap::new())).collect(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }

    fn shard(&self, token: &str) -> &TokenShard {
        use std::hash::BuildHasher;
        &self.shards[(self.hasher.hash_one(token) as usize) % self.shards.len()]
    }

    fn get(&self, token: &str, now: u64) -> Option<Caller> {
        let mut shard = self.shard(token).lock();
        match shard.get(token) {
            Some((c, exp)) if *exp >= now => Some(*c),
            Some(_) => {
                shard.remove(token);
                None
            }
            None => None,
        }
    }

    fn put(&self, token: &str, caller: Caller, exp: u64) {
        let mut shard = self.shard(token).lock();
        if shard.len() >= self.per_shard {
            // Crude but bounded: a full shard starts over (verifying again is always right).
            shard.clear();
        }
        shard.insert(token.into(), (caller, exp));
    }

    /// Entries, capacity and estimated bytes (tables plus each token's text).
    fn usage(&self) -> Usage {
        use likewise_service::cache::table_bytes;
        let entry = std::mem::size_of::<(Box<str>, (Caller, u64))>();
        let (mut entries, mut bytes) = (0, 0);
        for s in &self.shards {
            let s = s.lock();
            entries += s.len();
            bytes += table_bytes(s.capacity(), entry) + s.keys().map(|k| k.len()).sum::<usize>();
        }
        Usage { cache: "verified_tokens", entries, capacity: self.per_shard * self.shards.len(), bytes }
    }
}

impl TokenKeys {
    /// The verified-token cache's entries, capacity and estimated bytes (for `/metrics`).
    pub fn cache_usage(&self) -> Usage {
        self.verified.usage()
    }

    /// Keys from the configured secret.
    pub fn new(secret: &[u8]) -> Self {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 5;
        validation.set_required_spec_claims(&["exp", "sub"]);
        TokenKeys {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
            fast: Arc::new(fast::FastVerifier::new(secret, validation.leeway)),
            validation,
            verified: Arc::new(VerifiedTokens::new(100_000)),
        }
    }

    /// The caller a token names: from the verified-token cache, else verified (by the fast
    /// path for the tokens we mint, see `fast.rs`, else by `jsonwebtoken`) and cached until
    /// its expiry (plus the validation leeway, as `verify` allows).
    pub fn caller(&self, token: &str) -> Result<Caller, ApiError> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        if let Some(c) = self.verified.get(token, now) {
            return Ok(c);
        }
        let claims = match self.fast.accept(token, now) {
            Some(claims) => claims,
            None => {
                let claims = self.verify(token)?;
                self.fast.learn(token);
                claims
            }
        };
        let user =
            parse_id(&claims.sub).map_err(|_| ApiError::unauthenticated("token subject is not a user ID"))?;
        let c = Caller { user: UserId(user), service: claims.role.as_deref() == Some("service") };
        self.verified.put(token, c, claims.exp.saturating_add(self.validation.leeway));
        Ok(c)
    }

    /// Mint a token for `user`, valid for `ttl`.
    pub fn mint(&self, user: UserId, service: bool, ttl: Duration) -> Result<String, String> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_err(|e| e.to_string())?;
        let claims = Claims {
            sub: user.to_string(),
            exp: (now + ttl).as_secs(),
            role: service.then(|| "service".to_string()),
        };
        encode(&Header::new(Algorithm::HS256), &claims, &self.encoding).map_err(|e| e.to_string())
    }

    /// Verify a token and return its claims.
    pub fn verify(&self, token: &str) -> Result<Claims, ApiError> {
        decode::<Claims>(token, &self.decoding, &self.validation).map(|d| d.claims).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind as K;
            match e.kind() {
                K::ExpiredSignature => ApiError::unauthenticated("token expired"),
                _ => ApiError::unauthenticated("invalid token"),
            }
        })
    }
}

/// The authenticated caller.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    /// The user in `sub`.
    pub user: UserId,
    /// Carries `role: "service"`.
    pub service: bool,
}

fn caller(parts: &Parts, state: &Arc<AppState>) -> Result<Caller, ApiError> {
    let header = parts
        .headers
        .get(AUTHORIZATION)
        .ok_or_else(|| ApiError::unauthenticated("missing Authorization: Bearer token"))?;
    let value = header.to_str().map_err(|_| ApiError::unauthenticated("malformed Authorization header"))?;
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .ok_or_else(|| ApiError::unauthenticated("expected a Bearer token"))?;
    state.keys.caller(token.trim())
}

/// A user acting as themselves (any valid token).
#[derive(Debug, Clone, Copy)]
pub struct Viewer(pub Caller);

/// A trusted internal caller (`role: "service"`).
#[derive(Debug, Clone, Copy)]
pub struct Service(pub Caller);

impl FromRequestParts<Arc<AppState>> for Viewer {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &Arc<AppState>) -> Result<Self, ApiError> {
        caller(parts, state).map(Viewer)
    }
}

impl FromRequestParts<Arc<AppState>> for Service {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &Arc<AppState>) -> Result<Self, ApiError> {
        let c = caller(parts, state)?;
        if !c.service {
            return Err(ApiError::forbidden("this route needs a service-role token"));
        }
        Ok(Service(c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_tokens_verify_and_others_do_not() {
        let keys = TokenKeys::new(b"secret-one");
        let t = keys.mint(UserId(42), true, Duration::from_secs(60)).expect("mint");
        let c = keys.verify(&t).expect("verify");
        assert_eq!((c.sub.as_str(), c.role.as_deref()), ("42", Some("service")));
        let other = TokenKeys::new(b"secret-two");
        assert_eq!(other.verify(&t).err().map(|e| e.status().as_u16()), Some(401));
        assert!(keys.verify("not.a.token").is_err());
    }

    #[test]
    fn the_verified_cache_never_admits_another_token_and_honours_expiry() {
        let keys = TokenKeys::new(b"secret-one");
        let t = keys.mint(UserId(42), false, Duration::from_secs(60)).expect("mint");
        let c = keys.caller(&t).expect("first use verifies");
        assert_eq!((c.user, c.service), (UserId(42), false));
        assert_eq!(keys.caller(&t).expect("cached").user, UserId(42));
        // A token differing in one signature character is verified, not looked up.
        let mut forged = t.clone();
        let last = forged.pop().expect("char");
        forged.push(if last == 'A' { 'B' } else { 'A' });
        assert_eq!(keys.caller(&forged).err().map(|e| e.status().as_u16()), Some(401));
        // A cached entry past its expiry is dropped and the token re-verified (and refused).
        keys.verified.put("stale", Caller { user: UserId(1), service: true }, 10);
        assert_eq!(keys.caller("stale").err().map(|e| e.status().as_u16()), Some(401));
    }

    #[test]
    fn expired_tokens_are_rejected() {
        let keys = TokenKeys::new(b"s");
        let claims = Claims { sub: "1".into(), exp: 1_000, role: None };
        let t = encode(&Header::new(Algorithm::HS256), &claims, &keys.encoding).expect("encode");
        assert!(keys.verify(&t).is_err());
    }
}
