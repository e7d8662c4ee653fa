//! `likewise shards status`: the shards of the postgres backend, what each holds, how its
//! replica keeps up, and the placement's limits. `likewise shards add`: register a new shard,
//! no restart needed. `likewise shards rebalance`: move buckets onto shards that hold less
//! than their share, while the service runs, with its progress.

use crate::progress::{Progress, ProgressArgs};
use clap::Subcommand;
use likewise_app::engines::RebalanceProgress;

/// What to do with the shards.
#[derive(Debug, Subcommand)]
pub enum ShardsCommand {
    /// Each shard's size, schema and replica, and the placement with its limits.
    Status {
        #[command(flatten)]
        common: super::Common,
    },
    /// Register a new, empty shard, while the service runs or not: create its database if
    /// missing and apply the schema, refuse it if it holds rows or is listed already, register
    /// it as the next shard in the placement catalog and append its URL to
    /// store.postgres_shards in the --config file. No restart needed: running nodes and
    /// workers open it within a second. Then list it in every other node's configuration file
    /// (for their next start) and run `likewise shards rebalance` to move buckets onto it.
    Add {
        #[command(flatten)]
        common: super::Common,
        /// The new shard's connection URL (as in store.postgres_shards).
        url: String,
    },
    /// Move buckets until every listed shard holds its share, while the service runs and
    /// takes writes (no restart needed): first finish any move a crash interrupted. A shard
    /// added with `likewise shards add` starts empty; this fills it. The workers must run:
    /// each move waits for the source shard's aggregator. A move that fails is resumed up to
    /// 3 times before the run exits; a run that is killed is finished by the next one. Shows
    /// the buckets moved, the rate and the time left.
    Rebalance {
        #[command(flatten)]
        common: super::Common,
        /// Most buckets per move (their writes wait while one move copies them).
        #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=4096))]
        buckets_per_move: u16,
        /// Print the moves without making them.
        #[arg(long)]
        plan: bool,
        #[command(flatten)]
        progress: ProgressArgs,
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
        ShardsCommand::Rebalance { common, buckets_per_move, plan, progress } => {
            let cfg = common.load(None)?;
            likewise_app::runtime::init_logging(&cfg.log.level);
            let mut shown = Shown { args: progress, bar: None };
            let text =
                likewise_app::runtime::runtime()?.block_on(likewise_app::engines::shards_rebalance(
                    &cfg,
                    usize::from(buckets_per_move),
                    plan,
                    &mut shown,
                ))?;
            if let Some(bar) = shown.bar.take() {
                bar.finish();
            }
            print!("{text}");
            Ok(())
        }
    }
}

/// A rebalance's progress: buckets moved of those planned; each move's line on stdout.
struct Shown {
    args: ProgressArgs,
    bar: Option<Progress>,
}

impl RebalanceProgress for Shown {
    fn planned(&mut self, _moves: usize, buckets: usize) {
        self.bar = Some(Progress::start("shards rebalance", buckets as u64, "buckets", self.args));
    }

    fn moved(&mut self, buckets: usize, line: String) {
        match &self.bar {
            Some(bar) => {
                bar.println(line);
                bar.inc(buckets as u64);
            }
            None => println!("{line}"),
        }
    }
}
