//! The engine-neutral machinery between the service and a storage engine: the bundle of an
//! engine's ports ([`Stores`]), the group-commit write path in front of every engine
//! ([`group_commit`]), the gate that lets a request's writes wait or be dropped
//! ([`write_gate`]), and the conformance suite every engine must pass (feature `testing`).
//! The engines themselves live in `likewise-store` (embedded, fjall) and `likewise-scaleout`
//! (PostgreSQL, Redis, NATS); neither is a dependency of this crate.

#[cfg(any(test, feature = "testing"))]
pub mod conformance;
pub mod group_commit;
pub mod stores;
pub mod write_gate;

pub use stores::{Engine, Probe, Stores};

/// Milliseconds since the Unix epoch, by this machine's clock (0 before 1970): the one clock
/// of the write path, the service and the workers.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
