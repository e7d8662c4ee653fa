//! The `likewise` binary's library: everything `main` calls, testable in process.
//!
//! - [`config`]: layered configuration (defaults, TOML, environment, flags).
//! - [`app`]: builds and runs the whole service in one process.
//! - [`scaleout`]: the roles of a deployment on PostgreSQL, Redis and NATS.
//! - [`secret`]: the token signing secret.
//! - [`commands`]: `serve`, `demo`, `token`, `reconcile`.
//! - [`demo`]: the seeded world of `likewise demo`.
//! - [`bench`]: `likewise bench hot-post` (in process and over HTTP).

pub mod app;
pub mod bench;
pub mod commands;
pub mod config;
pub mod demo;
pub mod scaleout;
pub mod secret;
