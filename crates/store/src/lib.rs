//! The embedded storage engine, on fjall (an LSM tree in the process; no server), behind the
//! core ports. The write path in front of it and the bundle of its ports come from
//! `likewise-engine`, which every engine shares.
//!
//! - [`embedded`]: the engine.
//! - [`durable_dir`]: creating and fsyncing directories, so new entries survive a power cut.
//! - [`keys`]: the engine's key layouts.
//! - [`open`]: opens the engine and bundles its ports into a [`likewise_engine::Stores`].
//! - `testing` (feature `testing`): a small embedded store in a scratch directory, for other
//!   crates' tests.

pub mod durable_dir;
pub mod embedded;
pub mod identity;
pub mod keys;
pub mod open;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use open::{StoreConfig, open};
