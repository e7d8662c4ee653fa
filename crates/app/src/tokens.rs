//! Which tokens the service accepts, from `[auth]`: HS256 with the shared secret, tokens of
//! an identity provider whose public keys are `auth.jwks_file`, or both; and the keys
//! `likewise token` signs with.

use crate::config::{AuthConfig, Config};
use crate::secret;
use anyhow::Context;
use likewise_http::auth::TokenKeys;
use likewise_http::auth::jwks::{Expected, Jwks};

/// The keys `serve` verifies tokens with. `data_secret` is the secret `serve` loaded (the
/// configured one, or the data directory's): it signs tokens unless `auth.jwks_file` is set
/// without `auth.secret`, in which case only the identity provider's tokens are accepted.
pub fn verifying_keys(auth: &AuthConfig, data_secret: &[u8]) -> anyhow::Result<TokenKeys> {
    let keys = match &auth.jwks_file {
        None => TokenKeys::new(data_secret),
        Some(path) => {
            let expected = Expected { issuer: auth.issuer.clone(), audience: auth.audience.clone() };
            let jwks = Jwks::open(path, expected).context("auth.jwks_file")?;
            match &auth.secret {
                Some(s) => TokenKeys::new(s.as_bytes()).with_jwks(jwks),
                None => TokenKeys::from_jwks(jwks),
            }
        }
    };
    Ok(keys.with_max_ttl(auth.max_token_ttl()?))
}

/// The keys `likewise token` signs with: the configured secret or the data directory's,
/// refused when the service accepts only the identity provider's tokens.
pub fn signing_keys(cfg: &Config) -> anyhow::Result<TokenKeys> {
    anyhow::ensure!(
        cfg.auth.jwks_file.is_none() || cfg.auth.secret.is_some(),
        "auth.jwks_file is set without auth.secret: the service accepts only the identity provider's tokens, so there is nothing to sign with"
    );
    let secret = secret::load_or_create(cfg.auth.secret.as_deref(), &cfg.store.data_dir, false)?;
    Ok(TokenKeys::new(&secret).with_max_ttl(cfg.auth.max_token_ttl()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use likewise_core::ids::UserId;
    use std::time::Duration;

    #[test]
    fn a_jwks_file_without_a_secret_refuses_hs256_and_signs_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("jwks.json");
        let x = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";
        std::fs::write(&path, format!(r#"{{"keys":[{{"kty":"OKP","crv":"Ed25519","kid":"k","x":"{x}"}}]}}"#))
            .expect("write");
        let mut cfg = Config::default();
        cfg.store.data_dir = dir.path().join("data");
        cfg.auth.jwks_file = Some(path);
        let data_secret = secret::load_or_create(None, &cfg.store.data_dir, true).expect("secret");
        let keys = verifying_keys(&cfg.auth, &data_secret).expect("keys");
        let minted =
            TokenKeys::new(&data_secret).mint(UserId(1), false, Duration::from_secs(60)).expect("mint");
        assert!(keys.caller(&minted).is_err(), "the data directory's secret keys only cursors");
        assert!(signing_keys(&cfg).is_err());

        cfg.auth.secret = Some("configured-secret-0123456789".into());
        let keys = verifying_keys(&cfg.auth, b"unused").expect("keys");
        let minted = signing_keys(&cfg).expect("signing").mint(UserId(1), false, Duration::from_secs(60));
        assert!(keys.caller(&minted.expect("mint")).is_ok(), "the configured secret still signs");
        cfg.auth.jwks_file = Some(dir.path().join("missing.json"));
        let e = verifying_keys(&cfg.auth, b"unused").err().expect("a missing file fails at start-up");
        assert!(format!("{e:#}").contains("auth.jwks_file"), "{e:#}");
    }
}
