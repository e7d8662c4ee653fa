//! Tokens from an identity provider, against the real binary: `likewise serve` with a
//! configuration file naming a JWKS file, keys made in the test (RS256, ES256, EdDSA), and
//! the file rewritten as a key rotation does it (publish the new key, later remove the old
//! one) while the server runs.

mod common;
#[path = "../../http/src/auth/test_keys.rs"]
mod test_keys;

use common::proc::{Client, Server, signal, start_command, start_with};
use http_body_util::BodyExt;
use jsonwebtoken::Algorithm;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use test_keys::{TestKey, jwks, replace, unix_now};

const ISSUER: &str = "https://idp.test/";
const AUDIENCE: &str = "likewise";

/// A server stopped (SIGTERM) when dropped, so a failing test leaves no process behind.
struct Running(Option<Server>);

impl Running {
    fn base(&self) -> &str {
        self.0.as_ref().map(|s| s.base.as_str()).unwrap_or_default()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut s) = self.0.take() {
            signal(&s.child, "-TERM");
            let _ = s.child.wait();
        }
    }
}

/// Claims the test identity provider puts in a token for `user`.
fn claims(user: u64) -> Value {
    json!({"sub": user.to_string(), "exp": unix_now() + 600, "iss": ISSUER, "aud": AUDIENCE})
}

/// `GET /v1/me/settings` with `token`: any valid token may read its own settings.
async fn settings(c: &Client, base: &str, token: &str) -> (u16, Value) {
    let req = hyper::Request::get(format!("{base}/v1/me/settings"))
        .header("authorization", format!("Bearer {token}"))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .expect("request");
    let resp = c.http.request(req).await.expect("send");
    let st = resp.status().as_u16();
    let b = resp.into_body().collect().await.expect("body").to_bytes();
    (st, serde_json::from_slice(&b).unwrap_or(Value::Null))
}

/// Assert a 401 with the API's JSON error body.
async fn refused(c: &Client, base: &str, token: &str, why: &str) {
    let (st, v) = settings(c, base, token).await;
    assert_eq!((st, v["error"].as_str()), (401, Some("unauthenticated")), "{why}: {v}");
    assert!(v["message"].is_string(), "{why}: {v}");
}

/// Wait until `token` gets `want` (the server looks at the file about once a second).
async fn eventually(c: &Client, base: &str, token: &str, want: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (st, v) = settings(c, base, token).await;
        if st == want {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: still {st} {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A configuration file for `jwks_file` with the test issuer and audience.
fn config_file(dir: &Path, jwks_file: &Path) -> PathBuf {
    let path = dir.join("likewise.toml");
    let toml = format!(
        "[auth]\njwks_file = {:?}\nissuer = {ISSUER:?}\naudience = {AUDIENCE:?}\n",
        jwks_file.display().to_string()
    );
    std::fs::write(&path, toml).expect("write config");
    path
}

fn likewise(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_likewise"))
        .args(args)
        .env_remove("LIKEWISE__AUTH__SECRET")
        .output()
        .expect("run likewise")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_provider_keys_rotate_without_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b, e) = (
        TestKey::generate(Algorithm::RS256, "idp-a"),
        TestKey::generate(Algorithm::ES256, "idp-b"),
        TestKey::generate(Algorithm::EdDSA, "idp-e"),
    );
    let jwks_file = dir.path().join("jwks.json");
    replace(&jwks_file, &jwks(&[&a.jwk]));
    let config = config_file(dir.path(), &jwks_file);
    let (config, data) = (config.display().to_string(), dir.path().join("data").display().to_string());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_likewise"));
    cmd.args(["serve", "--config", &config, "--listen", "127.0.0.1:0", "--data-dir", &data])
        .env_remove("LIKEWISE__AUTH__SECRET");
    let server = Running(Some(start_command(cmd)));
    let (c, base) = (Client::new(), server.base().to_string());

    let (ta, tb, te) = (a.sign(&claims(1)), b.sign(&claims(2)), e.sign(&claims(3)));
    let (st, v) = settings(&c, &base, &ta).await;
    assert_eq!(st, 200, "RS256 token of the published key: {v}");
    refused(&c, &base, &tb, "a key not yet published").await;
    refused(&c, &base, &a.sign_as(Algorithm::RS384, "idp-a", &claims(1)), "another algorithm").await;
    let mut no_iss = claims(1);
    no_iss.as_object_mut().expect("object").remove("iss");
    refused(&c, &base, &a.sign(&no_iss), "no issuer").await;
    let mut other_aud = claims(1);
    other_aud["aud"] = json!("another-service");
    refused(&c, &base, &a.sign(&other_aud), "another audience").await;
    // No auth.secret: HS256 tokens are refused, and the command line has nothing to sign with.
    let hs = c.keys.mint(likewise_core::ids::UserId(1), false, Duration::from_secs(600)).expect("mint");
    refused(&c, &base, &hs, "HS256 without auth.secret").await;
    let out = likewise(&["token", "1", "--config", &config, "--data-dir", &data]);
    assert!(!out.status.success(), "likewise token without a secret");
    assert!(String::from_utf8_lossy(&out.stderr).contains("auth.jwks_file"));

    // Publish B and E beside A.
    replace(&jwks_file, &jwks(&[&a.jwk, &b.jwk, &e.jwk]));
    eventually(&c, &base, &tb, 200, "ES256 token once its key is published").await;
    assert_eq!(settings(&c, &base, &te).await.0, 200, "EdDSA token");
    assert_eq!(settings(&c, &base, &ta).await.0, 200, "A still");

    // Remove A: its token, accepted (and cached) a moment ago, is refused.
    replace(&jwks_file, &jwks(&[&b.jwk, &e.jwk]));
    eventually(&c, &base, &ta, 401, "A after its key is removed").await;
    refused(&c, &base, &ta, "A after its key is removed").await;
    assert_eq!(settings(&c, &base, &tb).await.0, 200, "B still");
    assert_eq!(settings(&c, &base, &te).await.0, 200, "E still");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secret_still_signs_beside_the_identity_provider() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = TestKey::generate(Algorithm::EdDSA, "idp-a");
    let jwks_file = dir.path().join("jwks.json");
    replace(&jwks_file, &jwks(&[&a.jwk_without_alg()]));
    let (jwks_path, data) = (jwks_file.display().to_string(), dir.path().display().to_string());
    let server = Running(Some(start_with(
        &["serve", "--listen", "127.0.0.1:0", "--data-dir", &data],
        &[("LIKEWISE__AUTH__JWKS_FILE", &jwks_path)],
    )));
    let (c, base) = (Client::new(), server.base().to_string());
    let (st, v) = c.call(&base, hyper::Method::GET, "/v1/me/settings", 5, false, "").await.expect("call");
    assert_eq!(st, 200, "HS256 token signed with auth.secret: {v}");
    let (st, v) = settings(&c, &base, &a.sign(&json!({"sub": "6", "exp": unix_now() + 600}))).await;
    assert_eq!(st, 200, "EdDSA token without issuer or audience configured: {v}");
    refused(&c, &base, &a.sign(&json!({"sub": "6", "exp": unix_now() + 600, "aud": "x"})), "an audience")
        .await;

    // A JWKS file that cannot be used stops the server at start-up with a clear error.
    replace(&jwks_file, r#"{"keys": [{"kty": "oct", "kid": "k", "k": "c2VjcmV0"}]}"#);
    let other = dir.path().join("other").display().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_likewise"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir", &other])
        .env("LIKEWISE__AUTH__SECRET", common::SECRET)
        .env("LIKEWISE__AUTH__JWKS_FILE", &jwks_path)
        .output()
        .expect("run likewise");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("auth.jwks_file") && err.contains("no usable key"), "{err}");
}
