//! `likewise export analytics --since T --until T --out DIR`: per-post hourly aggregates as
//! one Parquet file (see [`crate::analytics`] for the columns).
//!
//! Offline, on the embedded engine: the store is locked by a running `serve`, so stop it
//! first (as for `reconcile`). Likes, unlikes and comments come from the event log, read from
//! its retained start to its head; unique viewers from the hourly view sketches. The log is
//! truncated behind the aggregator (keeping `aggregator.retain_events` events): hours before
//! its oldest retained event are incomplete, and the command warns when `--since` reaches
//! back that far. The postgres backend is refused (its events live in the NATS stream, which
//! this command does not read).

use crate::analytics::Span;
#[cfg(feature = "analytics")]
use crate::analytics::{Aggregate, rfc3339};
#[cfg(feature = "analytics")]
use crate::progress::Progress;
use crate::progress::ProgressArgs;
#[cfg(feature = "analytics")]
use anyhow::Context;
use clap::Subcommand;
use likewise_app::config::Config;
use std::path::{Path, PathBuf};

/// What `likewise export` writes.
#[derive(Debug, Subcommand)]
pub enum ExportCommand {
    /// Per-post hourly aggregates (likes, unlikes, comments, comment likes, unique viewers)
    /// as a Parquet file DIR/likewise-analytics-<since>-<until>.parquet. Offline, on the
    /// embedded store only: stop `likewise serve` first. Covers what the event log retains
    /// (aggregator.retain_events events); warns when --since is older.
    Analytics {
        /// First hour covered: RFC 3339 (2026-12-04T10:00:00Z) or a date (2026-12-04, midnight
        /// UTC); truncated to its UTC hour.
        #[arg(long, value_name = "T")]
        since: String,
        /// End of the span, exclusive: hours starting before it, after truncation to its UTC hour.
        #[arg(long, value_name = "T")]
        until: String,
        /// Directory the file is written to (created if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        #[command(flatten)]
        common: super::Common,
        #[command(flatten)]
        progress: ProgressArgs,
    },
}

/// Events read from the log per call.
#[cfg(feature = "analytics")]
const READ_BATCH: usize = 10_000;
/// Sketches read per call.
#[cfg(feature = "analytics")]
const VIEWS_PAGE: usize = 10_000;

/// Run `likewise export ...`.
pub fn run(cmd: ExportCommand) -> anyhow::Result<()> {
    match cmd {
        ExportCommand::Analytics { since, until, out, common, progress } => {
            let span = Span::parse(&since, &until)?;
            analytics(common.load(None)?, span, &out, progress)
        }
    }
}

#[cfg(not(feature = "analytics"))]
fn analytics(_cfg: Config, _span: Span, _out: &Path, _progress: ProgressArgs) -> anyhow::Result<()> {
    anyhow::bail!(
        "this build of likewise has no analytics export: build it with the `analytics` cargo feature \
         (on by default; this binary was built without it)"
    )
}

#[cfg(feature = "analytics")]
fn analytics(cfg: Config, span: Span, out: &Path, progress: ProgressArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        cfg.store.backend == "embedded",
        "likewise export analytics reads the embedded store's event log; store.backend = {:?} is not \
         supported (on the scale-out engine the events live in the NATS stream, which it does not read)",
        cfg.store.backend
    );
    check_writable(out)?;
    likewise_app::runtime::init_logging("warn");
    let rows = likewise_app::runtime::runtime()?.block_on(async {
        let engines = likewise_app::engines::open(&cfg).await.context(
            "opening the store (is `likewise serve` running on this data directory? stop it first)",
        )?;
        let stores = engines.stores.clone();
        let mut agg = Aggregate::new(span);
        // The log from its retained start, up to its head (no writer runs meanwhile).
        let head = stores.events.head().await?;
        let bar = Progress::start("export analytics", head, "events", progress);
        let (mut after, mut first) = (0u64, None);
        loop {
            let batch = stores.events.read_after(after, READ_BATCH).await?;
            let Some(last) = batch.last() else { break };
            after = last.seq;
            first = first.or(batch.first().map(|e| (e.seq, e.ts_ms)));
            for e in &batch {
                agg.add_event(e);
            }
            // Counted from the oldest retained event: a truncated log has fewer to read.
            let from = first.map_or(1, |(seq, _)| seq);
            bar.set_total((head + 1).saturating_sub(from).max(after + 1 - from));
            bar.set_done(after + 1 - from);
        }
        bar.finish();
        let mut page = None;
        loop {
            let views = stores.views.hourly_views(span.since_ms, span.until_ms, page, VIEWS_PAGE).await?;
            let Some(last) = views.last() else { break };
            page = Some((last.hour_ms, last.post));
            for v in &views {
                agg.add_views(v)?;
            }
        }
        stores.close()?;
        // Truncated: the oldest retained event is not the first ever written.
        match first {
            Some((seq, ts)) if seq > 1 && ts > span.since_ms => eprintln!(
                "warning: the event log retains events from {} on (aggregator.retain_events); likes, \
                 unlikes and comments of earlier hours are missing from the export",
                rfc3339(ts)
            ),
            None if head > 0 => eprintln!(
                "warning: the event log retains no events (aggregator.retain_events); the export holds \
                 unique viewers only"
            ),
            _ => {}
        }
        anyhow::Ok(agg.into_rows())
    })?;
    let path = crate::analytics::parquet::write(out, &span.file_name(), &rows)?;
    println!(
        "wrote {} rows ({} to {}) to {}",
        rows.len(),
        rfc3339(span.since_ms),
        rfc3339(span.until_ms),
        path.display()
    );
    Ok(())
}

/// Fail early, before reading the log, when `out` cannot take the file.
#[cfg(feature = "analytics")]
fn check_writable(out: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out)
        .with_context(|| format!("cannot create the output directory {}", out.display()))?;
    let probe = out.join(format!(".likewise-write-check-{}", std::process::id()));
    std::fs::write(&probe, b"")
        .with_context(|| format!("the output directory {} is not writable", out.display()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}
