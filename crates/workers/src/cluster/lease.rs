//! Running a task only while this process holds its lease, so a second worker process is a
//! hot standby, never a second writer.

use likewise_core::ports::cluster::{LeaseName, Leases};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Run `body` whenever this process holds lease `name`; stop it when the lease is lost (then
/// try to take it again) or on shutdown. The lease is checked every second.
pub async fn leased<F, Fut>(
    leases: Arc<dyn Leases>,
    name: LeaseName,
    mut shutdown: watch::Receiver<bool>,
    body: F,
) where
    F: Fn(watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let what = format!("{name:?}");
    loop {
        if *shutdown.borrow() {
            return;
        }
        let lease = match leases.try_take(name).await {
            Ok(Some(l)) => l,
            Ok(None) => {
                if pause(&mut shutdown).await {
                    return;
                }
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, %what, "cannot take the lease; retrying");
                if pause(&mut shutdown).await {
                    return;
                }
                continue;
            }
        };
        tracing::info!(%what, "lease taken: running");
        let (tx, rx) = watch::channel(false);
        let task = tokio::spawn(body(rx));
        let stopping = loop {
            tokio::select! {
                _ = shutdown.changed() => break true,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {
                    if !lease.holds().await {
                        tracing::warn!(%what, "lease lost: stopping");
                        break false;
                    }
                }
            }
        };
        let _ = tx.send(true);
        if let Err(e) = task.await {
            tracing::error!(error = %e, %what, "task failed");
        }
        drop(lease);
        if stopping {
            return;
        }
    }
}

/// Wait a second before trying again; true when shutting down meanwhile.
async fn pause(shutdown: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_secs(1)) => *shutdown.borrow(),
        _ = shutdown.changed() => true,
    }
}
