//! The load itself: the client loops for `--duration`, beside them the per-second sampler,
//! the comment bursts, the scrapes of /metrics (`--scrape-every`) and the poll of the
//! server's memory gauges.

use super::args::SoakArgs;
use super::gauges::ServerMemory;
use super::sampler::{Sample, sampler};
use super::shared::Shared;
use super::traffic::Loop;
use super::world::World;
use crate::proc::RssSource;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// What the load left for the results.
pub(super) struct Load {
    /// One sample a second.
    pub(super) samples: Vec<Sample>,
    /// How long the loops ran.
    pub(super) elapsed: Duration,
    /// The measured process's RSS as the load started, MiB.
    pub(super) rss_start: Option<f64>,
    /// When the last request had been answered.
    pub(super) last_write: Instant,
}

/// Drive the load for `--duration`, then stop everything it started.
pub(super) async fn drive(
    a: &SoakArgs,
    world: &Arc<World>,
    sh: &Arc<Shared>,
    rss: RssSource,
) -> anyhow::Result<Load> {
    let rss_start = rss.rss_mib();
    let started = Instant::now();
    let report_every = (a.duration.as_secs() / 20).clamp(5, 60);
    let sampler = tokio::spawn(sampler(sh.clone(), rss, started, report_every));
    let beside = [Some(bursts(a, world, sh)), scraper(a, world, sh), poller(rss, world, sh)];
    let interval = a.rate.filter(|r| *r > 0.0).map(|r| Duration::from_secs_f64(a.concurrency as f64 / r));
    let mut loops = Vec::with_capacity(a.concurrency);
    for w in 0..a.concurrency {
        let l = Loop::new(w, world.clone(), sh.clone(), a.seed);
        loops.push(tokio::spawn(l.run(interval)));
    }
    tokio::time::sleep(a.duration).await;
    sh.stop.store(true, Ordering::Relaxed);
    for l in loops {
        l.await?;
    }
    let elapsed = started.elapsed();
    for task in beside.into_iter().flatten() {
        task.abort();
    }
    let samples = sampler.await?;
    Ok(Load { samples, elapsed, rss_start, last_write: Instant::now() })
}

/// Every `--burst-every` seconds, `--burst-comments` comments on one post: alternately the
/// viral post and one of the ten most popular others.
fn bursts(a: &SoakArgs, world: &Arc<World>, sh: &Arc<Shared>) -> JoinHandle<()> {
    let (sh, world, every, n) = (sh.clone(), world.clone(), a.burst_every.max(1), a.burst_comments);
    let mut rng = StdRng::seed_from_u64(a.seed ^ 0xb0b);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(
            tokio::time::Instant::now() + Duration::from_secs(every / 2 + 1),
            Duration::from_secs(every),
        );
        if n == 0 {
            return;
        }
        loop {
            tick.tick().await;
            if sh.stop.load(Ordering::Relaxed) {
                return;
            }
            let k = sh.bursts.fetch_add(1, Ordering::Relaxed);
            let post = if k % 2 == 0 { 0 } else { 1 + rng.random_range(0..10.min(world.posts())) };
            sh.burst_post.store(post as u64, Ordering::Relaxed);
            sh.burst_parent.store(0, Ordering::Relaxed);
            sh.burst_left.store(n, Ordering::Relaxed);
        }
    })
}

/// `GET /metrics` every `--scrape-every` seconds, as Prometheus would (none with 0).
fn scraper(a: &SoakArgs, world: &Arc<World>, sh: &Arc<Shared>) -> Option<JoinHandle<()>> {
    (a.scrape_every > 0).then(|| {
        let (sh, world, every) = (sh.clone(), world.clone(), a.scrape_every);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(every));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !sh.stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let ok = world.client.metrics().await.is_some();
                let counter = if ok { &sh.scrapes } else { &sh.scrape_errors };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        })
    })
}

/// The server's bounded memory every 5 s, for the memory rule (only when its RSS is measured).
fn poller(rss: RssSource, world: &Arc<World>, sh: &Arc<Shared>) -> Option<JoinHandle<()>> {
    (!matches!(rss, RssSource::None)).then(|| {
        let (sh, world) = (sh.clone(), world.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            while !sh.stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let Some(body) = world.client.metrics().await else { continue };
                let parsed = ServerMemory::parse(&String::from_utf8_lossy(&body));
                *sh.gauges.lock().unwrap_or_else(|e| e.into_inner()) = parsed;
            }
        })
    })
}
