//! Wake-ups for an idle relay: the write transactions that add outbox rows send `NOTIFY` on
//! [`CHANNEL`] (each shard is a database of its own, so the channel needs no shard in it), and
//! the relay `LISTEN`s on a connection of its own ([`Listener`]) instead of polling its outbox
//! every few milliseconds.
//!
//! A notifying transaction takes a lock at commit that serializes it with every other
//! notifying transaction of the server, through its WAL flush. So a process announces a
//! shard's rows at most once per [`ANNOUNCE_EVERY`] ([`Announced`]); the relay, woken once,
//! keeps polling as before for longer than that (the relay's `quiet_after`, 500 ms) before it
//! waits again, and so finds the rows of the transactions that did not announce themselves.
//! A wake-up lost anyway (the announcing transaction rolled back, a commit slower than
//! `quiet_after`) costs one relay timeout, a second at most.

use super::{PgStore, pg_err, tls};
use async_trait::async_trait;
use futures::StreamExt;
use likewise_core::ports::cluster::OutboxWakeups;
use likewise_core::{StoreError, StoreResult};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;

/// The notification channel of new outbox rows.
pub const CHANNEL: &str = "likewise_outbox";

/// A process announces a shard's new rows at most this often.
pub const ANNOUNCE_EVERY: Duration = Duration::from_millis(100);

/// When this process last announced new rows on each shard (milliseconds of a monotonic
/// clock; 0: never).
#[derive(Default)]
pub(super) struct Announced {
    at: parking_lot::Mutex<Vec<u64>>,
    start: std::sync::OnceLock<std::time::Instant>,
}

impl Announced {
    fn now(&self) -> u64 {
        // Never 0: 0 means "never announced".
        self.start.get_or_init(std::time::Instant::now).elapsed().as_millis() as u64 + 1
    }

    /// Whether a transaction adding rows to `shard` should announce them.
    pub(super) fn due(&self, shard: usize) -> bool {
        let at = self.at.lock().get(shard).copied().unwrap_or(0);
        at == 0 || self.now().saturating_sub(at) >= ANNOUNCE_EVERY.as_millis() as u64
    }

    /// An announcing transaction of `shard` committed.
    pub(super) fn done(&self, shard: usize) {
        let now = self.now();
        let mut at = self.at.lock();
        if at.len() <= shard {
            at.resize(shard + 1, 0);
        }
        at[shard] = now;
    }
}

/// The statement that announces new rows (sent inside the transaction that adds them: the
/// notification is delivered at its commit, and never for a rollback).
pub(super) const ANNOUNCE: &str = "SELECT pg_notify('likewise_outbox', '')";

/// A shard's `LISTEN` connection. Dropping it closes the connection.
pub struct Listener {
    _client: tokio_postgres::Client,
    announced: mpsc::UnboundedReceiver<()>,
}

impl PgStore {
    /// Listen for `shard`'s new outbox rows on a connection of its own (same URL and TLS as
    /// the shard's pool). Announcements of rows committed once this returns are delivered.
    pub async fn listen_outbox(&self, shard: usize) -> StoreResult<Listener> {
        let url = self.inner.urls.read().get(shard).cloned().ok_or_else(|| {
            StoreError::Engine(format!("shard {shard} is neither configured nor registered in the catalog"))
        })?;
        let tls::Connect { config, tls, .. } = tls::connect(&url).map_err(StoreError::Engine)?;
        let (client, mut conn) = tokio::time::timeout(Duration::from_secs(5), config.connect(tls))
            .await
            .map_err(|_| StoreError::Engine(format!("shard {shard}: no listener connection within 5 s")))?
            .map_err(pg_err)?;
        let (tx, announced) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut messages = futures::stream::poll_fn(move |cx| conn.poll_message(cx));
            while let Some(m) = messages.next().await {
                match m {
                    Ok(AsyncMessage::Notification(_)) => {
                        if tx.send(()).is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, shard, "outbox listener connection failed");
                        return;
                    }
                }
            }
            // Ended (the listener was dropped, or the server closed it): the sender goes with
            // it, and the waiting relay hears of it.
        });
        client.batch_execute(&format!("LISTEN {CHANNEL}")).await.map_err(pg_err)?;
        Ok(Listener { _client: client, announced })
    }
}

#[async_trait]
impl OutboxWakeups for Listener {
    async fn wait(&mut self, timeout: Duration) -> StoreResult<bool> {
        let got = match tokio::time::timeout(timeout, self.announced.recv()).await {
            Ok(Some(())) => true,
            Ok(None) => return Err(StoreError::Engine("the outbox listener's connection ended".into())),
            Err(_) => false,
        };
        // Announcements that came meanwhile wake the relay once.
        while self.announced.try_recv().is_ok() {}
        Ok(got)
    }
}
