//! Connecting to Redis: `redis://` or `rediss://` (TLS through rustls) URLs with an ACL user
//! and password (`rediss://user:password@host:port/db`), the server checked against the CA
//! file of `cache.redis_ca_file` or, without one, the system's roots.
//!
//! A node must not start half-configured: [`open`] connects and asks Redis for a `PING`, so
//! refused credentials, a missing password and an untrusted certificate all fail at start-up,
//! each with its own message. Messages show the URL with its password replaced by `***`.

use super::RedisOptions;
use crate::postgres::tls::redact;
use likewise_core::{StoreError, StoreResult};
use redis::aio::ConnectionManager;
use redis::{ConnectionAddr, ErrorKind, IntoConnectionInfo, RedisError, TlsCertificates};
use std::path::Path;
use std::time::Duration;

/// The longest start-up waits for a Redis server to connect and answer `PING`, whatever the
/// retries inside: a listener that accepts and never answers (another service's port, a
/// firewall that holds connections) must fail start-up in seconds, not hang it.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(8);

/// A managed connection to the Redis at `url` (one of `opts`' servers), checked with a `PING`
/// within [`CONNECT_TIMEOUT`]. Errors name the setting (`cache.redis_url` or
/// `cache.redis_urls`).
pub(super) async fn open(opts: &RedisOptions, url: &str) -> StoreResult<ConnectionManager> {
    let setting = if opts.shard_urls.is_empty() { "cache.redis_url" } else { "cache.redis_urls" };
    match tokio::time::timeout(CONNECT_TIMEOUT, open_within(opts, url)).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(StoreError::Engine(m))) if !m.contains(setting) => {
            Err(StoreError::Engine(format!("{setting}: {m}")))
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(StoreError::Engine(format!(
            "{setting}: Redis at {} did not answer within {} s (is a Redis server listening there, \
             and reachable?)",
            redact(url),
            CONNECT_TIMEOUT.as_secs()
        ))),
    }
}

async fn open_within(opts: &RedisOptions, url: &str) -> StoreResult<ConnectionManager> {
    crate::tls::install_provider();
    let (client, user) = client(opts, url)?;
    // redis 0.32 hands `factor` to backon as the growth per retry, from a 1 s first delay: its
    // default of 100 waits 1 s, then 60 s, then 60 s (plus jitter), so a refused certificate
    // took minutes to report and a reconnect after an outage could wait a minute. Doubling,
    // capped at 1 s, reports in seconds and reconnects promptly.
    let cfg = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Duration::from_secs(3))
        .set_response_timeout(Duration::from_secs(2))
        .set_number_of_retries(3)
        .set_factor(2)
        .set_max_delay(1_000);
    let mut conn =
        ConnectionManager::new_with_config(client, cfg).await.map_err(|e| start_error(url, &user, &e))?;
    // The connection authenticates when it opens; a server that wants a password we did not
    // send answers only the first command (NOAUTH).
    let _: String =
        redis::cmd("PING").query_async(&mut conn).await.map_err(|e| start_error(url, &user, &e))?;
    Ok(conn)
}

/// The client for `url` (with `opts`' CA file) and the ACL user it logs in as.
fn client(opts: &RedisOptions, url: &str) -> StoreResult<(redis::Client, String)> {
    let shown = redact(url);
    let info =
        url.into_connection_info().map_err(|e| StoreError::Engine(format!("bad Redis URL {shown}: {e}")))?;
    let user = info.redis.username.clone().unwrap_or_else(|| "default".into());
    let tls = matches!(info.addr, ConnectionAddr::TcpTls { .. });
    let client = match (&opts.ca_file, tls) {
        (Some(ca), true) => redis::Client::build_with_tls(
            info,
            TlsCertificates { client_tls: None, root_cert: Some(ca_pem(ca)?) },
        ),
        (Some(_), false) => {
            return Err(StoreError::Engine(format!(
                "cache.redis_ca_file is set but cache.redis_url {shown} is not a rediss:// URL: \
                 the connection would not use TLS"
            )));
        }
        (None, _) => redis::Client::open(info),
    }
    .map_err(|e| StoreError::Engine(format!("Redis at {shown}: {e}")))?;
    Ok((client, user))
}

/// The CA file's PEM text, checked to hold at least one certificate.
fn ca_pem(path: &Path) -> StoreResult<Vec<u8>> {
    crate::tls::ca_file("cache.redis_ca_file", path).map_err(StoreError::Engine)?;
    std::fs::read(path)
        .map_err(|e| StoreError::Engine(format!("cache.redis_ca_file {}: {e}", path.display())))
}

/// A start-up failure, said in terms of what to fix.
fn start_error(url: &str, user: &str, e: &RedisError) -> StoreError {
    let at = redact(url);
    let msg = match e.code() {
        _ if e.kind() == ErrorKind::AuthenticationFailed => format!(
            "Redis refused the credentials for user {user} at {at} (WRONGPASS): check the user and \
             password in cache.redis_url"
        ),
        Some("WRONGPASS") => format!("Redis refused the credentials for user {user} at {at} (WRONGPASS)"),
        Some("NOAUTH") => format!(
            "Redis at {at} requires a user and password: give them in cache.redis_url \
             (rediss://user:password@host:port/db)"
        ),
        Some("NOPERM") => format!("Redis user {user} at {at} lacks a permission Likewise needs: {e}"),
        _ => match crate::tls::tls_cause(e) {
            Some(t) => format!("TLS to Redis at {at} failed: {t}"),
            None => format!("cannot reach Redis at {at}: {e}"),
        },
    };
    StoreError::Engine(msg)
}

#[cfg(test)]
mod tests;
