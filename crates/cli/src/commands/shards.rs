//! `likewise shards status`: the shards of the postgres backend, what each holds, how its
//! replica keeps up, and the placement's limits. `likewise shards rebalance`: move buckets
//! onto shards that hold less than their share, while the service runs.

use clap::Subcommand;

/// What to do with the shards.
#[derive(Debug, Subcommand)]
pub enum ShardsCommand {
    /// Each shard's size, schema and replica, and the placement with its limits.
    Status {
        #[command(flatten)]
        common: super::Common,
    },
    /// Register a new, empty shard: create its database if missing, apply the schema, and
    /// append its URL to store.postgres_shards in the --config file. Then list it in every
    /// other node's configuration, restart them, and run `likewise shards rebalance`.
    Add {
        #[command(flatten)]
        common: super::Common,
        /// The new shard's connection URL (as in store.postgres_shards).
        url: String,
    },
    /// Move buckets until every listed shard holds its share, while the service runs: first
    /// finish any move a crash interrupted. A shard appended to store.postgres_shards (every
    /// node's configuration, nodes restarted, `likewise migrate` run) starts empty; this
    /// fills it. The workers must run: each move waits for the source shard's aggregator.
    Rebalance {
        #[command(flatten)]
        common: super::Common,
        /// Most buckets per move (their writes wait while one move copies them).
        #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=4096))]
        buckets_per_move: u16,
        /// Print the moves without making them.
        #[arg(long)]
        plan: bool,
    },
}

pub fn run(which: ShardsCommand) -> anyhow::Result<()> {
    match which {
        ShardsCommand::Status { common } => {
            let cfg = common.load(None)?;
            likewise_app::runtime::init_logging(&cfg.log.level);
            let text =
                likewise_app::runtime::runtime()?.block_on(likewise_app::engines::shards_status(&cfg))?;
            print!("{text}");
            Ok(())
        }
        ShardsCommand::Add { common, url } => {
            let file = common.config.clone().ok_or_else(|| {
                anyhow::anyhow!("likewise shards add needs --config FILE: the file it appends the shard to")
            })?;
            let cfg = common.load(None)?;
            likewise_app::runtime::init_logging(&cfg.log.level);
            let text = likewise_app::runtime::runtime()?
                .block_on(likewise_app::engines::shards_add(&cfg, &file, &url))?;
            print!("{text}");
            Ok(())
        }
        ShardsCommand::Rebalance { common, buckets_per_move, plan } => {
            let cfg = common.load(None)?;
            likewise_app::runtime::init_logging(&cfg.log.level);
            let mut progress = |line: String| println!("{line}");
            let text =
                likewise_app::runtime::runtime()?.block_on(likewise_app::engines::shards_rebalance(
                    &cfg,
                    usize::from(buckets_per_move),
                    plan,
                    &mut progress,
                ))?;
            print!("{text}");
            Ok(())
        }
    }
}
