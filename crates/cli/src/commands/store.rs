//! `likewise store repair`: what keeps the embedded store from starting after its journal
//! was damaged, and, with `--yes`, dropping it (docs/reliability.md, "A damaged journal").

use anyhow::Context;
use clap::Subcommand;
use likewise_app::config::Config;

/// What `likewise store` does.
#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Say what a store that refuses to start because its journal is damaged (or truncated,
    /// or deleted) would lose, and with --yes drop it: truncate each damaged journal at its
    /// damage and forget the record of acknowledged writes, so the store starts with what
    /// the journals still hold. Offline: stop `likewise serve` first. Without --yes nothing
    /// is changed.
    Repair {
        /// Drop what the report lists.
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        common: super::Common,
    },
}

/// Run `likewise store ...`.
pub fn run(cmd: StoreCommand) -> anyhow::Result<()> {
    match cmd {
        StoreCommand::Repair { yes, common } => repair(&common.load(None)?, yes),
    }
}

fn repair(cfg: &Config, yes: bool) -> anyhow::Result<()> {
    likewise_app::runtime::init_logging(&cfg.log.level);
    let dir = cfg.store.data_dir.join("store");
    let report = likewise_store::embedded::repair(&dir, yes)
        .with_context(|| format!("repairing {}", dir.display()))?;
    if report.problems.is_empty() {
        println!("{}: the journal is whole; nothing to repair", dir.display());
        return Ok(());
    }
    println!("{}: the store refuses to start:", dir.display());
    for p in &report.problems {
        println!("  {}: {}", p.file.display(), p.what);
    }
    println!("Repairing drops:");
    for p in &report.problems {
        println!("  {}", p.drops);
    }
    if report.repaired {
        println!(
            "Dropped. The store starts with what the journals still hold; `likewise reconcile --all` recounts."
        );
    } else {
        println!(
            "Nothing was changed. Run again with --yes to drop it (or restore the data directory from a backup)."
        );
    }
    Ok(())
}
