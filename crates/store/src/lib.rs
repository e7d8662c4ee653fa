//! Storage engines behind the core ports, and the write path that feeds them.
//!
//! - [`embedded`]: the default engine, on fjall (an LSM tree in the process; no server).
//! - [`durable_dir`]: creating and fsyncing directories, so new entries survive a power cut.
//! - [`group_commit`]: coalesces concurrent like/unlike requests into one atomic batch and one
//!   fsync, acknowledging each request only once its batch is durable.
//! - [`write_gate`]: a request's deadline travels with its writes: dropped before they run
//!   once the request has gone, waited for once they are committing.
//! - [`keys`]: the embedded engine's key layouts.
//! - [`open`]: opens the embedded engine; [`Stores`] bundles an engine's ports and [`Engine`]
//!   is what a process needs of the engine itself (stop, settle, gauges). The scale-out
//!   engines (PostgreSQL, Redis, NATS) live in `likewise-scaleout` and bundle the same way.
//! - `conformance` (feature `testing`): the test suite every engine must pass.
//! - `testing` (feature `testing`): a small embedded store in a scratch directory, for other
//!   crates' tests.

#[cfg(any(test, feature = "testing"))]
pub mod conformance;
pub mod durable_dir;
pub mod embedded;
pub mod group_commit;
pub mod keys;
pub mod open;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod write_gate;

pub use open::{Engine, Probe, StoreConfig, Stores, open};

/// Milliseconds since the Unix epoch (engines stamp comment IDs with it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
