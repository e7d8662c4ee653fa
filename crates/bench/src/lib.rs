//! `likewise bench`: measured, not asserted. Each benchmark prints its rates and latency
//! percentiles and fails only when the service's own invariant does not hold (a final count
//! that is not the number of distinct likers, a cold read that loaded storage twice, ...).
//!
//! - `hot_post`: `hot-post`'s options and a run's IDs on a running server. Many distinct
//!   users like ONE post, in process (`in_process`, through the service API, no HTTP) or
//!   over HTTP against a running server (`http` with the built-in client, `wrk` with wrk).
//! - `comments`: `comments`, comment page latency at depth 0 and deep, ranker throughput.
//! - `cold_read`: `cold-post`, concurrent reads of one cold post cause one storage load.
//! - `soak`: `soak`, the realistic mix over HTTP for a long time, watching memory.
//! - `overload`: `overload`, writes offered at a multiple of the node's capacity with client
//!   timeouts: goodput, admission control's fast 503s, and no acknowledged write lost.
//! - `served`: the options that say where the service under a benchmark is (`--url`, else in
//!   this process), and the whole service started in this process, serving HTTP.
//! - `fresh`: a fresh service on a temporary store, where `comments` and `cold-post` start.
//! - `claim`: `0..n` worked through by concurrent tasks, each claiming the next number.
//! - `client`: the one HTTP client of every benchmark that drives a running server.
//! - `stats`: latency percentiles and the progress bar.
//! - `proc`: what /proc says about a process (resident memory, CPU time).

mod claim;
pub mod client;
mod cold_read;
mod comments;
mod export_lag;
mod fresh;
mod hot_post;
mod http;
mod in_process;
mod overload;
mod proc;
mod served;
mod soak;
mod stats;
mod wrk;

pub use cold_read::ColdPostArgs;
pub use comments::CommentsArgs;
pub use hot_post::{Client, HotPostArgs};
pub use overload::OverloadArgs;
pub use served::ServerArgs;
pub use soak::SoakArgs;

use clap::Subcommand;
use likewise_app::runtime::{init_logging, runtime};

/// Benchmarks.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Many distinct users like ONE post.
    HotPost(HotPostArgs),
    /// Comment page latency at depth 0 and 100,000, and ranker throughput.
    Comments(CommentsArgs),
    /// 10,000 concurrent reads of one cold post: one storage load (single-flight).
    ColdPost(ColdPostArgs),
    /// The realistic read/write mix over HTTP for a long time, watching RSS (see --help).
    Soak(SoakArgs),
    /// Writes at 1x and 4x the node's capacity with 1 s client timeouts: goodput, fast 503s,
    /// and no acknowledged write lost (see --help).
    Overload(OverloadArgs),
}

/// Run a benchmark.
pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    init_logging("warn");
    match cmd {
        BenchCommand::ColdPost(a) => runtime()?.block_on(cold_read::run(&a)),
        BenchCommand::Comments(a) => runtime()?.block_on(comments::run(&a)),
        BenchCommand::Soak(a) => runtime()?.block_on(soak::run(&a)),
        BenchCommand::Overload(a) => runtime()?.block_on(overload::run(&a)),
        BenchCommand::HotPost(a) => {
            anyhow::ensure!(
                a.client == Client::Builtin || a.server.url.is_some(),
                "--client wrk drives a running server: give its --url"
            );
            let rt = runtime()?;
            match (&a.server.url, a.client) {
                (Some(url), Client::Builtin) => rt.block_on(http::hot_post(url, &a)),
                (Some(url), Client::Wrk) => rt.block_on(wrk::hot_post(url, &a)),
                (None, _) => rt.block_on(in_process::hot_post(&a)),
            }
        }
    }
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

    /// The server options are one struct flattened into each command: the relations the
    /// commands' own options have with `--url` still hold, and every command reads them.
    #[test]
    fn server_options_keep_their_relations_in_every_command() {
        let parse = |args: &[&str]| Cli::try_parse_from(["bench"].iter().chain(args));
        assert!(parse(&["hot-post", "--in-process", "--url", "http://x"]).is_err(), "in process or at --url");
        assert!(parse(&["soak", "--pid", "1"]).is_err(), "--pid names the server at --url");
        assert!(parse(&["soak", "--pid", "1", "--url", "http://x"]).is_ok());
        for cmd in ["hot-post", "soak", "overload"] {
            let cli =
                parse(&[cmd, "--url", "http://x/", "--secret", "s", "--config", "c", "--data-dir", "d"])
                    .expect("parses");
            let server = match cli.bench {
                BenchCommand::HotPost(a) => a.server,
                BenchCommand::Soak(a) => a.server,
                BenchCommand::Overload(a) => a.server,
                _ => unreachable!(),
            };
            assert_eq!(server.url.as_deref(), Some("http://x/"), "{cmd}");
            assert_eq!(server.secret.as_deref(), Some("s"), "{cmd}");
            assert_eq!(server.config.as_deref(), Some(std::path::Path::new("c")), "{cmd}");
            assert_eq!(server.data_dir.as_deref(), Some(std::path::Path::new("d")), "{cmd}");
        }
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
