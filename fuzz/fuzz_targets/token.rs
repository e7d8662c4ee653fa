//! Bearer tokens (`likewise_http::auth::TokenKeys`): JWT HS256.
//!
//! Input: one mode byte, then
//! - mode 0: a token string. Verifying never panics and accepts only the tokens this target
//!   minted with the key (the seed corpus holds exactly those): any other string that verifies,
//!   such as a mutated seed, is a forgery. No string verifies under another key.
//! - mode 1: claims bytes, signed here with the right key and an HS256 header (a "minted"
//!   token with arbitrary claims, to reach the claim checks behind the signature). Never
//!   panics; a token that verifies has a string `sub`, an unexpired numeric `exp`, and
//!   `caller` names the user in `sub` with the role in `role`.
//! - mode 2: claims bytes signed with the right key under any other `alg` header (or a wrong
//!   key, or none at all): always rejected, by `verify` and by `caller`.
//!
//! `caller` runs the service's fast accept path (`auth/fast.rs`) and its cache in front of
//! `verify`: modes 1 and 2 check it never accepts what `verify` refuses.
#![no_main]

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use libfuzzer_sys::fuzz_target;
use likewise_core::ids::{UserId, parse_id};
use likewise_http::auth::TokenKeys;
use sha2::{Sha256, Sha384, Sha512};
use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The key the seed corpus was minted with (see README.md).
const KEY: &[u8] = b"fuzz-token-secret";
const HS256_HEADER: &str = r#"{"alg":"HS256","typ":"JWT"}"#;
/// Claims of the seed tokens (exp: 2100-01-01; the last one expired in 2001).
const SEED_CLAIMS: [&str; 4] = [
    r#"{"sub":"42","exp":4102444800}"#,
    r#"{"sub":"1001","exp":4102444800,"role":"service"}"#,
    r#"{"sub":"18446744073709551615","exp":4102444800}"#,
    r#"{"sub":"7","exp":1000000000}"#,
];
/// Leeway the service allows on `exp`.
const LEEWAY: u64 = 5;

/// Long enough for the seeds (which expire in 2100); `auth.max_token_ttl` in the service.
const MAX_TTL: Duration = Duration::from_secs(100 * 365 * 86_400);
static KEYS: LazyLock<TokenKeys> = LazyLock::new(|| TokenKeys::new(KEY).with_max_ttl(MAX_TTL));
static OTHER: LazyLock<TokenKeys> = LazyLock::new(|| TokenKeys::new(b"another-secret"));

fn b64(b: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(b)
}

fn sign(key: &[u8], alg: &str, header: &str, claims: &[u8]) -> String {
    let input = format!("{}.{}", b64(header.as_bytes()), b64(claims));
    let mac = match alg {
        "HS384" => {
            let mut m = <Hmac<Sha384> as Mac>::new_from_slice(key).expect("key");
            m.update(input.as_bytes());
            m.finalize().into_bytes().to_vec()
        }
        "HS512" => {
            let mut m = <Hmac<Sha512> as Mac>::new_from_slice(key).expect("key");
            m.update(input.as_bytes());
            m.finalize().into_bytes().to_vec()
        }
        "none" => Vec::new(),
        _ => {
            let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("key");
            m.update(input.as_bytes());
            m.finalize().into_bytes().to_vec()
        }
    };
    format!("{input}.{}", b64(&mac))
}

/// Every token minted with `KEY`: the seeds, and one from `TokenKeys::mint` itself.
static MINTED: LazyLock<Vec<String>> = LazyLock::new(|| {
    let mut v: Vec<String> =
        SEED_CLAIMS.iter().map(|c| sign(KEY, "HS256", HS256_HEADER, c.as_bytes())).collect();
    v.push(KEYS.mint(UserId(5), false, Duration::from_secs(3600)).expect("mint"));
    // The property below is not vacuous: minted, unexpired tokens do verify.
    for t in [&v[0], &v[1], &v[2], &v[4]] {
        assert!(KEYS.verify(t).is_ok(), "a minted token failed to verify: {t}");
    }
    assert!(KEYS.verify(&v[3]).is_err(), "an expired token verified");
    v
});

#[derive(serde::Deserialize)]
struct SubExp {
    sub: serde_json::Value,
    exp: serde_json::Value,
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fuzz_target!(|data: &[u8]| {
    let minted = &*MINTED;
    let Some((&mode, rest)) = data.split_first() else { return };
    match mode % 3 {
        0 => {
            let s = String::from_utf8_lossy(rest);
            if KEYS.verify(&s).is_ok() {
                assert!(minted.iter().any(|m| *m == s), "a token not minted with the key verified: {s:?}");
            }
            if KEYS.caller(&s).is_ok() {
                assert!(
                    minted.iter().any(|m| *m == s),
                    "a token not minted with the key was accepted: {s:?}"
                );
            }
            assert!(OTHER.verify(&s).is_err(), "a token verified under another key: {s:?}");
        }
        1 => {
            let token = sign(KEY, "HS256", HS256_HEADER, rest);
            let Ok(claims) = KEYS.verify(&token) else {
                // What the full decoder refuses, `caller` (its fast path, its cache) refuses too.
                assert!(KEYS.caller(&token).is_err(), "caller accepted what verify refused: {token}");
                return;
            };
            // Only the claims the service reads: serde skips the others without fully checking
            // them (invalid UTF-8 in a string, a number out of range), and so may the verifier.
            let json: SubExp = serde_json::from_slice(rest).expect("accepted claims have sub and exp");
            assert_eq!(json.sub.as_str(), Some(claims.sub.as_str()), "sub");
            assert_eq!(json.exp.as_u64(), Some(claims.exp), "exp");
            assert!(claims.exp + LEEWAY >= now(), "an expired token verified: exp {}", claims.exp);
            assert!(claims.exp <= now() + MAX_TTL.as_secs() + LEEWAY, "an overlong token verified: exp {}", claims.exp);
            assert!(OTHER.verify(&token).is_err(), "verified under another key");
            if let Ok(c) = KEYS.caller(&token) {
                assert_eq!(parse_id(&claims.sub).ok(), Some(c.user.0), "caller is the sub");
                assert_eq!(c.service, claims.role.as_deref() == Some("service"), "role");
            } else {
                assert!(parse_id(&claims.sub).is_err(), "a verified token with a valid sub was refused");
            }
        }
        _ => {
            const ALGS: [&str; 7] = ["none", "HS384", "HS512", "RS256", "ES256", "hs256", "HS256 "];
            let pick = rest.first().copied().unwrap_or(0);
            let claims = rest.get(1..).unwrap_or_default();
            let alg = ALGS[usize::from(pick) % ALGS.len()];
            let header = format!(r#"{{"alg":"{alg}","typ":"JWT"}}"#);
            let forged = sign(KEY, alg, &header, claims);
            assert!(KEYS.verify(&forged).is_err(), "alg {alg:?} accepted: {forged}");
            assert!(KEYS.caller(&forged).is_err(), "alg {alg:?} accepted by caller: {forged}");
            // And the right header with a wrong key.
            let wrong = sign(b"not-the-key", "HS256", HS256_HEADER, claims);
            assert!(KEYS.verify(&wrong).is_err(), "a token signed with the wrong key verified");
            assert!(KEYS.caller(&wrong).is_err(), "caller accepted a token signed with the wrong key");
            // An HS256 token with its signature cut off.
            let real = sign(KEY, "HS256", HS256_HEADER, claims);
            let unsigned = &real[..=real.rfind('.').expect("dot")];
            assert!(KEYS.verify(unsigned).is_err(), "an unsigned token verified");
            assert!(KEYS.caller(unsigned).is_err(), "caller accepted an unsigned token");
        }
    }
});
