//! The listening half of the cluster bus: what other nodes announce, applied to this node's
//! caches and live streams.

use likewise_core::StoreResult;
use likewise_core::ports::cluster::{Bus, BusMessage};
use likewise_service::ports::BusReceiver;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Join the cluster bus: announce this node's changes through `bus` from now on, and apply
/// the other nodes' until shutdown.
pub async fn join<S: BusReceiver + ?Sized + 'static>(
    svc: &Arc<S>,
    bus: Arc<dyn Bus>,
    shutdown: &watch::Receiver<bool>,
) -> StoreResult<JoinHandle<()>> {
    let mut inbox = bus.subscribe().await?;
    svc.set_broadcast(bus);
    let (svc, mut shutdown) = (svc.clone(), shutdown.clone());
    Ok(tokio::spawn(async move {
        loop {
            let msg = tokio::select! {
                m = inbox.recv() => match m { Some(m) => m, None => return },
                _ = shutdown.changed() => return,
            };
            match msg {
                BusMessage::Counters { epoch, values, events } => {
                    svc.apply_remote_counters(epoch, &values, &events)
                }
                BusMessage::Invalidate(inv) => svc.apply_invalidation(inv),
                BusMessage::CountMove { mv, made } => svc.apply_remote_move(mv, made),
                BusMessage::Notifications(items) => {
                    if let Err(e) = svc.push_live(items).await {
                        tracing::warn!(error = %e, "pushing remote notifications failed");
                    }
                }
            }
        }
    }))
}
