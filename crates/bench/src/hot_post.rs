//! `bench hot-post`: its options, and the run both HTTP clients share (`--url`): the
//! server's keys, a client, and the run's IDs, fresh per run so runs against one server do
//! not collide, with the run's posts registered before the phases start.

use crate::client::HttpClient;
use crate::served::ServerArgs;
use clap::Args;
use hyper::{Method, StatusCode};
use likewise_core::ids::UserId;
use likewise_http::auth::TokenKeys;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A consumer `bench hot-post --consumers --without` can leave out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StreamConsumer {
    /// The Kafka export.
    Export,
    /// The trending consumer.
    Trending,
    /// The integrity consumer.
    Integrity,
}

impl StreamConsumer {
    /// The consumer it names.
    pub fn consumer(self) -> likewise_workers::Consumer {
        match self {
            StreamConsumer::Export => likewise_workers::Consumer::Export,
            StreamConsumer::Trending => likewise_workers::Consumer::Trending,
            StreamConsumer::Integrity => likewise_workers::Consumer::Integrity,
        }
    }
}

/// `bench hot-post` options.
#[derive(Debug, Args)]
pub struct HotPostArgs {
    /// Drive the service in this process (a fresh temporary store unless --data-dir).
    #[arg(long, conflicts_with = "url")]
    pub in_process: bool,
    /// Where the server is, or how to configure the service in this process.
    #[command(flatten)]
    pub server: ServerArgs,
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
    /// In process, embedded store: run every consumer `likewise serve` runs beside the
    /// aggregator (notifier, trending, integrity, ranker, and the Kafka export when the
    /// config names brokers), and report the export's lag during and after the storm.
    /// Without it only the aggregator runs. (With the postgres backend the worker role
    /// always runs every consumer; `--consumers --without` still leaves some out.)
    #[arg(long, conflicts_with_all = ["url", "workers_after"])]
    pub consumers: bool,
    /// With `--consumers`: leave these out (comma-separated: `export`, `trending`,
    /// `integrity`), to measure what each costs. The aggregator, notifier and ranker always run.
    #[arg(long, requires = "consumers", value_delimiter = ',', value_enum)]
    pub without: Vec<StreamConsumer>,
    /// Seconds for each of the /healthz and feed-page phases (over HTTP); with
    /// `--client wrk` also the like phase, which then needs enough --likers to last it.
    #[arg(long, default_value_t = 5)]
    pub phase_seconds: u64,
    /// HTTP client: the built-in one, or wrk for every phase (wrk must be installed).
    #[arg(long, value_enum, default_value_t = Client::Builtin)]
    pub client: Client,
    /// Over HTTP: comments on each of the 20 feed posts, so feed pages carry previews.
    #[arg(long, default_value_t = 0, requires = "url")]
    pub comments_per_post: u64,
}

/// The HTTP client of `hot-post --url`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Client {
    /// hyper, in this process: every phase runs one like at a time per connection.
    Builtin,
    /// wrk (2 threads) for every phase, driven by Lua scripts for likes and feed pages.
    Wrk,
}

/// A hot-post run against a running server, ready for its phases.
pub(crate) struct Remote {
    /// The server's token keys.
    pub(crate) keys: TokenKeys,
    /// The client of the non-timed requests (and of every phase with the built-in client).
    pub(crate) client: HttpClient,
    /// The post everyone likes (also the first of the feed page).
    pub(crate) hot: u64,
    /// Author of the run's posts.
    pub(crate) author: u64,
    /// The 20 posts of the feed page.
    pub(crate) feed_ids: Vec<u64>,
    /// First user ID of the run's likers and viewers.
    pub(crate) user_base: u64,
}

impl Remote {
    /// Fresh IDs for a run against the server at `base`, and its 20 feed posts registered.
    pub(crate) async fn prepare(base: &str, a: &HotPostArgs) -> anyhow::Result<Remote> {
        let keys = a.server.keys()?;
        let client = HttpClient::new(base, a.concurrency);
        // Fresh IDs per run so runs against one server do not collide.
        let run = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs() % 1_000_000;
        let hot = run * 1000 + 1;
        let remote = Remote {
            keys,
            client,
            hot,
            author: 7,
            feed_ids: (0..20).map(|i| hot + i).collect(),
            user_base: 10_000_000 + run * 10_000_000,
        };
        let service = remote.mint(remote.author, true)?;
        for id in &remote.feed_ids {
            let body = format!(r#"{{"author_id":"{}"}}"#, remote.author);
            let path = format!("/v1/posts/{id}");
            let (st, b) = remote.client.call(Method::PUT, &path, Some(&service), Some(body)).await?;
            anyhow::ensure!(
                st == StatusCode::OK,
                "registering post {id}: {st} {}",
                String::from_utf8_lossy(&b)
            );
        }
        // Comments from their own authors (no per-user limit applies), ordinary text.
        for (k, id) in remote.feed_ids.iter().enumerate() {
            for c in 0..a.comments_per_post {
                let user = remote.user_base + 9_000_000 + k as u64 * 1_000 + c;
                let token = remote.mint(user, false)?;
                let body = format!(r#"{{"text":"a note from reader {c} about the morning walk"}}"#);
                let path = format!("/v1/posts/{id}/comments");
                let (st, b) = remote.client.call(Method::POST, &path, Some(&token), Some(body)).await?;
                anyhow::ensure!(
                    st == StatusCode::CREATED,
                    "commenting: {st} {}",
                    String::from_utf8_lossy(&b)
                );
            }
        }
        if a.comments_per_post > 0 {
            // Counted (and ranked) before the feed phase reads the posts' counts.
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        println!(
            "hot-post over HTTP at {}: {} likers on post {hot}, concurrency {}",
            remote.client.base(),
            a.likers,
            a.concurrency
        );
        Ok(remote)
    }

    /// A token for `user` (a trusted service caller with `service`), valid for an hour.
    pub(crate) fn mint(&self, user: u64, service: bool) -> anyhow::Result<String> {
        self.keys.mint(UserId(user), service, Duration::from_secs(3600)).map_err(|e| anyhow::anyhow!(e))
    }

    /// Tokens of the users `user_base + i` for `i` in `0..n`.
    pub(crate) fn user_tokens(&self, n: u64) -> anyhow::Result<Vec<String>> {
        (0..n).map(|i| self.mint(self.user_base + i, false)).collect()
    }

    /// The path of the run's 20-post feed page.
    pub(crate) fn feed_path(&self) -> String {
        let ids = self.feed_ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",");
        format!("/v1/posts?ids={ids}")
    }
}

/// The line both clients end their rates with: each phase against /healthz.
pub(crate) fn print_ratios(likes: f64, feed: f64, health: f64) {
    println!(
        "ratios to /healthz: likes {:.2}x (target >= 0.5x), feed pages {:.2}x (target >= 0.3x)",
        likes / health,
        feed / health
    );
}
