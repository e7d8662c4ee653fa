//! Connecting to NATS: `nats://` or `tls://` URLs (several, comma-separated, for a cluster),
//! with the credentials the server asks for:
//! - a user and password in the URL (`tls://user:password@host:4222`);
//! - a token as the URL's user (`tls://token@host:4222`), as NATS clients read it;
//! - an NKEY/JWT credentials file (`stream.nats_creds_file`, as `nsc` writes it).
//!
//! `tls://` requires TLS; so does a CA file (`stream.nats_ca_file`), which then is the only
//! root the server's certificate may chain to (without one: the system's roots). Credentials
//! are taken out of the URLs before they reach the client, and no message shows them.

use super::StreamOptions;
use crate::postgres::tls::percent_decode;
use async_nats::{ConnectErrorKind, ConnectOptions, ServerAddr};
use likewise_core::{StoreError, StoreResult};
use std::time::Duration;

/// How a client proves who it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Auth {
    /// No credentials.
    None,
    /// A user and password from the URL.
    UserPassword(String, String),
    /// A token from the URL.
    Token(String),
}

/// The servers of `url` without their credentials, and the credentials.
pub(crate) fn servers(url: &str) -> Result<(Vec<ServerAddr>, Auth), String> {
    let mut addrs = Vec::new();
    let mut auth = Auth::None;
    for part in url.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let addr: ServerAddr = part.parse().map_err(|e| format!("bad NATS URL {}: {e}", redact(part)))?;
        let found = match (addr.username(), addr.password()) {
            (Some(user), Some(pass)) => Auth::UserPassword(percent_decode(user), percent_decode(pass)),
            (Some(token), None) => Auth::Token(percent_decode(token)),
            _ => Auth::None,
        };
        if found != Auth::None {
            if auth != Auth::None && auth != found {
                return Err(format!("the NATS URLs {} carry different credentials", redact(url)));
            }
            auth = found;
        }
        let mut bare = addr.into_inner();
        // Infallible for the URLs ServerAddr accepts (they all have a host).
        let _ = bare.set_username("");
        let _ = bare.set_password(None);
        addrs.push(ServerAddr::from_url(bare).map_err(|e| format!("bad NATS URL {}: {e}", redact(part)))?);
    }
    if addrs.is_empty() {
        return Err("stream.nats_url names no server".into());
    }
    Ok((addrs, auth))
}

pub use likewise_core::redact::redact;

/// The longest start-up waits for NATS to connect and greet the client. The client's own
/// `connection_timeout` bounds only the TCP connect: a listener that accepts and never sends
/// NATS's `INFO` (another service's port, PostgreSQL's for one) would hang start-up forever.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(8);

/// Connect to the NATS servers of `opts`, within [`CONNECT_TIMEOUT`]. Errors name the setting
/// (`stream.nats_url`) and the cause.
pub(super) async fn open(opts: &StreamOptions) -> StoreResult<async_nats::Client> {
    let shown = redact(&opts.url);
    match tokio::time::timeout(CONNECT_TIMEOUT, open_within(opts)).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(StoreError::Engine(m))) if !m.contains("stream.nats_url") => {
            Err(StoreError::Engine(format!("stream.nats_url: {m}")))
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(StoreError::Engine(format!(
            "stream.nats_url: no NATS server answered at {shown} within {} s (is it a NATS \
             server's client port, and reachable?)",
            CONNECT_TIMEOUT.as_secs()
        ))),
    }
}

async fn open_within(opts: &StreamOptions) -> StoreResult<async_nats::Client> {
    crate::tls::install_provider();
    let (addrs, auth) = servers(&opts.url).map_err(StoreError::Engine)?;
    let shown = addrs.iter().map(|a| a.clone().into_inner().to_string()).collect::<Vec<_>>().join(",");
    let mut o = ConnectOptions::new().name("likewise").connection_timeout(Duration::from_secs(5));
    match &auth {
        Auth::None => {}
        Auth::UserPassword(user, pass) => o = o.user_and_password(user.clone(), pass.clone()),
        Auth::Token(token) => o = o.token(token.clone()),
    }
    if let Some(creds) = &opts.creds_file {
        if auth != Auth::None {
            return Err(StoreError::Engine(
                "stream.nats_url carries credentials and stream.nats_creds_file is set: give one".into(),
            ));
        }
        o = o
            .credentials_file(creds)
            .await
            .map_err(|e| StoreError::Engine(format!("stream.nats_creds_file {}: {e}", creds.display())))?;
    }
    if let Some(ca) = &opts.ca_file {
        crate::tls::ca_file("stream.nats_ca_file", ca).map_err(StoreError::Engine)?;
        o = o.add_root_certificates(ca.clone()).require_tls(true);
    }
    o.connect(addrs).await.map_err(|e| {
        let msg = match (e.kind(), &auth) {
            (ConnectErrorKind::AuthorizationViolation, Auth::UserPassword(user, _)) => {
                format!("NATS refused the credentials for user {user} at {shown}")
            }
            (ConnectErrorKind::AuthorizationViolation, Auth::Token(_)) => {
                format!("NATS refused the token at {shown}")
            }
            (ConnectErrorKind::AuthorizationViolation, Auth::None) => match &opts.creds_file {
                Some(creds) => {
                    format!(
                        "NATS refused the credentials of stream.nats_creds_file {} at {shown}",
                        creds.display()
                    )
                }
                None => format!(
                    "NATS at {shown} requires credentials: a user and password or a token in \
                     stream.nats_url, or stream.nats_creds_file"
                ),
            },
            (ConnectErrorKind::Tls, _) => format!("TLS to NATS at {shown} failed: {e}"),
            _ => match crate::tls::tls_cause(&e) {
                Some(t) => format!("TLS to NATS at {shown} failed: {t}"),
                None => format!("cannot reach NATS at {shown}: {e}"),
            },
        };
        StoreError::Engine(msg)
    })
}

#[cfg(test)]
mod tests;
