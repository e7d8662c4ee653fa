//! The command line: `serve`, `demo`, `migrate`, `shards`, `token`, `reconcile`, `export`, `store`,
//! `bench`.

mod demo;
mod export;
mod migrate;
mod reconcile;
mod serve;
mod shards;
mod store;
mod token;

use clap::{Args, Parser, Subcommand};
use likewise_app::config::{Config, Overrides};
use std::path::PathBuf;

/// Likewise: likes, comments and counts for a social platform.
#[derive(Debug, Parser)]
#[command(name = "likewise", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes.
#[derive(Debug, Args, Clone)]
pub struct Common {
    /// TOML configuration file (see likewise.example.toml).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// Data directory (overrides store.data_dir).
    #[arg(long, global = true)]
    pub data_dir: Option<PathBuf>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the service: everything in one process on the embedded store by default; with
    /// the postgres backend, API nodes and workers can run as separate processes.
    Serve {
        /// Address to listen on (overrides server.listen).
        #[arg(long)]
        listen: Option<String>,
        /// What this process runs: all (default), api (stateless HTTP node) or worker
        /// (outbox relay, aggregators, reverse index, notifier). Overrides server.role.
        #[arg(long, value_parser = ["all", "api", "worker"])]
        role: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Run the service on the embedded store with a seeded demo world and the web demo's
    /// demo-only sign-in (open http://ADDR/ or /?as=<user_id>).
    Demo {
        /// Address to listen on (overrides server.listen).
        #[arg(long)]
        listen: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Print a bearer token signed with the configured secret.
    Token {
        /// The user ID the token acts as (its `sub`).
        user_id: String,
        /// Mark the token as a trusted service caller (`role: "service"`).
        #[arg(long)]
        service: bool,
        /// Lifetime: a number with s, m, h or d (e.g. 30m, 1h, 7d).
        #[arg(long, default_value = "1h")]
        ttl: String,
        #[command(flatten)]
        common: Common,
    },
    /// Recount likes from the like rows and repair counters (offline: stop `serve` first).
    Reconcile {
        /// Reconcile one post.
        #[arg(long, conflicts_with = "all", required_unless_present = "all")]
        post: Option<String>,
        /// Reconcile every post that has a counter.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        progress: crate::progress::ProgressArgs,
    },
    /// Apply the PostgreSQL schema migrations to every shard (creating missing databases).
    Migrate {
        #[command(flatten)]
        common: Common,
    },
    /// The shards of the postgres backend.
    Shards {
        #[command(subcommand)]
        which: shards::ShardsCommand,
    },
    /// Export files for other systems (offline: stop `serve` first).
    Export {
        #[command(subcommand)]
        which: export::ExportCommand,
    },
    /// The embedded store's files: `repair` a store whose damaged journal keeps it from
    /// starting (offline: stop `serve` first).
    Store {
        #[command(subcommand)]
        which: store::StoreCommand,
    },
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        which: likewise_bench::BenchCommand,
    },
}

impl Common {
    /// Load the configuration these options point at.
    pub fn load(&self, listen: Option<String>) -> anyhow::Result<Config> {
        self.load_role(listen, None)
    }

    /// Load, with a role override.
    pub fn load_role(&self, listen: Option<String>, role: Option<String>) -> anyhow::Result<Config> {
        Config::load(self.config.as_deref(), &Overrides { listen, role, data_dir: self.data_dir.clone() })
    }
}

/// Run a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve { listen, role, common } => serve::run(common.load_role(listen, role)?),
        Command::Demo { listen, common } => demo::run(common.load(listen)?),
        Command::Migrate { common } => migrate::run(common.load(None)?),
        Command::Token { user_id, service, ttl, common } => {
            token::run(&common.load(None)?, &user_id, service, &ttl)
        }
        Command::Reconcile { post, all, common, progress } => {
            reconcile::run(common.load(None)?, post.as_deref(), all, progress)
        }
        Command::Shards { which } => shards::run(which),
        Command::Export { which } => export::run(which),
        Command::Store { which } => store::run(which),
        Command::Bench { which } => likewise_bench::run(which),
    }
}
