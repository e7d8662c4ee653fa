//! Storage engines behind the core ports, and the write path that feeds them.
//!
//! - [`embedded`]: the default engine, on fjall (an LSM tree in the process; no server).
//! - [`group_commit`]: coalesces concurrent like/unlike requests into one atomic batch and one
//!   fsync, acknowledging each request only once its batch is durable.
//! - [`postgres`]: the scale-out engine, sharded over N PostgreSQL databases.
//! - [`shared_cache`]: Redis in front of the PostgreSQL ports (counters, viewers' own likes).
//! - [`stream`]: NATS JetStream: the outbox relay and the durable consumers' event logs.
//! - [`keys`]: the embedded engine's key layouts.
//! - [`open`]: picks and opens the engine named by the configuration; [`Stores`] bundles the ports.
//! - `conformance` (feature `conformance`): the test suite every engine must pass.

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod embedded;
pub mod group_commit;
pub mod keys;
pub mod open;
pub mod postgres;
pub mod shared_cache;
pub mod stream;

pub use open::{StoreConfig, Stores, open};

/// Milliseconds since the Unix epoch (engines stamp comment IDs with it).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
