//! How the `likewise` binary is put together: everything a command needs to build and run
//! the service, testable in process.
//!
//! - [`config`]: layered configuration (defaults, TOML, environment, flags).
//! - [`engines`]: the one place an engine is chosen: the embedded store, or (feature
//!   `scaleout`) PostgreSQL, Redis and NATS.
//! - [`export`]: the event export destination (Kafka, feature `kafka`).
//! - [`startup`]: builds and runs the service: the workers' options (the export's sink among
//!   them), HTTP server, background workers, graceful stop.
//! - [`secret`]: the token signing secret (which also keys cursors).
//! - [`tokens`]: which tokens are accepted (the secret, an identity provider's JWKS, or both).
//! - [`runtime`]: the log subscriber and the Tokio runtime every command runs in.
//! - `telemetry` (feature `otlp`): trace export to an OpenTelemetry collector (OTLP/HTTP).
//! - [`demo`]: the seeded world of `likewise demo`.

pub mod config;
pub mod demo;
pub mod engines;
pub mod export;
pub mod runtime;
pub mod secret;
pub mod startup;
#[cfg(feature = "otlp")]
pub mod telemetry;
pub mod tokens;

pub use startup::Application;
