//! The scale-out engines: what `store.backend = "postgres"` runs on when one machine is not
//! enough. Nothing here is home-made distribution: PostgreSQL holds the truth, Redis caches,
//! NATS JetStream carries the events.
//!
//! - [`postgres`]: every core port on N PostgreSQL databases (shards), with the transactional
//!   outbox, migrations and leases (advisory locks).
//! - [`shared_cache`]: Redis in front of the PostgreSQL ports (counters, viewers' own likes,
//!   the shared comment rate limit). Nothing in it is the truth.
//! - [`stream`]: NATS JetStream: the event stream the outbox is relayed to, the durable
//!   consumers' event logs, and the cluster bus between nodes (NATS core).
//! - [`open`]: connects all three and bundles their ports ([`Deployment`]).
//! - [`tls`]: what TLS to every engine shares (one crypto provider, CA files) and, for tests,
//!   certificates and TLS servers.
//!
//! This crate is optional in the build (the `likewise` binary's `scaleout` feature): the
//! single-node service never compiles it.

pub mod open;
pub mod postgres;
pub mod shared_cache;
pub mod stream;
pub mod tls;

pub use open::{Deployment, ScaleOutOptions, connect, from_postgres};
