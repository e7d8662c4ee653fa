//! `bench soak`: the whole service under a realistic mix for a long time, watching memory.
//!
//! The service runs in this process (a fresh temporary embedded store, HTTP on a random local
//! port, wired exactly as `serve` wires it) or is a running server (`--url`). A fixed number
//! of client loops drive it over HTTP with a social feed's ratios: about 20 reads per write
//! (feed pages of 20 posts, single posts, comment pages, likers pages, replies), writes being
//! likes and unlikes spread over many posts with a Zipf skew plus ONE viral post that takes a
//! large share of the likes from a stream of new likers, periodic comment bursts on one post
//! (replies too), and comment likes. Users and posts are seeded through the upstream API
//! first. Every second it samples throughput per operation class, errors and the RSS; at the
//! end it prints the totals and latency percentiles, checks that every post's count converged
//! to the likes the client made (and, for the viral post, to its likers list), applies the
//! memory-growth rule, and draws RSS and throughput over time as an SVG.
//!
//! `--scrape-every N` scrapes `/metrics` as Prometheus would (which also drains the exporter's
//! pending histogram samples); `--write-per-mille 0 --burst-comments 0` is a read-only soak.
//! Together they separate memory that follows requests from memory that follows written data.
//!
//! - `args`: the options and the rules the run is judged by.
//! - `target`: the service under load, in this process or at `--url`.
//! - `world`: the run's users, posts and tokens, the classified request, seeding.
//! - `shared`: the operation classes and what the client loops share.
//! - `traffic`: the client loops and the mix they send.
//! - `load`: the loops for `--duration`, with the sampler, bursts, scrapes and gauge polls.
//! - `sampler`: one sample a second, and the progress line.
//! - `gauges`: the server's bounded memory from /metrics.
//! - `growth`: the memory-growth rule and the allocator overhead guard.
//! - `summary`, `memory`, `counts`: the results, the memory verdict, the counts check.
//! - `chart`: the SVG of RSS, throughput and latency over time.

mod args;
mod chart;
mod counts;
mod gauges;
mod growth;
mod load;
mod memory;
mod sampler;
mod shared;
mod summary;
mod target;
mod traffic;
mod world;

pub use args::SoakArgs;

use crate::proc::RssSource;
use load::Load;
use memory::{MemoryReport, f0};
use shared::Shared;
use std::sync::Arc;
use std::time::Instant;
use summary::Totals;
use target::Target;
use world::World;

/// Run the soak: seed, load, results, memory verdict, counts check, chart.
pub async fn run(a: &SoakArgs) -> anyhow::Result<()> {
    check_args(a)?;
    let rss_at_launch = RssSource::This.rss_mib();
    let target = Target::start(a).await?;
    target.announce(a);
    let world = Arc::new(World::new(a, &target.service.base, target.service.keys.clone())?);
    let service = world.mint(1, true)?;
    let seeded = Instant::now();
    world::seed(&world, &service, 500.min(a.users), a.concurrency.max(16)).await?;
    println!("seeding took {:.1} s; viral post {}", seeded.elapsed().as_secs_f64(), world.post_id(0));

    let sh = Arc::new(Shared::new(a.posts, a.seed));
    let load = load::drive(a, &world, &sh, target.rss).await?;

    let mut failures: Vec<String> = Vec::new();
    let totals = summary::results(a, &sh, load.elapsed, &mut failures);
    let gauges = sh.gauges.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let rss = (rss_at_launch, load.rss_start);
    let memory = memory::report(a, &load.samples, gauges, target.rss, rss, &mut failures);
    if let Some(line) = summary::over_time(&load.samples) {
        println!("{line}");
    }
    counts::check(a, &world, &sh, load.last_write, &mut failures).await?;
    draw(a, target.in_process(), &load, &totals, &memory)?;

    target.stop().await?;
    anyhow::ensure!(failures.is_empty(), "soak FAILED: {}", failures.join("; "));
    println!("soak: OK");
    Ok(())
}

/// Refuse options the run cannot honour.
fn check_args(a: &SoakArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.concurrency >= 1, "--concurrency must be at least 1");
    anyhow::ensure!(
        a.users >= a.concurrency.max(100),
        "--users must be at least 100 and at least --concurrency"
    );
    anyhow::ensure!(a.posts >= 20, "--posts must be at least 20 (a feed page)");
    anyhow::ensure!((0.0..=1.0).contains(&a.viral_share), "--viral-share is a fraction from 0 to 1");
    Ok(())
}

/// The chart, titled with the run's shape and its headline figures.
fn draw(a: &SoakArgs, in_process: bool, load: &Load, t: &Totals, m: &MemoryReport) -> anyhow::Result<()> {
    let title = format!(
        "likewise bench soak: {} s, {} client loops, {}",
        a.duration.as_secs(),
        a.concurrency,
        if in_process { "in process (embedded store)" } else { "external server" }
    );
    let subtitle = format!(
        "RSS start {} MiB, peak {} MiB, end {} MiB; {:.0} req/s ({:.1}:1 reads:writes); errors {}; {}",
        f0(load.rss_start),
        f0(m.peak),
        f0(m.end),
        t.ok as f64 / t.secs,
        t.reads as f64 / t.writes.max(1) as f64,
        t.errors,
        match &m.verdict {
            Some(g) if g.unbounded => "memory GROWING".to_string(),
            Some(g) => format!("memory bounded ({:+.0} MiB final vs baseline window)", g.growth_mib),
            None => "memory not judged".to_string(),
        }
    );
    chart::write(&a.svg, &load.samples, &title, &subtitle)?;
    println!("chart: {}", a.svg.display());
    Ok(())
}
