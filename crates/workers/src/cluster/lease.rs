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
        let mut task = Some(tokio::spawn(body(rx.clone())));
        let stopping = loop {
            tokio::select! {
                _ = shutdown.changed() => break true,
                ended = async { task.as_mut().expect("checked").await }, if task.is_some() => {
                    // The work ended by itself while the lease is ours (it could not start: a
                    // server it needs was down when the lease was taken; or it was fenced
                    // off): started again at the next check that finds the lease still held.
                    task = None;
                    if let Err(e) = ended {
                        tracing::error!(error = %e, %what, "task failed");
                    }
                    tracing::warn!(%what, "work ended while the lease is held; starting it again");
                    metrics::counter!("likewise_lease_work_restarts_total").increment(1);
                }
                _ = tokio::time::sleep(Duration::from_secs(1)) => {
                    if !lease.holds().await {
                        tracing::warn!(%what, "lease lost: stopping");
                        break false;
                    }
                    if task.is_none() {
                        task = Some(tokio::spawn(body(rx.clone())));
                    }
                }
            }
        };
        let _ = tx.send(true);
        if let Some(Err(e)) = match task {
            Some(t) => Some(t.await),
            None => None,
        } {
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

#[cfg(test)]
mod tests {
    use super::*;
    use likewise_core::StoreResult;
    use likewise_core::ports::cluster::Lease;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A lease nobody else can take, held for good.
    struct Held;
    #[async_trait::async_trait]
    impl Lease for Held {
        async fn holds(&self) -> bool {
            true
        }
    }
    struct Always;
    #[async_trait::async_trait]
    impl Leases for Always {
        async fn try_take(&self, _: LeaseName) -> StoreResult<Option<Box<dyn Lease>>> {
            Ok(Some(Box::new(Held)))
        }
    }

    /// Work that ends by itself while the lease is held (it could not start, say the stream
    /// was down when the lease was taken) is started again, about once a second, until the
    /// shutdown: not left stopped for as long as the lease lasts.
    #[tokio::test]
    async fn work_that_ends_is_started_again_while_the_lease_holds() {
        let starts = Arc::new(AtomicUsize::new(0));
        let (stop_tx, stop_rx) = watch::channel(false);
        let counted = starts.clone();
        let run = tokio::spawn(leased(Arc::new(Always), LeaseName::Notifier, stop_rx, move |_stop| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        }));
        tokio::time::sleep(Duration::from_millis(3_500)).await;
        stop_tx.send(true).expect("send");
        tokio::time::timeout(Duration::from_secs(5), run).await.expect("ends on shutdown").expect("join");
        let n = starts.load(Ordering::SeqCst);
        assert!((3..=5).contains(&n), "started {n} times in 3.5 s");
    }
}
