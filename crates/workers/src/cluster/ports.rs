//! The coordination ports a scaled-out deployment's workers see the engines through.

use likewise_core::ports::cluster::{Bus, EventStream, Leases, Outbox, ReverseIndex};
use std::sync::Arc;

/// The deployment's coordination ports.
#[derive(Clone)]
pub struct ClusterPorts {
    /// Who runs each shard's workers and the notifier.
    pub leases: Arc<dyn Leases>,
    /// The shards' outboxes.
    pub outbox: Arc<dyn Outbox>,
    /// The event stream.
    pub stream: Arc<dyn EventStream>,
    /// The user-keyed like index.
    pub reverse: Arc<dyn ReverseIndex>,
    /// The bus between nodes.
    pub bus: Arc<dyn Bus>,
}
