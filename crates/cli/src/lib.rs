//! The `likewise` binary's library: the command line, testable in process. How the service
//! is built and run lives in `likewise-app`; the benchmarks behind `likewise bench` live in
//! `likewise-bench`.
//!
//! - [`commands`]: `serve`, `demo`, `migrate`, `token`, `reconcile`, `export`, `bench`.
//! - [`analytics`]: the rows of `likewise export analytics` and its Parquet file.
//! - [`progress`]: the progress the long offline jobs show (a bar, or plain lines in a log).

pub mod analytics;
pub mod commands;
pub mod progress;
