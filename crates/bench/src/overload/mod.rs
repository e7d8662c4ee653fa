//! `bench overload`: admission control under more writes than the node can take.
//!
//! For each workload (likes alone, then likes with a share of comment creates), a closed loop
//! first finds the node's write capacity: the writes acknowledged within the client timeout per
//! second. Open loops then offer a fixed rate of writes (1x and 4x that capacity by default),
//! each request with the same client timeout, and report the goodput (writes acknowledged in
//! time per second), the fast 503s with `Retry-After` (shed by admission control), the
//! timeouts and the latencies. Last, every acknowledged write must be stored (each acknowledged
//! like in its post's likers list, each count equal to its list, each acknowledged comment
//! listed) and no shed write may be (a 503 means nothing was created). The run fails only on
//! that check; the rates are measured, not asserted.
//!
//! The server's own request timeout should equal the client's (`--timeout-ms`): admission
//! control refuses a write whose expected queue wait is past the request's deadline, and a
//! server deadline of 10 s lets writes queue that the client will have given up on. The
//! service this command starts in process (no `--url`) is configured so; a server at `--url`
//! is started with `LIKEWISE__SERVER__REQUEST_TIMEOUT_MS=1000`.
//!
//! - `load`: the closed and open loops, and what each request's answer counts as.
//! - `check`: no acknowledged write lost, no shed write stored.

mod check;
mod load;

use crate::client::HttpClient;
use crate::served::ServerArgs;
use clap::Args;
use likewise_core::ids::UserId;
use likewise_http::auth::TokenKeys;
use load::{Ledger, Phase, Workload};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `bench overload` options.
#[derive(Debug, Args)]
pub struct OverloadArgs {
    /// Where the server is, or how to configure the service in this process.
    #[command(flatten)]
    pub server: ServerArgs,
    /// Seconds of each workload's closed-loop capacity probe.
    #[arg(long, default_value_t = 5)]
    pub probe_seconds: u64,
    /// Seconds of each open-loop phase.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Offered loads, as multiples of the measured capacity (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    pub multiples: Vec<f64>,
    /// Client timeout of every request, ms (and the in-process server's request timeout).
    #[arg(long, default_value_t = 1000)]
    pub timeout_ms: u64,
    /// Concurrent requests of the first closed-loop capacity probe (each next one has 4 times
    /// as many, up to --max-concurrency, while the goodput grows).
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Most concurrent requests of a capacity probe.
    #[arg(long, default_value_t = 2048)]
    pub max_concurrency: usize,
    /// Share of comment creates in the mixed workload, percent.
    #[arg(long, default_value_t = 20)]
    pub comment_percent: u64,
    /// Posts each workload spreads its writes over.
    #[arg(long, default_value_t = 32)]
    pub posts: u64,
    /// Most open-loop requests in flight (each holds a connection); a request due beyond it
    /// is not sent and is reported as such.
    #[arg(long, default_value_t = 8192)]
    pub max_in_flight: usize,
}

/// The run's IDs and the means to act as its users.
pub(crate) struct World {
    pub(crate) client: HttpClient,
    keys: TokenKeys,
    /// Author of every post of the run.
    pub(crate) author: u64,
    /// First post ID of the run; workload `w` uses `posts` posts from `post_base + w * 1000`.
    post_base: u64,
    /// First user ID of the run: request `i` is made by user `user_base + i`.
    pub(crate) user_base: u64,
    pub(crate) posts: u64,
    pub(crate) timeout: Duration,
}

impl World {
    /// A token for `user` (a trusted service caller with `service`), valid for an hour.
    pub(crate) fn mint(&self, user: u64, service: bool) -> anyhow::Result<String> {
        self.keys.mint(UserId(user), service, Duration::from_secs(3600)).map_err(|e| anyhow::anyhow!(e))
    }

    /// The post request `i` of workload `w` writes to.
    pub(crate) fn post_of(&self, w: Workload, i: u64) -> u64 {
        self.post_base + w.index() * 1000 + i % self.posts
    }

    /// The posts of workload `w`.
    pub(crate) fn posts_of(&self, w: Workload) -> Vec<u64> {
        let first = self.post_base + w.index() * 1000;
        (first..first + self.posts).collect()
    }
}

/// Run the overload benchmark (see the module documentation).
pub async fn run(a: &OverloadArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.posts >= 1 && a.posts < 1000, "--posts must be 1..=999");
    anyhow::ensure!(a.comment_percent <= 100, "--comment-percent is a percentage");
    anyhow::ensure!(a.multiples.iter().all(|m| *m > 0.0), "--multiples must be positive");
    let target = a.server.target(|cfg| cfg.server.request_timeout_ms = a.timeout_ms).await?;
    let engine = match &target.served {
        Some(s) => format!("{} in process", s.backend),
        None => "at --url".into(),
    };
    // Fresh IDs per run so runs against one server do not collide.
    let run = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs() % 100_000;
    let world = Arc::new(World {
        client: HttpClient::new(&target.base, a.max_in_flight),
        keys: target.keys.clone(),
        author: 7,
        post_base: 2_000_000_000 + run * 10_000,
        user_base: 1_000_000_000_000 + run * 100_000_000,
        posts: a.posts,
        timeout: Duration::from_millis(a.timeout_ms),
    });
    println!(
        "overload: {} ({}), client timeout {} ms, probes {} s at concurrency {}..={}, phases {} s at {:?}x",
        target.base,
        engine,
        a.timeout_ms,
        a.probe_seconds,
        a.concurrency,
        a.max_concurrency,
        a.seconds,
        a.multiples
    );
    let mut lines = Vec::new();
    let mut lost = 0u64;
    for w in [Workload::Likes, Workload::Mix { comment_percent: a.comment_percent }] {
        register_posts(&world, w).await?;
        let ledger = Arc::new(Ledger::default());
        let mut capacity = probe(&world, &ledger, w, a).await?;
        println!("{:<5} capacity   {}", w.name(), capacity.line());
        let mut at = Vec::new();
        for m in &a.multiples {
            let rate = capacity.goodput() * m;
            // Let the queue of the phase before drain so each phase starts from an idle node.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let mut p = load::open_loop(&world, &ledger, w, rate, a.seconds, a.max_in_flight).await?;
            println!("{:<5} {:>4}x      {}", w.name(), m, p.line());
            at.push((*m, p));
        }
        let verdict = check::run(&world, &ledger, w).await?;
        println!("{:<5} check      {}", w.name(), verdict.line());
        lost += verdict.lost();
        lines.push(summary(w, &capacity, &at, &verdict));
    }
    target.stop().await?;
    for l in &lines {
        println!("{l}");
    }
    anyhow::ensure!(
        lost == 0,
        "{lost} acknowledged or shed writes are wrong in storage (see the check lines)"
    );
    Ok(())
}

/// The node's capacity for workload `w`: closed loops at `--concurrency`, then 4 times as
/// many requests in flight, and so on while the goodput still grows by a tenth (a closed loop
/// with too few requests in flight measures their latency, not the node). The best of them.
async fn probe(
    world: &Arc<World>,
    ledger: &Arc<Ledger>,
    w: Workload,
    a: &OverloadArgs,
) -> anyhow::Result<Phase> {
    let mut best: Option<Phase> = None;
    let mut c = a.concurrency.max(1);
    while c <= a.max_concurrency.max(a.concurrency) {
        let mut p = load::closed_loop(world, ledger, w, c, a.probe_seconds).await?;
        println!("{:<5} probe {c:>5} {}", w.name(), p.line());
        let better = best.as_ref().is_none_or(|b| p.goodput() > b.goodput() * 1.1);
        if !better {
            break;
        }
        best = Some(p);
        c *= 4;
        // Let the queue of this probe drain before the next one.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    best.ok_or_else(|| anyhow::anyhow!("no capacity probe ran"))
}

/// The one-line summary of a workload: goodput at the highest multiple as a fraction of the
/// goodput at capacity, and the check's verdict.
fn summary(w: Workload, capacity: &Phase, at: &[(f64, Phase)], verdict: &check::Verdict) -> String {
    let top = at.iter().max_by(|a, b| a.0.total_cmp(&b.0));
    let (m, goodput, shed) = match top {
        Some((m, p)) => (*m, p.goodput(), p.shed_share()),
        None => (0.0, 0.0, 0.0),
    };
    format!(
        "summary {}: capacity {:.0}/s; at {m}x goodput {goodput:.0}/s = {:.2} of capacity (target >= 0.80), \
         shed {:.0}%; acknowledged writes lost {}, shed writes stored {}",
        w.name(),
        capacity.goodput(),
        goodput / capacity.goodput().max(1e-9),
        shed * 100.0,
        verdict.missing,
        verdict.shed_stored
    )
}

/// Register workload `w`'s posts through the upstream API (service role).
async fn register_posts(world: &World, w: Workload) -> anyhow::Result<()> {
    let service = world.mint(world.author, true)?;
    for id in world.posts_of(w) {
        let body = format!(r#"{{"author_id":"{}"}}"#, world.author);
        let path = format!("/v1/posts/{id}");
        let (st, b) = world.client.call(hyper::Method::PUT, &path, Some(&service), Some(body)).await?;
        anyhow::ensure!(st.is_success(), "registering post {id}: {st} {}", String::from_utf8_lossy(&b));
    }
    Ok(())
}
