//! `likewise bench`: measured, not asserted. `hot-post` drives likes from many distinct users
//! onto ONE post, in process (through the service API, no HTTP) or over HTTP against a
//! running server, prints likes/s and latency percentiles, and checks that the final count
//! equals the number of distinct likers.

mod cold_read;
mod comments;
mod http;
mod in_process;
mod soak;
mod stats;
mod wrk;

use clap::{Args, Subcommand};
use std::path::PathBuf;

/// Benchmarks.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Many distinct users like ONE post.
    HotPost(HotPostArgs),
    /// Comment page latency at depth 0 and 100,000, and ranker throughput.
    Comments(comments::CommentsArgs),
    /// 10,000 concurrent reads of one cold post: one storage load (single-flight).
    ColdPost(cold_read::ColdPostArgs),
    /// The realistic read/write mix over HTTP for a long time, watching RSS (see --help).
    Soak(soak::SoakArgs),
}

/// `bench hot-post` options.
#[derive(Debug, Args)]
pub struct HotPostArgs {
    /// Drive the service in this process (a fresh temporary store unless --data-dir).
    #[arg(long, conflicts_with = "url")]
    pub in_process: bool,
    /// Base URL of a running server, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    pub url: Option<String>,
    /// Distinct likers (one like each).
    #[arg(long, default_value_t = 200_000)]
    pub likers: u64,
    /// Concurrent requests in flight.
    #[arg(long, default_value_t = 256)]
    pub concurrency: usize,
    /// Liker IDs scattered over 2^40 IDs instead of consecutive (in process). Real likers of a
    /// viral post arrive in no ID order, and the user-keyed index feels it: consecutive IDs
    /// make every insert an append.
    #[arg(long, conflicts_with = "url")]
    pub scattered_users: bool,
    /// Start the workers (outbox relay, aggregator, reverse-index writer, notifier) only
    /// after the last like is durable (in process): measures the write tier alone, then how
    /// long the worker tier takes to drain the backlog to the exact count. In a deployment
    /// the two tiers run on different machines; here they otherwise share the cores.
    #[arg(long, conflicts_with = "url")]
    pub workers_after: bool,
    /// Seconds for each of the /healthz and feed-page phases (over HTTP); with
    /// `--client wrk` also the like phase, which then needs enough --likers to last it.
    #[arg(long, default_value_t = 5)]
    pub phase_seconds: u64,
    /// HTTP client: the built-in one, or wrk for every phase (wrk must be installed).
    #[arg(long, value_enum, default_value_t = Client::Builtin)]
    pub client: Client,
    /// Token secret of the server (default: read from --data-dir or the config).
    #[arg(long, env = "LIKEWISE__AUTH__SECRET")]
    pub secret: Option<String>,
    /// TOML configuration (in process: store tuning; over HTTP: where the secret is).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Data directory (in process: keep the store there; over HTTP: where the secret is).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
}

/// The HTTP client of `hot-post --url`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Client {
    /// hyper, in this process: every phase runs one like at a time per connection.
    Builtin,
    /// wrk (2 threads) for every phase, driven by Lua scripts for likes and feed pages.
    Wrk,
}

/// Run a benchmark.
pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    crate::commands::init_logging("warn");
    match cmd {
        BenchCommand::ColdPost(a) => crate::commands::runtime()?.block_on(cold_read::run(&a)),
        BenchCommand::Comments(a) => crate::commands::runtime()?.block_on(comments::run(&a)),
        BenchCommand::Soak(a) => crate::commands::runtime()?.block_on(soak::run(&a)),
        BenchCommand::HotPost(a) => {
            anyhow::ensure!(
                a.client == Client::Builtin || a.url.is_some(),
                "--client wrk drives a running server: give its --url"
            );
            let rt = crate::commands::runtime()?;
            match (&a.url, a.in_process) {
                (Some(url), _) => rt.block_on(http::hot_post(url, &a)),
                (None, _) => rt.block_on(in_process::hot_post(&a)),
            }
        }
    }
}

/// The token secret of a running server: `--secret`, else the one its config or data
/// directory holds (the same lookup `likewise token` does).
fn server_secret(
    secret: Option<&str>,
    config: Option<&std::path::Path>,
    data_dir: Option<&std::path::Path>,
) -> anyhow::Result<Vec<u8>> {
    use anyhow::Context;
    if let Some(s) = secret {
        return Ok(s.as_bytes().to_vec());
    }
    let overrides = crate::config::Overrides { listen: None, role: None, data_dir: data_dir.map(Into::into) };
    let cfg = crate::config::Config::load(config, &overrides)?;
    crate::secret::load_or_create(cfg.auth.secret.as_deref(), &cfg.store.data_dir, false)
        .context("pass --secret or the server's --data-dir")
}

fn progress(total: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len}  {per_sec}  eta {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        bench: BenchCommand,
    }

    #[test]
    fn wrk_needs_a_running_server() {
        let cli =
            Cli::try_parse_from(["bench", "hot-post", "--in-process", "--client", "wrk"]).expect("parses");
        let err = run(cli.bench).expect_err("refused");
        assert!(err.to_string().contains("--url"), "{err}");
        assert!(Cli::try_parse_from(["bench", "hot-post", "--client", "curl"]).is_err());
    }

    #[test]
    fn scattered_users_is_an_in_process_option() {
        assert!(Cli::try_parse_from(["bench", "hot-post", "--scattered-users"]).is_ok());
        assert!(Cli::try_parse_from(["bench", "hot-post", "--in-process", "--scattered-users"]).is_ok());
        let over_http = Cli::try_parse_from(["bench", "hot-post", "--url", "http://x", "--scattered-users"]);
        assert!(over_http.is_err(), "the HTTP likers are not scattered");
    }

    /// The likes land with no worker running; the count reaches the exact number only
    /// because the workers start afterwards and drain the backlog (the bench fails otherwise).
    #[test]
    fn workers_after_drains_the_backlog_to_the_exact_count() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().to_str().expect("utf-8 path");
        let args = ["bench", "hot-post", "--in-process", "--likers", "3000", "--concurrency", "64"];
        let cli =
            Cli::try_parse_from(args.iter().chain(&["--workers-after", "--data-dir", path])).expect("parses");
        run(cli.bench).expect("the count converges once the workers start");
        let over_http = Cli::try_parse_from(["bench", "hot-post", "--url", "http://x", "--workers-after"]);
        assert!(over_http.is_err(), "a remote server runs its own workers");
    }
}
