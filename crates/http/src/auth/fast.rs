//! A fast path that accepts the HS256 tokens this service mints.
//!
//! `jsonwebtoken::decode` is general: per token it decodes and parses the header twice, keys
//! a fresh HMAC (two SHA-256 blocks more), and parses the claims twice. When every request
//! carries a token not seen before (the hot-post benchmark gives each liker one), that was
//! about 6% of a like's server CPU.
//!
//! This path only ever *accepts*; it never rejects. It accepts a token when all of these hold:
//! - its header segment is byte-identical to one that `jsonwebtoken` has already accepted
//!   with our validation (the header says nothing but the algorithm and type);
//! - the HMAC-SHA256 of `header.payload` under our key, kept keyed, equals the signature
//!   (`verify_slice` compares in constant time);
//! - the payload is exactly the claim set we mint: `sub` (a string), `exp` (an integer),
//!   optionally `role` (a string or null), no other member, and `exp` is not past (with the
//!   same leeway).
//!
//! Anything else returns `None`, and `jsonwebtoken` decides and words the error, so every
//! token accepted here is one the full decoder accepts with the same claims. The property
//! test `the_fast_path_agrees_with_jsonwebtoken` checks that on random and mutated tokens.

use super::Claims;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;
use std::borrow::Cow;

/// Most distinct header segments remembered (in practice one: the header we mint).
const MAX_HEADERS: usize = 8;

/// The claims this service mints, and nothing else.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Minted<'a> {
    #[serde(borrow)]
    sub: Cow<'a, str>,
    exp: u64,
    #[serde(default, borrow)]
    role: Option<Cow<'a, str>>,
}

pub(super) struct FastVerifier {
    mac: Hmac<Sha256>,
    headers: parking_lot::RwLock<Vec<Box<[u8]>>>,
    leeway: u64,
}

/// A token split as `jsonwebtoken` splits it (at the last two dots).
struct Parts<'a> {
    header: &'a [u8],
    /// `header.payload`: what the signature covers.
    message: &'a [u8],
    payload: &'a [u8],
    signature: &'a [u8],
}

fn split(token: &[u8]) -> Option<Parts<'_>> {
    let dot = token.iter().rposition(|b| *b == b'.')?;
    let (message, signature) = (&token[..dot], &token[dot + 1..]);
    let dot = message.iter().rposition(|b| *b == b'.')?;
    Some(Parts { header: &message[..dot], message, payload: &message[dot + 1..], signature })
}

impl FastVerifier {
    pub(super) fn new(secret: &[u8], leeway: u64) -> Self {
        // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
        let mac = <Hmac<Sha256> as Mac>::new_from_slice(secret)
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of every length"));
        FastVerifier { mac, headers: parking_lot::RwLock::new(Vec::new()), leeway }
    }

    /// Remember the header segment of a token the full decoder has just accepted.
    pub(super) fn learn(&self, token: &str) {
        let Some(Parts { header, .. }) = split(token.as_bytes()) else { return };
        if self.headers.read().iter().any(|h| **h == *header) {
            return;
        }
        let mut w = self.headers.write();
        if w.len() < MAX_HEADERS && !w.iter().any(|h| **h == *header) {
            w.push(header.into());
        }
    }

    /// The token's claims if it is accepted here (see the module documentation), at `now`
    /// (seconds since the Unix epoch); `None` means "ask the full decoder".
    pub(super) fn accept(&self, token: &str, now: u64) -> Option<Claims> {
        let Parts { header, message, payload, signature } = split(token.as_bytes())?;
        if !self.headers.read().iter().any(|h| **h == *header) {
            return None;
        }
        let mut sig = [0u8; 32];
        if URL_SAFE_NO_PAD.decode_slice(signature, &mut sig).ok()? != sig.len() {
            return None;
        }
        let mut mac = self.mac.clone();
        mac.update(message);
        mac.verify_slice(&sig).ok()?;
        let json = URL_SAFE_NO_PAD.decode(payload).ok()?;
        let claims: Minted<'_> = serde_json::from_slice(&json).ok()?;
        if claims.exp < now.saturating_sub(self.leeway) {
            return None;
        }
        Some(Claims { sub: claims.sub.into_owned(), exp: claims.exp, role: claims.role.map(Cow::into_owned) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
    use proptest::prelude::*;

    const SECRET: &[u8] = b"the-fast-path-secret";
    const LEEWAY: u64 = 5;

    fn now() -> u64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs()
    }

    fn sign(alg: Algorithm, claims: &serde_json::Value, secret: &[u8]) -> String {
        jsonwebtoken::encode(&Header::new(alg), claims, &EncodingKey::from_secret(secret)).expect("encode")
    }

    /// The full decoder with the service's validation (see `TokenKeys::new`).
    fn full(token: &str) -> Option<Claims> {
        let mut v = Validation::new(Algorithm::HS256);
        v.leeway = LEEWAY;
        v.validate_nbf = true;
        v.set_required_spec_claims(&["exp", "sub"]);
        let d =
            jsonwebtoken::decode::<crate::auth::Claims>(token, &DecodingKey::from_secret(SECRET), &v).ok()?;
        Some(d.claims)
    }

    fn verifier() -> FastVerifier {
        let f = FastVerifier::new(SECRET, LEEWAY);
        // As in service: the first token is decoded in full, and its header learnt.
        let first = sign(Algorithm::HS256, &serde_json::json!({"sub": "1", "exp": now() + 60}), SECRET);
        assert!(full(&first).is_some());
        f.learn(&first);
        f
    }

    /// Tokens of every kind: minted ones, and ones that differ in claims, algorithm or key.
    fn token() -> impl Strategy<Value = String> {
        let claims = (
            prop_oneof![
                4 => any::<u64>().prop_map(|u| serde_json::json!(u.to_string())),
                1 => any::<u64>().prop_map(|u| serde_json::json!(u)),
                1 => "[a-z0-9\\\\\"]{0,6}".prop_map(|s| serde_json::json!(s)),
            ],
            prop_oneof![
                6 => (0u64..200).prop_map(|d| serde_json::json!(now() + d - 20)),
                1 => (0u64..20).prop_map(|d| serde_json::json!(now() + d - 10)),
                1 => Just(serde_json::json!(1.5e9)),
                1 => Just(serde_json::json!("never")),
            ],
            prop_oneof![
                3 => Just(None),
                2 => Just(Some(serde_json::json!("service"))),
                1 => Just(Some(serde_json::Value::Null)),
                1 => Just(Some(serde_json::json!(7))),
            ],
            prop_oneof![4 => Just(None), 1 => Just(Some(("aud", "x"))), 1 => Just(Some(("nbf", "1")))],
            proptest::bool::weighted(0.1),
        )
            .prop_map(|(sub, exp, role, extra, drop_sub)| {
                let mut c = serde_json::json!({ "exp": exp });
                if !drop_sub {
                    c["sub"] = sub;
                }
                if let Some(r) = role {
                    c["role"] = r;
                }
                if let Some((k, v)) = extra {
                    c[k] = serde_json::json!(v);
                }
                c
            });
        let alg = prop_oneof![
            4 => Just(Algorithm::HS256),
            1 => Just(Algorithm::HS384),
        ];
        let key = prop_oneof![4 => Just(SECRET.to_vec()), 1 => Just(b"another-secret".to_vec())];
        let flip = proptest::option::weighted(0.3, (any::<prop::sample::Index>(), any::<u8>()));
        (claims, alg, key, flip).prop_map(|(c, alg, key, flip)| {
            let mut t = sign(alg, &c, &key).into_bytes();
            if let Some((at, b)) = flip {
                let i = at.index(t.len());
                t[i] = b"ABCxyz019-_.="[usize::from(b) % 13];
            }
            String::from_utf8(t).expect("ascii")
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// Whatever the fast path accepts, the full decoder accepts with the same claims.
        #[test]
        fn the_fast_path_agrees_with_jsonwebtoken(t in token()) {
            let f = verifier();
            if let Some(a) = f.accept(&t, now()) {
                prop_assert_eq!(Some(a), full(&t));
            }
        }
    }

    #[test]
    fn minted_tokens_take_the_fast_path() {
        let f = verifier();
        for (sub, role) in [("42", None), ("7", Some("service"))] {
            let mut c = serde_json::json!({"sub": sub, "exp": now() + 60});
            if let Some(r) = role {
                c["role"] = serde_json::json!(r);
            }
            let t = sign(Algorithm::HS256, &c, SECRET);
            let want = Claims { sub: sub.into(), exp: now() + 60, role: role.map(Into::into) };
            assert_eq!(f.accept(&t, now()).as_ref(), Some(&want));
            assert_eq!(full(&t).as_ref(), Some(&want));
        }
        // Not before its header is learnt; never past expiry plus leeway, nor with another key.
        let t = sign(Algorithm::HS256, &serde_json::json!({"sub": "1", "exp": now() + 60}), SECRET);
        assert!(FastVerifier::new(SECRET, LEEWAY).accept(&t, now()).is_none());
        let old = sign(Algorithm::HS256, &serde_json::json!({"sub": "1", "exp": now() - 6}), SECRET);
        assert!(f.accept(&old, now()).is_none());
        let edge = sign(Algorithm::HS256, &serde_json::json!({"sub": "1", "exp": now() - 5}), SECRET);
        assert_eq!(f.accept(&edge, now()).is_some(), full(&edge).is_some());
        let other = sign(Algorithm::HS256, &serde_json::json!({"sub": "1", "exp": now() + 60}), b"other");
        assert!(f.accept(&other, now()).is_none());
    }
}
