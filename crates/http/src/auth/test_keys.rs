//! Test keys standing in for an identity provider's: key pairs made by the `openssl` command
//! line tool, the private half kept to sign tokens, the public half published as a JWK.
//! Shared by the unit tests beside `jwks.rs` and the black-box test `crates/cli/tests/jwks.rs`
//! (which includes this file by path).
#![allow(dead_code)]

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// One signing key of the test identity provider.
pub struct TestKey {
    /// Its key ID.
    pub kid: String,
    /// The algorithm it signs with.
    pub alg: Algorithm,
    encoding: EncodingKey,
    /// The public key as a JWK, with `kid` and `alg`.
    pub jwk: serde_json::Value,
}

/// Run `openssl args`, feeding `input`, and return its standard output.
fn openssl(args: &[&str], input: &[u8]) -> Vec<u8> {
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run openssl");
    child.stdin.take().expect("stdin").write_all(input).expect("write to openssl");
    let out = child.wait_with_output().expect("openssl output");
    assert!(out.status.success(), "openssl {args:?} failed");
    out.stdout
}

impl TestKey {
    /// A fresh key pair for `alg` (RS256, ES256 or EdDSA) named `kid`.
    pub fn generate(alg: Algorithm, kid: &str) -> TestKey {
        let (encoding, mut jwk) = match alg {
            Algorithm::RS256 => {
                let pem = openssl(&["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"], b"");
                // jsonwebtoken signs RSA with a PKCS#1 DER key.
                let der = openssl(&["rsa", "-traditional", "-outform", "DER"], &pem);
                let key = EncodingKey::from_rsa_der(&der);
                let jwk = Jwk::from_encoding_key(&key, alg).expect("rsa jwk");
                (key, serde_json::to_value(jwk).expect("jwk json"))
            }
            Algorithm::ES256 => {
                let pem =
                    openssl(&["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"], b"");
                let der = openssl(&["pkcs8", "-topk8", "-nocrypt", "-outform", "DER"], &pem);
                let key = EncodingKey::from_ec_der(&der);
                let jwk = Jwk::from_encoding_key(&key, alg).expect("ec jwk");
                (key, serde_json::to_value(jwk).expect("jwk json"))
            }
            Algorithm::EdDSA => {
                let der = openssl(&["genpkey", "-algorithm", "ed25519", "-outform", "DER"], b"");
                let spki = openssl(&["pkey", "-inform", "DER", "-pubout", "-outform", "DER"], &der);
                // The SubjectPublicKeyInfo of an Ed25519 key ends with the 32 raw key bytes.
                let x = URL_SAFE_NO_PAD.encode(&spki[spki.len() - 32..]);
                let jwk = serde_json::json!({"kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "x": x});
                (EncodingKey::from_ed_der(&der), jwk)
            }
            other => panic!("no test keys for {other:?}"),
        };
        jwk["kid"] = serde_json::json!(kid);
        TestKey { kid: kid.into(), alg, encoding, jwk }
    }

    /// A fresh RS256 key pair of `bits` bits named `kid` (for keys too short to trust).
    pub fn generate_rsa(bits: u32, kid: &str) -> TestKey {
        let opt = format!("rsa_keygen_bits:{bits}");
        let pem = openssl(&["genpkey", "-algorithm", "RSA", "-pkeyopt", &opt], b"");
        let der = openssl(&["rsa", "-traditional", "-outform", "DER"], &pem);
        let encoding = EncodingKey::from_rsa_der(&der);
        let jwk = Jwk::from_encoding_key(&encoding, Algorithm::RS256).expect("rsa jwk");
        let mut jwk = serde_json::to_value(jwk).expect("jwk json");
        jwk["kid"] = serde_json::json!(kid);
        TestKey { kid: kid.into(), alg: Algorithm::RS256, encoding, jwk }
    }

    /// The public JWK without its `alg` (the algorithm is then derived from `kty` and `crv`).
    pub fn jwk_without_alg(&self) -> serde_json::Value {
        let mut j = self.jwk.clone();
        if let Some(o) = j.as_object_mut() {
            o.remove("alg");
        }
        j
    }

    /// A token with `claims`, signed by this key and naming it.
    pub fn sign(&self, claims: &serde_json::Value) -> String {
        self.sign_as(self.alg, &self.kid, claims)
    }

    /// A token with `claims` whose header says `alg` and `kid`, signed by this key.
    pub fn sign_as(&self, alg: Algorithm, kid: &str, claims: &serde_json::Value) -> String {
        let mut h = Header::new(alg);
        h.kid = Some(kid.into());
        jsonwebtoken::encode(&h, claims, &self.encoding).expect("sign")
    }
}

/// A JWKS document holding `keys`.
pub fn jwks(keys: &[&serde_json::Value]) -> String {
    serde_json::json!({ "keys": keys }).to_string()
}

/// Replace the file at `path` with `contents` the way a key-distribution agent does: write a
/// sibling file, then rename it over the old one.
pub fn replace(path: &Path, contents: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents).expect("write jwks");
    std::fs::rename(&tmp, path).expect("rename jwks");
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs()
}
