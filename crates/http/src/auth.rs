//! Bearer tokens: JWT HS256 with `sub` (the user ID), `exp`, and optional `role: "service"`.
//! Extractors turn a request into a [`Viewer`] (acts as the user in `sub`) or a [`Service`]
//! (a trusted internal caller); every failure is a JSON 401 or 403.

use crate::AppState;
use crate::error::ApiError;
use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation, decode, encode};
use likewise_core::ids::{UserId, parse_id};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Token claims.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
}

impl TokenKeys {
    /// Keys from the configured secret.
    pub fn new(secret: &[u8]) -> Self {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 5;
        validation.set_required_spec_claims(&["exp", "sub"]);
        TokenKeys {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
            validation,
        }
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
    let claims = state.keys.verify(token.trim())?;
    let user =
        parse_id(&claims.sub).map_err(|_| ApiError::unauthenticated("token subject is not a user ID"))?;
    Ok(Caller { user: UserId(user), service: claims.role.as_deref() == Some("service") })
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
    fn expired_tokens_are_rejected() {
        let keys = TokenKeys::new(b"s");
        let claims = Claims { sub: "1".into(), exp: 1_000, role: None };
        let t = encode(&Header::new(Algorithm::HS256), &claims, &keys.encoding).expect("encode");
        assert!(keys.verify(&t).is_err());
    }
}
