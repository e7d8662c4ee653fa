//! `bench hot-post --in-process`: the service API without HTTP, on a real durable store.

use crate::hot_post::{HotPostArgs, StreamConsumer};
use crate::proc::RssSource;
use crate::stats::{self, progress};
use likewise_core::ids::{PostId, UserId};
use likewise_core::like::{LikeAction, Target};
use likewise_core::model::{CommentsPolicy, PostMeta};
use likewise_core::ports::Recount;
use likewise_engine::Stores;
use likewise_service::Engagement;
use likewise_workers::{Aggregator, Consumer, cluster};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Starts the worker tier (now, or after the likes with `--workers-after`).
type SpawnWorkers = Box<dyn FnOnce() -> Vec<tokio::task::JoinHandle<()>> + Send>;

/// The service on the configured engines, ready for the likes.
struct Bench {
    /// The temporary data directory (unless `--data-dir`).
    tmp: tempfile::TempDir,
    svc: Arc<Engagement>,
    stores: Stores,
    spawn_workers: SpawnWorkers,
    stop_tx: tokio::sync::watch::Sender<bool>,
    /// The post everyone likes.
    post: PostId,
    /// The first liker's ID.
    base: u64,
    /// The counter consumer whose offset the recount reads.
    consumer: String,
    /// The Kafka export runs (`--consumers` with `[export]` brokers).
    exporting: bool,
}

/// The hot-post run in process.
pub async fn hot_post(a: &HotPostArgs) -> anyhow::Result<()> {
    // `tmp` first: bindings drop in reverse order, and the directory must outlive the store.
    let Bench { tmp: _tmp, svc, stores, spawn_workers, stop_tx, post, base, consumer, exporting } =
        open(a).await?;
    let (mut workers, mut deferred) =
        if a.workers_after { (Vec::new(), Some(spawn_workers)) } else { (spawn_workers(), None) };

    let author = UserId(1);
    svc.upstream
        .put_post(post, PostMeta { author, hide_like_count: false, comments: CommentsPolicy::Everyone })
        .await?;
    let n = a.likers;
    println!("hot-post in process: {n} distinct likers on one post, concurrency {}", a.concurrency);
    let lag = exporting.then(|| crate::export_lag::Sampler::start(stores.clone()));
    let (mut samples, elapsed) = like_storm(&svc, post, base, a).await?;
    let last_write = Instant::now();
    if let Some(lag) = lag {
        lag.report(last_write).await?;
    }
    // With --workers-after the whole backlog is still in the outbox: give the worker tier
    // time to drain it (at 10k events/s at least) before calling the count unconverged.
    let mut limit = Duration::from_secs(30);
    if let Some(f) = deferred.take() {
        workers = f();
        limit += Duration::from_millis(n / 10);
        println!(
            "write tier alone: {:.0} likes/s; workers started now, draining {n} likes",
            n as f64 / elapsed.as_secs_f64()
        );
    }

    let converged = loop {
        let c = svc.shared.counts.get_many(&[Target::post(post.0)]).await?;
        if c[0].counts.likes == n as i64 {
            break Some(last_write.elapsed());
        }
        if last_write.elapsed() > limit {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    stores.writer.close();
    let _ = stop_tx.send(true);
    for w in workers {
        w.await?;
    }
    let recount = stores.counters.recount_likes(&consumer, Target::post(post.0)).await?;
    stores.close()?;

    report(n, &mut samples, elapsed, converged, limit, &recount)
}

/// Print the run's figures; an error unless the count converged to `n` likes.
fn report(
    n: u64,
    samples: &mut [u64],
    elapsed: Duration,
    converged: Option<Duration>,
    limit: Duration,
    recount: &Recount,
) -> anyhow::Result<()> {
    let s = stats::summarise(samples);
    println!(
        "durable likes/s: {:.0}  ({n} likes in {:.2} s)",
        n as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64()
    );
    println!("{s}");
    match converged {
        Some(d) => println!("count converged to {n} {:.0} ms after the last like", d.as_secs_f64() * 1000.0),
        None => println!("count did NOT converge within {} s", limit.as_secs()),
    }
    println!("like rows {}  counter {}  pending {}", recount.rows, recount.counter, recount.pending);
    if let Some(rss) = RssSource::This.rss_mib() {
        let peak = RssSource::This.hwm_mib().unwrap_or(0.0);
        println!("process RSS after the run: {} MiB (peak {} MiB)", rss as u64, peak as u64);
    }
    anyhow::ensure!(
        converged.is_some() && recount.rows == n as i64 && recount.counter == n as i64,
        "final count does not equal the number of distinct likers"
    );
    println!("check: final count == distinct likers ({n})  OK");
    Ok(())
}

/// Open the engines `--config` names (a fresh temporary store unless `--data-dir`).
async fn open(a: &HotPostArgs) -> anyhow::Result<Bench> {
    let (cfg, tmp) = crate::served::config(a.server.config.as_deref(), a.server.data_dir.as_deref(), None)?;
    let engines = likewise_app::engines::open(&cfg).await?;
    let stores = engines.stores.clone();
    let svc = Engagement::new(stores.clone(), cfg.service_options());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut workers = likewise_app::startup::worker_options(&cfg)?;
    workers.without.extend(a.without.iter().map(|c| c.consumer()));
    // With the postgres backend (a config file naming the shards, Redis and NATS), the same
    // bench drives the scale-out write path: group commit into batched shard transactions,
    // the outbox relay to JetStream and the shard's aggregator, all in this process. Post and
    // likers are fresh random IDs so runs can share databases.
    let (spawn_workers, post, base, consumer) = if let Some(ports) = engines.cluster {
        let spawn: SpawnWorkers = {
            let (svc, ports, opts, stop_rx) = (svc.clone(), ports.clone(), workers.clone(), stop_rx.clone());
            // The worker role always runs every consumer; `--without` leaves some out, to
            // measure what they cost here too.
            if !a.without.is_empty() {
                println!("worker role without: {:?}", a.without);
            }
            Box::new(move || cluster::spawn_workers(&svc, &ports, &opts, &stop_rx))
        };
        let post = PostId(rand::random_range(1_000_000_000..2_000_000_000u64));
        let consumer = cluster::counters_consumer(ports.outbox.shard_of_post(post));
        println!(
            "scale-out engines: {} PostgreSQL shard(s), Redis, NATS JetStream",
            ports.outbox.shard_count()
        );
        (spawn, post, rand::random_range(1u64 << 40..1u64 << 41), consumer)
    } else {
        if !a.consumers {
            // The aggregator alone: it holds the log for nobody.
            workers.without = Consumer::ALL.to_vec();
        }
        let (agg, _) = Aggregator::new(svc.clone(), workers.aggregator_options()).await?;
        let spawn: SpawnWorkers = if a.consumers {
            // Everything the single-node `serve` runs beside its HTTP server.
            let svc = svc.clone();
            let mut names = vec!["aggregator", "ranker"];
            names.extend(workers.consumers().map(Consumer::name));
            println!("consumers: {}", names.join(", "));
            Box::new(move || {
                let tasks = likewise_workers::single_node::spawn(&svc, agg, workers, &stop_rx);
                vec![tokio::spawn(tasks.join())]
            })
        } else {
            Box::new(move || vec![tokio::spawn(agg.run(stop_rx))])
        };
        (spawn, PostId(42), 1_000_000u64, likewise_core::counter::COUNTERS_CONSUMER.to_string())
    };
    let exporting = a.consumers
        && !a.without.contains(&StreamConsumer::Export)
        && !cfg.scaled_out()
        && cfg.export.kafka_brokers.is_some();
    Ok(Bench { tmp, svc, stores, spawn_workers, stop_tx, post, base, consumer, exporting })
}

/// `--likers` distinct users like `post`, `--concurrency` at a time; each like's latency
/// (microseconds) and how long they all took.
async fn like_storm(
    svc: &Arc<Engagement>,
    post: PostId,
    base: u64,
    a: &HotPostArgs,
) -> anyhow::Result<(Vec<u64>, Duration)> {
    let n = a.likers;
    let scattered = a.scattered_users;
    if scattered {
        println!("liker IDs scattered over 2^40 (--scattered-users)");
    }
    let next = Arc::new(AtomicU64::new(0));
    let bar = progress(n);
    let started = Instant::now();
    let mut tasks = Vec::new();
    // Latency buffers sized up front: grown by doubling, they showed in profiles. Likers are
    // claimed one at a time, in order: claiming runs of them per task made the benchmark
    // ~25% slower, because the likes in flight then spread over a wide key range and their
    // inserts land all over the memtables instead of at their ends.
    let per_task = (n / a.concurrency.max(1) as u64 + 64) as usize;
    for _ in 0..a.concurrency {
        let (svc, next, bar) = (svc.clone(), next.clone(), bar.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(per_task);
            // One clock read per like: a task sends its next like as soon as the last one is
            // answered, so the end of one is the start of the next (the clock's two reads per
            // like were 3.5% of the benchmark's CPU).
            let mut t0 = Instant::now();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok::<_, anyhow::Error>(lat);
                }
                let user = if scattered { base + scatter(i) } else { base + i };
                let r = svc.likes.set_post_like(UserId(user), post, LikeAction::Like).await?;
                anyhow::ensure!(r.changed, "like {i} reported no change");
                let t1 = Instant::now();
                lat.push(t1.duration_since(t0).as_micros() as u64);
                t0 = t1;
                if i % 1024 == 0 {
                    bar.set_position(i);
                }
            }
        }));
    }
    let mut samples = Vec::with_capacity(n as usize);
    for t in tasks {
        samples.extend(t.await??);
    }
    let elapsed = started.elapsed();
    bar.finish_and_clear();
    Ok((samples, elapsed))
}

/// A bijection of [0, 2^40): multiplying by an odd number is invertible modulo a power of
/// two, so distinct likers keep distinct IDs, in no useful order.
fn scatter(i: u64) -> u64 {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15) & ((1 << 40) - 1)
}

#[cfg(test)]
mod tests {
    use super::scatter;

    #[test]
    fn scattered_ids_stay_distinct_and_in_range() {
        let mut ids: Vec<u64> = (0..1_000_000).map(scatter).collect();
        assert!(ids.iter().all(|&u| u < 1 << 40));
        assert!(ids.windows(2).filter(|w| w[0] < w[1]).count() < 900_000, "not in ID order");
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 1_000_000, "two likers share an ID");
    }
}
