//! `likewise export analytics --since T --until T --out DIR`: per-post hourly aggregates as
//! one Parquet file (see [`crate::analytics`] for the columns). No downtime is needed:
//!
//! - embedded store, no node running: the store is opened here and its log read from its
//!   retained start to its head;
//! - embedded store held by a running `serve` (or `--url`): the node is asked
//!   (`GET /v1/analytics/hourly`), which reads its own log the same way;
//! - postgres backend: the event stream is read by a consumer of this command's own, and the
//!   view sketches from PostgreSQL, while the deployment runs.
//!
//! Likes, unlikes and comments come from the event log; unique viewers from the hourly view
//! sketches. The log keeps `aggregator.retain_events` events (the stream, `stream.max_age`):
//! hours before its oldest retained event are incomplete, and the command warns when
//! `--since` reaches back that far.

use crate::analytics::Span;
#[cfg(feature = "analytics")]
use crate::analytics::{HourRow, rfc3339};
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
    /// as a Parquet file DIR/likewise-analytics-<since>-<until>.parquet. Runs beside a live
    /// node: a store held by `likewise serve` is read through the node (or --url); on the
    /// postgres backend the event stream is read directly. Covers what the event log retains
    /// (aggregator.retain_events events; the stream's max_age); warns when --since is older.
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
        /// Read through a live node (`GET /v1/analytics/hourly`) instead of opening the store,
        /// for example http://127.0.0.1:8080. Without it, on the embedded store, a node already
        /// running on the data directory is asked at server.listen.
        #[arg(long, value_name = "URL")]
        url: Option<String>,
        /// Service token for the node (default: one signed with the configuration's secret).
        #[arg(long, value_name = "TOKEN", env = "LIKEWISE_TOKEN")]
        token: Option<String>,
        #[command(flatten)]
        common: super::Common,
        #[command(flatten)]
        progress: ProgressArgs,
    },
}

/// Run `likewise export ...`.
pub fn run(cmd: ExportCommand) -> anyhow::Result<()> {
    match cmd {
        ExportCommand::Analytics { since, until, out, url, token, common, progress } => {
            let span = crate::analytics::span(&since, &until)?;
            analytics(common.load(None)?, span, &out, Source { url, token }, progress)
        }
    }
}

/// Where the rows come from when the store is not opened here.
#[cfg_attr(not(feature = "analytics"), allow(dead_code))]
struct Source {
    /// A live node to ask (`--url`).
    url: Option<String>,
    /// Its service token (`--token`).
    token: Option<String>,
}

#[cfg(not(feature = "analytics"))]
fn analytics(
    _cfg: Config,
    _span: Span,
    _out: &Path,
    _from: Source,
    _progress: ProgressArgs,
) -> anyhow::Result<()> {
    anyhow::bail!(
        "this build of likewise has no analytics export: build it with the `analytics` cargo feature \
         (on by default; this binary was built without it)"
    )
}

#[cfg(feature = "analytics")]
fn analytics(
    cfg: Config,
    span: Span,
    out: &Path,
    from: Source,
    progress: ProgressArgs,
) -> anyhow::Result<()> {
    let created = !out.exists();
    check_writable(out)?;
    let result = write_export(cfg, span, out, from, progress);
    if result.is_err() && created {
        // A refused export leaves nothing behind (the directory is removed only if empty).
        let _ = std::fs::remove_dir(out);
    }
    result
}

#[cfg(feature = "analytics")]
fn write_export(
    cfg: Config,
    span: Span,
    out: &Path,
    from: Source,
    progress: ProgressArgs,
) -> anyhow::Result<()> {
    likewise_app::runtime::init_logging("warn");
    let rt = likewise_app::runtime::runtime()?;
    let (rows, warning) = match (&from.url, cfg.store.backend.as_str()) {
        (Some(url), _) => rt.block_on(through_node(&cfg, url, from.token.as_deref(), span, None))?,
        (None, "embedded") => match rt.block_on(from_store(&cfg, span, progress)) {
            Ok(r) => r,
            // The store is held by a node of this data directory: ask it instead.
            Err(e) if rt.block_on(node_answers(&cfg.server.listen)) => {
                eprintln!(
                    "the store is in use ({}); reading through the running node at {}",
                    likewise_core::error::chain(&*e),
                    cfg.server.listen
                );
                let url = format!("http://{}", cfg.server.listen);
                // Found by address, not named by the user: take its rows only if it holds this
                // data directory's store, not another one (two nodes may share a secret).
                let mine = match likewise_store::identity::read(&cfg.store.data_dir) {
                    Ok(Some(id)) => id,
                    Ok(None) => {
                        return Err(e.context(format!(
                            "the store in {} has no identity yet, so the node at {} cannot be \
                             shown to hold it: pass --url to ask a node anyway",
                            cfg.store.data_dir.display(),
                            cfg.server.listen
                        )));
                    }
                    Err(id) => {
                        return Err(e.context(format!(
                            "cannot read the identity of the store in {} ({id}), so the node at {} \
                             cannot be shown to hold it: pass --url to ask a node anyway",
                            cfg.store.data_dir.display(),
                            cfg.server.listen
                        )));
                    }
                };
                rt.block_on(through_node(&cfg, &url, from.token.as_deref(), span, Some(&mine)))?
            }
            Err(e) => {
                return Err(e.context(format!(
                    "no node answers at server.listen ({}): if `likewise serve` holds this data \
                     directory at another address, pass --url",
                    cfg.server.listen
                )));
            }
        },
        (None, _) => rt.block_on(from_stream(&cfg, span, progress))?,
    };
    if let Some(w) = warning {
        eprintln!("warning: {w}");
    }
    let path = crate::analytics::parquet::write(out, &crate::analytics::file_name(&span), &rows)?;
    println!(
        "wrote {} rows ({} to {}) to {}",
        rows.len(),
        rfc3339(span.since_ms),
        rfc3339(span.until_ms),
        path.display()
    );
    Ok(())
}

/// Rows and warning of an export.
#[cfg(feature = "analytics")]
type Rows = (Vec<HourRow>, Option<String>);

/// The embedded store opened here: its log from its retained start to its head.
#[cfg(feature = "analytics")]
async fn from_store(cfg: &Config, span: Span, progress: ProgressArgs) -> anyhow::Result<Rows> {
    let engines = likewise_app::engines::open(cfg).await?;
    let stores = engines.stores.clone();
    let bar = Progress::start("export analytics", stores.events.head().await?, "events", progress);
    let report =
        likewise_service::analytics::hourly(&*stores.events, &*stores.views, span, false, |done, total| {
            bar.set_total(total);
            bar.set_done(done);
        })
        .await;
    bar.finish();
    stores.close()?;
    let report = report?;
    let warning = report.warning(&span);
    Ok((report.rows, warning))
}

/// A scale-out deployment, running or not: the event stream read by a consumer of this
/// command's own (from the stream's first retained event to its last one now), the view
/// sketches from PostgreSQL.
#[cfg(feature = "analytics")]
async fn from_stream(cfg: &Config, span: Span, progress: ProgressArgs) -> anyhow::Result<Rows> {
    let engines = likewise_app::engines::open(cfg).await?;
    let cluster = engines.cluster.as_ref().context("the scale-out engines have no event stream")?;
    let name = format!("analytics-export-{:016x}", rand_id());
    let log = cluster.stream.consumer(&name, likewise_core::ports::cluster::Scope::All, 0).await?;
    let head = log.head().await?;
    if head == 0 {
        eprintln!(
            "warning: the event stream of stream.prefix {:?} holds no events: is the prefix the \
             deployment's? Likes, unlikes and comments will all be 0",
            cfg.stream.prefix
        );
    }
    let bar = Progress::start("export analytics", head, "events", progress);
    let report =
        likewise_service::analytics::hourly(&*log, &*engines.stores.views, span, true, |done, total| {
            bar.set_total(total);
            bar.set_done(done);
        })
        .await;
    bar.finish();
    // The consumer is deleted before the runtime ends (one a failed delete leaves behind
    // expires on the server after its inactivity limit).
    if let Err(e) = log.close().await {
        eprintln!("warning: the export's stream consumer {name} was not deleted ({e}); it expires by itself");
    }
    drop(log);
    engines.stores.close()?;
    let report = report?;
    let warning = report.warning(&span);
    Ok((report.rows, warning))
}

/// A name part no other run of this command picks.
#[cfg(feature = "analytics")]
fn rand_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish()
}

/// Does a likewise node answer at `listen`?
#[cfg(feature = "analytics")]
async fn node_answers(listen: &str) -> bool {
    let client = likewise_bench::client::HttpClient::new(&format!("http://{listen}"), 1);
    matches!(tokio::time::timeout(std::time::Duration::from_secs(5), client.metrics()).await, Ok(Some(_)))
}

/// How long an export through a node may take in all (a wedged node must not hang a
/// scheduled job forever).
#[cfg(feature = "analytics")]
const NODE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30 * 60);
/// Between two asks of a node busy with another export (its `Retry-After`).
#[cfg(feature = "analytics")]
const BUSY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A live node's rows (`GET /v1/analytics/hourly`), with `token`, or a service token minted
/// from the configuration's signing secret.
#[cfg(feature = "analytics")]
/// With `store`, the node must answer for the embedded store of that identity.
async fn through_node(
    cfg: &Config,
    url: &str,
    token: Option<&str>,
    span: Span,
    store: Option<&str>,
) -> anyhow::Result<Rows> {
    use likewise_bench::client::{Method, StatusCode};
    use likewise_http::dto::AnalyticsHourly;
    let token = match token {
        Some(t) => t.to_string(),
        None => likewise_app::tokens::signing_keys(cfg)
            .and_then(|k| {
                k.mint(likewise_core::ids::UserId(1), true, std::time::Duration::from_secs(3600))
                    .map_err(|e| anyhow::anyhow!(e))
            })
            .context(
                "no --token given, and no service token can be made from this configuration's signing secret",
            )?,
    };
    anyhow::ensure!(
        url.starts_with("http://") && !url.contains('?') && !url.contains('#'),
        "--url {url:?} must be a node's plain-HTTP base address, such as http://127.0.0.1:8080"
    );
    let client = likewise_bench::client::HttpClient::new(url, 1);
    let path =
        format!("/v1/analytics/hourly?since={}&until={}", rfc3339(span.since_ms), rfc3339(span.until_ms));
    // A node runs one export at a time: wait for one that runs already (its answer is a 429),
    // within the overall limit.
    let deadline = std::time::Instant::now() + NODE_TIMEOUT;
    let body = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ask = client.call(Method::GET, &path, Some(&token), None);
        let (status, body) = match tokio::time::timeout(left, ask).await {
            Ok(r) => r.with_context(|| format!("asking the node at {url}"))?,
            Err(_) => anyhow::bail!("the node at {url} did not answer within {} s", NODE_TIMEOUT.as_secs()),
        };
        if status == StatusCode::TOO_MANY_REQUESTS && left > BUSY_WAIT {
            eprintln!(
                "the node at {url} is busy with another export; trying again in {} s",
                BUSY_WAIT.as_secs()
            );
            tokio::time::sleep(BUSY_WAIT).await;
            continue;
        }
        anyhow::ensure!(
            status.is_success(),
            "the node at {url} answered {status}: {}",
            String::from_utf8_lossy(&body)
        );
        break body;
    };
    let answer: AnalyticsHourly = serde_json::from_slice(&body)
        .with_context(|| format!("the node at {url} sent no analytics answer"))?;
    if let Some(mine) = store {
        anyhow::ensure!(
            answer.store_id.as_deref() == Some(mine),
            "the node at {url} holds another store (its identity {}, this data directory's {mine}): \
             if `likewise serve` holds this data directory at another address, pass --url",
            answer.store_id.as_deref().unwrap_or("none")
        );
    }
    let rows = answer
        .rows
        .iter()
        .map(|r| r.to_row().map_err(anyhow::Error::msg))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok((rows, answer.warning))
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
