//! Bearer tokens: JWTs with `sub` (the user ID), `exp`, and optional `role: "service"`,
//! signed either with the shared HS256 secret (`auth.secret`) or by an identity provider
//! whose public keys are a JWKS file (`auth.jwks_file`, see [`jwks`]). Extractors turn a
//! request into a [`Viewer`] (acts as the user in `sub`) or a [`Service`] (a trusted internal
//! caller); every failure is a JSON 400, 401 or 403.
//!
//! What is accepted, strictly:
//! - exactly one `Authorization` header (two are a 400: proxies and servers disagree on
//!   which one counts), with the scheme `Bearer` in any case (RFC 7235) and one token;
//! - HS256 with the secret when one is configured; RS256, ES256 or EdDSA with the JWKS key
//!   the header's `kid` names, under that key's one algorithm; nothing else;
//! - `exp` and `sub` are required; `nbf`, when present, is honoured; both with a clock
//!   leeway of [`LEEWAY_SECS`] seconds; `exp` may be fractional (a NumericDate, RFC 7519),
//!   and counts rounded down;
//! - `iss`, when present, is one string (an array is refused, even one holding the accepted
//!   issuer: RFC 7519, 4.1.1);
//! - `aud`, when present, must contain `auth.audience` (set with `auth.jwks_file`), or the
//!   token is refused (RFC 7519, 4.1.3); HS256 tokens need none, as the ones we mint carry
//!   none;
//! - a token whose `exp` lies further ahead than the configured maximum lifetime
//!   (`auth.max_token_ttl`, default [`DEFAULT_MAX_TTL`]) is refused: a stolen long-lived
//!   token would otherwise stay valid for years.
//!
//! Modules: `cache` (tokens already verified), `fast` (a fast path for the HS256 tokens we
//! mint), [`jwks`] (the identity provider's keys and their reloading).

mod cache;
mod fast;
pub mod jwks;
#[cfg(test)]
pub(crate) mod test_keys;

use crate::AppState;
use crate::error::ApiError;
use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use cache::VerifiedTokens;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation, decode, decode_header, encode};
use jwks::Jwks;
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
    /// Expiry, seconds since the Unix epoch (a fractional NumericDate counts rounded down).
    #[serde(deserialize_with = "numeric_date")]
    pub exp: u64,
    /// `"service"` for trusted internal callers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

/// Clock leeway of `exp` and `nbf`, in seconds (clocks of the token issuer and this service
/// may differ by this much).
pub const LEEWAY_SECS: u64 = 5;

/// The longest token lifetime accepted unless configured otherwise (`auth.max_token_ttl`).
pub const DEFAULT_MAX_TTL: Duration = Duration::from_secs(30 * 86_400);

/// The rules every token meets, for a token signed with `alg`: `exp` and `sub` required,
/// `nbf` honoured, [`LEEWAY_SECS`] of leeway.
fn validation(alg: Algorithm) -> Validation {
    let mut v = Validation::new(alg);
    v.leeway = LEEWAY_SECS;
    v.validate_nbf = true;
    v.set_required_spec_claims(&["exp", "sub"]);
    v
}

/// A NumericDate (RFC 7519, 2): seconds since the Unix epoch, an integer or not; a fraction
/// is dropped, so a token never counts as valid later than it says.
fn numeric_date<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let n = serde_json::Number::deserialize(d)?;
    n.as_u64()
        .or_else(|| {
            n.as_f64().filter(|f| f.is_finite() && (0.0..u64::MAX as f64).contains(f)).map(|f| f as u64)
        })
        .ok_or_else(|| serde::de::Error::custom("a NumericDate must be a non-negative number of seconds"))
}

/// What is read of a token's claims: [`Claims`], and `iss` to check its form.
#[derive(Deserialize)]
struct Decoded {
    #[serde(flatten)]
    claims: Claims,
    #[serde(default)]
    iss: Option<serde_json::Value>,
}

/// Verify `token` with `key` under `validation`, and check what `jsonwebtoken` lets through:
/// it accepts an `iss` array that contains an accepted issuer, where RFC 7519 allows one
/// string only.
fn decode_claims(token: &str, key: &DecodingKey, validation: &Validation) -> Result<Claims, ApiError> {
    let d = decode::<Decoded>(token, key, validation).map_err(decode_error)?.claims;
    if !matches!(d.iss, None | Some(serde_json::Value::String(_))) {
        return Err(ApiError::unauthenticated("token iss must be a single string"));
    }
    Ok(d.claims)
}

/// The 401 for a token `jsonwebtoken` refused.
fn decode_error(e: jsonwebtoken::errors::Error) -> ApiError {
    use jsonwebtoken::errors::ErrorKind as K;
    match e.kind() {
        K::ExpiredSignature => ApiError::unauthenticated("token expired"),
        K::ImmatureSignature => ApiError::unauthenticated("token not yet valid (nbf)"),
        K::InvalidIssuer => ApiError::unauthenticated("token issuer is not accepted"),
        K::InvalidAudience => ApiError::unauthenticated("token audience is not accepted"),
        K::MissingRequiredClaim(c) => ApiError::unauthenticated(format!("token has no {c} claim")),
        _ => ApiError::unauthenticated("invalid token"),
    }
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// The shared HS256 secret, for signing and verifying.
struct Secret {
    encoding: EncodingKey,
    decoding: DecodingKey,
    fast: fast::FastVerifier,
}

/// Verifies tokens (with the shared secret, the identity provider's keys, or both) and signs
/// them with the secret.
#[derive(Clone)]
pub struct TokenKeys {
    max_ttl: u64,
    secret: Option<Arc<Secret>>,
    /// The rules of HS256 tokens (with the identity provider's audience, when it has one).
    hs256: Arc<Validation>,
    jwks: Option<Jwks>,
    verified: Arc<VerifiedTokens>,
}

impl TokenKeys {
    /// The verified-token cache's entries, capacity and estimated bytes (for `/metrics`).
    pub fn cache_usage(&self) -> Usage {
        self.verified.usage()
    }

    /// Keys from the configured secret, accepting lifetimes up to [`DEFAULT_MAX_TTL`].
    pub fn new(secret: &[u8]) -> Self {
        let s = Secret {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
            fast: fast::FastVerifier::new(secret, LEEWAY_SECS),
        };
        TokenKeys { secret: Some(Arc::new(s)), ..Self::from_jwks_inner(None) }
    }

    /// Keys of an identity provider only: HS256 tokens are refused and none can be minted.
    pub fn from_jwks(jwks: Jwks) -> Self {
        Self::from_jwks_inner(Some(jwks))
    }

    fn from_jwks_inner(jwks: Option<Jwks>) -> Self {
        TokenKeys {
            max_ttl: DEFAULT_MAX_TTL.as_secs(),
            secret: None,
            hs256: Arc::new(validation(Algorithm::HS256)),
            jwks,
            verified: Arc::new(VerifiedTokens::new(100_000)),
        }
    }

    /// Also accept tokens signed by the identity provider's keys. Its audience
    /// (`auth.audience`) is then also accepted in the `aud` of HS256 tokens: a token naming
    /// this service is refused by no key (README), though HS256 tokens need no `aud`.
    pub fn with_jwks(mut self, jwks: Jwks) -> Self {
        let mut v = validation(Algorithm::HS256);
        if let Some(aud) = jwks.audience() {
            v.set_audience(&[aud]);
        }
        self.hs256 = Arc::new(v);
        self.jwks = Some(jwks);
        self
    }

    /// Refuse tokens whose `exp` lies more than `max_ttl` ahead (`auth.max_token_ttl`).
    pub fn with_max_ttl(mut self, max_ttl: Duration) -> Self {
        self.max_ttl = max_ttl.as_secs();
        self
    }

    /// The longest lifetime a token may have.
    pub fn max_ttl(&self) -> Duration {
        Duration::from_secs(self.max_ttl)
    }

    /// A token expiring past `now + max_ttl` (plus the leeway) lives too long.
    fn check_lifetime(&self, claims: &Claims, now: u64) -> Result<(), ApiError> {
        if claims.exp > now.saturating_add(self.max_ttl).saturating_add(LEEWAY_SECS) {
            return Err(ApiError::unauthenticated(
                "token lifetime exceeds the accepted maximum (auth.max_token_ttl)",
            ));
        }
        Ok(())
    }

    /// The caller a token names: from the verified-token cache, else verified (by the fast
    /// path for the tokens we mint, see `fast.rs`, else by `jsonwebtoken`) and cached until
    /// its expiry (plus the validation leeway, as `verify` allows), under the current
    /// generation of the identity provider's keys.
    pub fn caller(&self, token: &str) -> Result<Caller, ApiError> {
        let now = unix_now();
        let generation = self.jwks.as_ref().map_or(0, Jwks::generation);
        if let Some(c) = self.verified.get(token, now, generation) {
            return Ok(c);
        }
        let (claims, generation) = match self.secret.as_ref().and_then(|s| s.fast.accept(token, now)) {
            Some(claims) => (claims, generation),
            None => self.decode(token, generation)?,
        };
        self.check_lifetime(&claims, now)?;
        let user =
            parse_id(&claims.sub).map_err(|_| ApiError::unauthenticated("token subject is not a user ID"))?;
        let c = Caller {
            user: UserId(user),
            service: claims.role.as_deref() == Some("service"),
            expires_at: claims.exp,
        };
        self.verified.put(token, c, claims.exp.saturating_add(LEEWAY_SECS), generation);
        Ok(c)
    }

    /// Verify a token's signature and claims with the key its header calls for; the claims
    /// and the key-set generation that verified them (`generation` for the secret).
    fn decode(&self, token: &str, generation: u64) -> Result<(Claims, u64), ApiError> {
        let header = decode_header(token).map_err(|_| ApiError::unauthenticated("invalid token"))?;
        // No header extension is understood here, so a token that marks one critical is
        // invalid (RFC 7515, 4.1.11). The fast path never meets one: it accepts only header
        // segments this decoder accepted.
        if header.crit.is_some() {
            return Err(ApiError::unauthenticated("invalid token: unsupported critical header extension"));
        }
        match (header.alg, &self.secret, &self.jwks) {
            (Algorithm::HS256, Some(s), _) => {
                let claims = decode_claims(token, &s.decoding, &self.hs256)?;
                s.fast.learn(token);
                Ok((claims, generation))
            }
            (Algorithm::HS256, None, _) => Err(ApiError::unauthenticated(
                "HS256 tokens are not accepted here; use the identity provider's",
            )),
            (_, _, Some(jwks)) => jwks.verify(token, &header),
            (_, _, None) => Err(ApiError::unauthenticated("invalid token")),
        }
    }

    /// Mint a token for `user`, valid for `ttl` (at most the accepted maximum lifetime),
    /// signed with the secret.
    pub fn mint(&self, user: UserId, service: bool, ttl: Duration) -> Result<String, String> {
        let secret = self.secret.as_ref().ok_or_else(|| {
            "no auth.secret to sign with: tokens come from the identity provider (auth.jwks_file)".to_string()
        })?;
        if ttl.as_secs() > self.max_ttl {
            return Err(format!(
                "a token may live at most {} s (auth.max_token_ttl); asked for {} s",
                self.max_ttl,
                ttl.as_secs()
            ));
        }
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_err(|e| e.to_string())?;
        let claims = Claims {
            sub: user.to_string(),
            exp: (now + ttl).as_secs(),
            role: service.then(|| "service".to_string()),
        };
        encode(&Header::new(Algorithm::HS256), &claims, &secret.encoding).map_err(|e| e.to_string())
    }

    /// Verify a token (signature, claims, lifetime) and return its claims.
    pub fn verify(&self, token: &str) -> Result<Claims, ApiError> {
        let generation = self.jwks.as_ref().map_or(0, Jwks::generation);
        let (claims, _) = self.decode(token, generation)?;
        self.check_lifetime(&claims, unix_now())?;
        Ok(claims)
    }
}

/// The authenticated caller.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    /// The user in `sub`.
    pub user: UserId,
    /// Carries `role: "service"`.
    pub service: bool,
    /// The token's `exp` (seconds since the Unix epoch): an open stream ends then.
    pub expires_at: u64,
}

/// The bearer token of a request: exactly one `Authorization` header, scheme `Bearer` in
/// any case, then the token (surrounding spaces and tabs ignored).
pub fn bearer_token(headers: &HeaderMap) -> Result<&str, ApiError> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let header =
        values.next().ok_or_else(|| ApiError::unauthenticated("missing Authorization: Bearer token"))?;
    if values.next().is_some() {
        return Err(ApiError::invalid("more than one Authorization header"));
    }
    let value = header.to_str().map_err(|_| ApiError::unauthenticated("malformed Authorization header"))?;
    let (scheme, token) =
        value.split_once([' ', '\t']).ok_or_else(|| ApiError::unauthenticated("expected a Bearer token"))?;
    let token = token.trim_matches([' ', '\t']);
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(ApiError::unauthenticated("expected a Bearer token"));
    }
    Ok(token)
}

fn caller(parts: &Parts, state: &Arc<AppState>) -> Result<Caller, ApiError> {
    state.keys.caller(bearer_token(&parts.headers)?)
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

    fn encoding(keys: &TokenKeys) -> EncodingKey {
        keys.secret.as_ref().expect("a secret").encoding.clone()
    }

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
        keys.verified.put("stale", Caller { user: UserId(1), service: true, expires_at: 5 }, 10, 0);
        assert_eq!(keys.caller("stale").err().map(|e| e.status().as_u16()), Some(401));
    }

    fn now() -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs()
    }

    #[test]
    fn the_scheme_is_case_insensitive_and_the_header_must_be_single() {
        let mut h = HeaderMap::new();
        for v in ["Bearer t.k", "bearer t.k", "BEARER t.k", "bEaReR \t t.k "] {
            h.insert(AUTHORIZATION, v.parse().expect("value"));
            assert_eq!(bearer_token(&h).ok(), Some("t.k"), "{v:?}");
        }
        for v in ["Basic t.k", "Bearer", "Bearer  ", "Bearert.k", "t.k"] {
            h.insert(AUTHORIZATION, v.parse().expect("value"));
            assert_eq!(bearer_token(&h).err().map(|e| e.status().as_u16()), Some(401), "{v:?}");
        }
        h.insert(AUTHORIZATION, "Bearer a".parse().expect("value"));
        h.append(AUTHORIZATION, "Bearer b".parse().expect("value"));
        assert_eq!(bearer_token(&h).err().map(|e| e.status().as_u16()), Some(400));
    }

    #[test]
    fn nbf_and_the_maximum_lifetime_are_enforced() {
        let keys = TokenKeys::new(b"secret-one").with_max_ttl(Duration::from_secs(3600));
        let sign = |c: serde_json::Value| {
            encode(&Header::new(Algorithm::HS256), &c, &encoding(&keys)).expect("encode")
        };
        let t = now();
        let early = sign(serde_json::json!({"sub": "1", "exp": t + 600, "nbf": t + 300}));
        assert_eq!(keys.caller(&early).err().map(|e| e.status().as_u16()), Some(401));
        let ripe = sign(serde_json::json!({"sub": "1", "exp": t + 600, "nbf": t - 1}));
        assert_eq!(keys.caller(&ripe).expect("valid").expires_at, t + 600);
        let long = sign(serde_json::json!({"sub": "1", "exp": t + 7200}));
        assert_eq!(keys.caller(&long).err().map(|e| e.status().as_u16()), Some(401));
        assert!(keys.verify(&long).is_err());
        assert!(keys.mint(UserId(1), false, Duration::from_secs(7200)).is_err());
        let minted = keys.mint(UserId(1), false, Duration::from_secs(3600)).expect("at the maximum");
        assert!(keys.caller(&minted).is_ok());
    }

    #[test]
    fn a_fractional_exp_is_accepted() {
        let keys = TokenKeys::new(b"secret-one");
        let t = now();
        let sign = |c: serde_json::Value| {
            encode(&Header::new(Algorithm::HS256), &c, &encoding(&keys)).expect("encode")
        };
        let token = sign(serde_json::json!({"sub": "3", "exp": t as f64 + 600.5}));
        assert_eq!(keys.caller(&token).expect("NumericDate may be fractional").expires_at, t + 600);
        assert_eq!(keys.verify(&token).expect("verify").exp, t + 600);
        let token = sign(serde_json::json!({"sub": "3", "exp": t as f64 - 60.5}));
        assert_eq!(keys.caller(&token).err().map(|e| e.status().as_u16()), Some(401));
    }

    #[test]
    fn expired_tokens_are_rejected() {
        let keys = TokenKeys::new(b"s");
        let claims = Claims { sub: "1".into(), exp: 1_000, role: None };
        let t = encode(&Header::new(Algorithm::HS256), &claims, &encoding(&keys)).expect("encode");
        assert!(keys.verify(&t).is_err());
    }

    #[test]
    fn a_critical_header_extension_is_refused() {
        let keys = TokenKeys::new(b"s");
        let claims = Claims { sub: "1".into(), exp: now() + 60, role: None };
        let mut header = Header::new(Algorithm::HS256);
        let plain = encode(&header, &claims, &encoding(&keys)).expect("encode");
        assert!(keys.caller(&plain).is_ok());
        for crit in [vec!["exp".to_string()], vec![]] {
            header.crit = Some(crit);
            let t = encode(&header, &claims, &encoding(&keys)).expect("encode");
            assert_eq!(keys.caller(&t).err().map(|e| e.status().as_u16()), Some(401), "{t}");
        }
    }
}
