//! Tokens from a test identity provider: keys made in the test, a JWKS file in a temporary
//! directory rewritten the way key rotation does.

use super::*;
use crate::auth::test_keys::{TestKey, jwks, replace, unix_now};
use crate::auth::{Caller, TokenKeys};
use likewise_core::ids::UserId;
use serde_json::json;
use std::sync::OnceLock;

struct Keys {
    rsa: TestKey,
    ec: TestKey,
    ed: TestKey,
    rsa2: TestKey,
}

/// Keys made once for all the tests here (RSA key generation takes a moment).
fn keys() -> &'static Keys {
    static KEYS: OnceLock<Keys> = OnceLock::new();
    KEYS.get_or_init(|| Keys {
        rsa: TestKey::generate(Algorithm::RS256, "rsa-1"),
        ec: TestKey::generate(Algorithm::ES256, "ec-1"),
        ed: TestKey::generate(Algorithm::EdDSA, "ed-1"),
        rsa2: TestKey::generate(Algorithm::RS256, "rsa-2"),
    })
}

/// A JWKS file holding `keys`, in a fresh directory.
fn file(keys: &[&serde_json::Value]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("jwks.json");
    replace(&path, &jwks(keys));
    (dir, path)
}

/// Keys of the identity provider at `path`, looking at the file on every request.
fn provider(path: &Path, expected: Expected) -> TokenKeys {
    TokenKeys::from_jwks(Jwks::open(path, expected).expect("open").with_check_interval(Duration::ZERO))
}

fn claims(sub: &str) -> serde_json::Value {
    json!({"sub": sub, "exp": unix_now() + 600})
}

/// The 401's message.
fn refused(r: Result<Caller, ApiError>) -> String {
    match r {
        Ok(c) => panic!("accepted as {c:?}"),
        Err(e) => {
            assert_eq!(e.status().as_u16(), 401, "{e:?}");
            format!("{e:?}")
        }
    }
}

#[test]
fn each_algorithm_verifies_with_the_key_its_kid_names() {
    let k = keys();
    // The EC key's algorithm is derived from kty and crv; the others name theirs.
    let (_dir, path) = file(&[&k.rsa.jwk, &k.ec.jwk_without_alg(), &k.ed.jwk]);
    let keys = provider(&path, Expected::default());
    for (key, user) in [(&k.rsa, 11), (&k.ec, 12), (&k.ed, 13)] {
        let c = keys.caller(&key.sign(&claims(&user.to_string()))).expect("accepted");
        assert_eq!((c.user, c.service), (UserId(user), false), "{:?}", key.alg);
        // Cached: the same token again is the same caller.
        assert_eq!(keys.caller(&key.sign(&claims(&user.to_string()))).expect("again").user, UserId(user));
    }
    let mut service = claims("14");
    service["role"] = json!("service");
    assert!(keys.caller(&k.ed.sign(&service)).expect("service").service);
    refused(keys.caller(&k.rsa.sign(&json!({"exp": unix_now() + 60}))));
}

#[test]
fn an_unknown_or_missing_kid_is_refused() {
    let k = keys();
    let (_dir, path) = file(&[&k.rsa.jwk]);
    let keys = provider(&path, Expected::default());
    assert!(refused(keys.caller(&k.rsa2.sign(&claims("1")))).contains("unknown key"));
    // A known kid on a token signed by another key fails its signature.
    assert!(
        refused(keys.caller(&k.rsa2.sign_as(Algorithm::RS256, "rsa-1", &claims("1")))).contains("invalid")
    );
    let mut h = Header::new(Algorithm::RS256);
    h.kid = None;
    let no_kid = k.rsa.sign_as(Algorithm::RS256, "rsa-1", &claims("1"));
    let (_, rest) = no_kid.split_once('.').expect("three parts");
    let header = base64::Engine::encode(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        serde_json::to_vec(&h).expect("header"),
    );
    assert!(refused(keys.caller(&format!("{header}.{rest}"))).contains("kid"));
}

#[test]
fn a_token_whose_algorithm_is_not_its_keys_is_refused() {
    let k = keys();
    let (_dir, path) = file(&[&k.rsa.jwk, &k.ec.jwk]);
    let keys = provider(&path, Expected::default());
    // The same RSA key, another RSA algorithm.
    let rs384 = k.rsa.sign_as(Algorithm::RS384, "rsa-1", &claims("1"));
    assert!(refused(keys.caller(&rs384)).contains("does not match"));
    // An ES256 token naming the RSA key.
    let es = k.ec.sign_as(Algorithm::ES256, "rsa-1", &claims("1"));
    assert!(refused(keys.caller(&es)).contains("does not match"));
    // HS256 keyed with the RSA key's public modulus (the classic confusion): no secret here.
    let n = k.rsa.jwk["n"].as_str().expect("n");
    let mut h = Header::new(Algorithm::HS256);
    h.kid = Some("rsa-1".into());
    let hs = jsonwebtoken::encode(&h, &claims("1"), &jsonwebtoken::EncodingKey::from_secret(n.as_bytes()))
        .expect("sign");
    assert!(refused(keys.caller(&hs)).contains("HS256"));
}

#[test]
fn issuer_and_audience_when_set_are_required_and_checked() {
    let k = keys();
    let (_dir, path) = file(&[&k.ec.jwk]);
    let expected = Expected { issuer: Some("https://idp.test".into()), audience: Some("likewise".into()) };
    let keys = provider(&path, expected);
    let with = |iss: Option<&str>, aud: Option<serde_json::Value>| {
        let mut c = claims("5");
        if let Some(i) = iss {
            c["iss"] = json!(i);
        }
        if let Some(a) = aud {
            c["aud"] = a;
        }
        keys.caller(&k.ec.sign(&c))
    };
    assert!(with(Some("https://idp.test"), Some(json!("likewise"))).is_ok());
    assert!(with(Some("https://idp.test"), Some(json!(["other", "likewise"]))).is_ok());
    assert!(refused(with(None, Some(json!("likewise")))).contains("iss"));
    assert!(refused(with(Some("https://evil.test"), Some(json!("likewise")))).contains("issuer"));
    assert!(refused(with(Some("https://idp.test"), None)).contains("aud"));
    assert!(refused(with(Some("https://idp.test"), Some(json!("other")))).contains("audience"));
    // Unset, neither is required; a token naming an audience is still refused (RFC 7519).
    let open = provider(&path, Expected::default());
    assert!(open.caller(&k.ec.sign(&claims("5"))).is_ok());
    let mut c = claims("5");
    c["aud"] = json!("someone-else");
    assert!(refused(open.caller(&k.ec.sign(&c))).contains("audience"));
}

#[test]
fn expiry_nbf_and_the_maximum_lifetime_hold_for_identity_provider_tokens() {
    let k = keys();
    let (_dir, path) = file(&[&k.ed.jwk]);
    let keys = provider(&path, Expected::default()).with_max_ttl(Duration::from_secs(3600));
    let t = unix_now();
    assert!(refused(keys.caller(&k.ed.sign(&json!({"sub": "1", "exp": t - 10})))).contains("expired"));
    assert!(keys.caller(&k.ed.sign(&json!({"sub": "1", "exp": t - 2}))).is_ok(), "within the leeway");
    assert!(
        refused(keys.caller(&k.ed.sign(&json!({"sub": "1", "exp": t + 600, "nbf": t + 300}))))
            .contains("nbf")
    );
    assert!(
        refused(keys.caller(&k.ed.sign(&json!({"sub": "1", "exp": t + 7200})))).contains("max_token_ttl")
    );
    assert!(refused(keys.caller(&k.ed.sign(&json!({"sub": "alice", "exp": t + 60})))).contains("user ID"));
}

#[test]
fn rotation_adds_a_key_then_removes_the_old_one_without_a_restart() {
    let k = keys();
    let (_dir, path) = file(&[&k.rsa.jwk]);
    let keys = provider(&path, Expected::default());
    let (a, b) = (k.rsa.sign(&claims("1")), k.rsa2.sign(&claims("2")));
    assert_eq!(keys.caller(&a).expect("A").user, UserId(1));
    assert!(refused(keys.caller(&b)).contains("unknown key"));

    replace(&path, &jwks(&[&k.rsa.jwk, &k.rsa2.jwk]));
    assert_eq!(keys.caller(&b).expect("B after it is published").user, UserId(2));
    assert_eq!(keys.caller(&a).expect("A still").user, UserId(1));

    replace(&path, &jwks(&[&k.rsa2.jwk]));
    // A was verified and cached; its key is gone, so it is refused all the same.
    assert!(refused(keys.caller(&a)).contains("unknown key"));
    assert_eq!(keys.caller(&b).expect("B still").user, UserId(2));
}

#[test]
fn the_file_is_looked_at_once_per_interval() {
    let k = keys();
    let (_dir, path) = file(&[&k.rsa.jwk]);
    let jwks_ =
        Jwks::open(&path, Expected::default()).expect("open").with_check_interval(Duration::from_secs(3600));
    let keys = TokenKeys::from_jwks(jwks_.clone());
    let b = k.rsa2.sign(&claims("2"));
    assert_eq!(jwks_.generation(), 1, "the first look finds the file as opened");
    replace(&path, &jwks(&[&k.rsa.jwk, &k.rsa2.jwk]));
    assert!(refused(keys.caller(&b)).contains("unknown key"), "not looked at again within the interval");
    assert_eq!(jwks_.key_ids(), ["rsa-1"]);
}

#[test]
fn a_broken_rewrite_keeps_the_keys_and_an_identical_one_keeps_the_generation() {
    let k = keys();
    let (_dir, path) = file(&[&k.ec.jwk]);
    let jwks_ = Jwks::open(&path, Expected::default()).expect("open").with_check_interval(Duration::ZERO);
    let keys = TokenKeys::from_jwks(jwks_.clone());
    let t = k.ec.sign(&claims("3"));
    assert!(keys.caller(&t).is_ok());
    replace(&path, r#"{"keys": [{"kty": "EC", "#);
    assert_eq!(jwks_.generation(), 1);
    assert!(keys.caller(&t).is_ok(), "a half-written file keeps the previous keys");
    replace(&path, &jwks(&[&k.ec.jwk]));
    assert_eq!(jwks_.generation(), 1, "the same document again is the same key set");
    replace(&path, &jwks(&[]));
    assert_eq!(jwks_.generation(), 2);
    assert!(refused(keys.caller(&t)).contains("unknown key"), "an empty set revokes every key");
}

#[test]
fn keys_that_cannot_verify_here_are_skipped_and_a_file_of_none_is_refused() {
    let k = keys();
    let mut enc = k.rsa2.jwk.clone();
    enc["use"] = json!("enc");
    let mut ps = k.rsa2.jwk.clone();
    ps["alg"] = json!("PS256");
    ps["kid"] = json!("ps");
    let mut misfit = k.ec.jwk.clone();
    misfit["alg"] = json!("RS256");
    misfit["kid"] = json!("misfit");
    let mut no_kid = k.ed.jwk.clone();
    no_kid.as_object_mut().expect("object").remove("kid");
    let oct = json!({"kty": "oct", "kid": "oct", "alg": "HS256", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQ"});
    let p384 = json!({"kty": "EC", "crv": "P-384", "kid": "p384", "x": "AA", "y": "AA"});
    let odd = json!({"kty": "XYZ", "kid": "odd"});
    let mut dup = k.ed.jwk.clone();
    dup["kid"] = json!("ec-1");
    let junk = [&enc, &ps, &misfit, &no_kid, &oct, &p384, &odd];
    let mut all = junk.to_vec();
    all.extend([&k.ec.jwk, &dup]);
    let (_dir, path) = file(&all);
    let jwks_ = Jwks::open(&path, Expected::default()).expect("open");
    assert_eq!(jwks_.key_ids(), ["ec-1"]);
    let keys = TokenKeys::from_jwks(jwks_);
    assert!(keys.caller(&k.ec.sign(&claims("1"))).is_ok(), "the first key of a kid counts");
    assert!(
        refused(keys.caller(&k.ed.sign_as(Algorithm::EdDSA, "ec-1", &claims("1"))))
            .contains("does not match")
    );

    let (_d, none) = file(&junk);
    assert!(matches!(Jwks::open(&none, Expected::default()), Err(JwksError::NoUsableKey { .. })));
    let (_d, bad) = file(&[]);
    replace(&bad, "not json");
    assert!(matches!(Jwks::open(&bad, Expected::default()), Err(JwksError::Parse { .. })));
    assert!(matches!(
        Jwks::open(bad.with_extension("gone"), Expected::default()),
        Err(JwksError::Read { .. })
    ));
}

#[test]
fn the_secret_and_the_identity_provider_verify_side_by_side() {
    let k = keys();
    let (_dir, path) = file(&[&k.rsa.jwk]);
    let jwks_ = Jwks::open(&path, Expected::default()).expect("open");
    let both = TokenKeys::new(b"a-secret-of-sixteen-or-more").with_jwks(jwks_.clone());
    let minted = both.mint(UserId(8), true, Duration::from_secs(60)).expect("mint");
    assert!(both.caller(&minted).expect("HS256").service);
    assert_eq!(both.caller(&k.rsa.sign(&claims("9"))).expect("RS256").user, UserId(9));
    assert_eq!(both.verify(&k.rsa.sign(&claims("9"))).expect("verify").sub, "9");

    let only = TokenKeys::from_jwks(jwks_);
    assert!(only.mint(UserId(8), false, Duration::from_secs(60)).is_err(), "nothing to sign with");
    assert!(refused(only.caller(&minted)).contains("HS256"));
    // Without keys an asymmetric token is simply invalid, as before.
    let secret_only = TokenKeys::new(b"a-secret-of-sixteen-or-more");
    assert!(refused(secret_only.caller(&k.rsa.sign(&claims("9")))).contains("invalid"));
}

#[test]
fn an_issuer_given_as_an_array_is_refused() {
    let k = keys();
    let (_dir, path) = file(&[&k.ec.jwk]);
    let expected = Expected { issuer: Some("https://idp.test".into()), audience: None };
    let keys = provider(&path, expected);
    let mut c = claims("5");
    c["iss"] = json!("https://idp.test");
    assert!(keys.caller(&k.ec.sign(&c)).is_ok());
    // RFC 7519, 4.1.1: `iss` is one StringOrURI, never a list that merely contains ours.
    c["iss"] = json!(["https://idp.test"]);
    assert!(refused(keys.caller(&k.ec.sign(&c))).contains("iss"));
    c["iss"] = json!(["https://idp.test", "https://evil.test"]);
    assert!(refused(keys.caller(&k.ec.sign(&c))).contains("iss"));
    let open = provider(&path, Expected::default());
    assert!(refused(open.caller(&k.ec.sign(&c))).contains("iss"), "malformed even when not checked");
}

#[test]
fn hs256_tokens_naming_the_configured_audience_are_accepted() {
    let k = keys();
    let (_dir, path) = file(&[&k.ec.jwk]);
    let expected = Expected { issuer: Some("https://idp.test".into()), audience: Some("likewise".into()) };
    let jwks_ = Jwks::open(&path, expected).expect("open");
    let keys = TokenKeys::new(b"a-secret-of-sixteen-or-more").with_jwks(jwks_);
    let secret = jsonwebtoken::EncodingKey::from_secret(b"a-secret-of-sixteen-or-more");
    let hs = |aud: Option<serde_json::Value>| {
        let mut c = claims("6");
        if let Some(a) = aud {
            c["aud"] = a;
        }
        keys.caller(&jsonwebtoken::encode(&Header::new(Algorithm::HS256), &c, &secret).expect("sign"))
    };
    assert_eq!(hs(Some(json!("likewise"))).expect("its audience").user, UserId(6));
    assert!(hs(Some(json!(["other", "likewise"]))).is_ok(), "among its values");
    assert!(hs(None).is_ok(), "our own tokens need no aud");
    assert!(refused(hs(Some(json!("other")))).contains("audience"));
}

#[test]
fn rsa_keys_shorter_than_2048_bits_are_skipped() {
    let k = keys();
    let short = TestKey::generate_rsa(1024, "rsa-1024");
    let (_dir, path) = file(&[&short.jwk, &k.ec.jwk]);
    let jwks_ = Jwks::open(&path, Expected::default()).expect("open");
    assert_eq!(jwks_.key_ids(), ["ec-1"]);
    let keys = TokenKeys::from_jwks(jwks_);
    assert!(refused(keys.caller(&short.sign(&claims("1")))).contains("unknown key"));
    let (_d, only) = file(&[&short.jwk]);
    assert!(matches!(Jwks::open(&only, Expected::default()), Err(JwksError::NoUsableKey { .. })));
    let (_d, long) = file(&[&k.rsa.jwk]);
    assert_eq!(Jwks::open(&long, Expected::default()).expect("2048 bits").key_ids(), ["rsa-1"]);
}

#[test]
fn a_fractional_exp_is_accepted() {
    let k = keys();
    let (_dir, path) = file(&[&k.ed.jwk]);
    let keys = provider(&path, Expected::default());
    let t = unix_now();
    let c = keys.caller(&k.ed.sign(&json!({"sub": "1", "exp": t as f64 + 600.75}))).expect("NumericDate");
    assert_eq!(c.expires_at, t + 600, "rounded down: never later than the token says");
    assert!(
        refused(keys.caller(&k.ed.sign(&json!({"sub": "1", "exp": t as f64 - 10.5})))).contains("expired")
    );
}
