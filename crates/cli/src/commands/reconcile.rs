//! `likewise reconcile --post ID | --all`: offline recount with a progress bar.
//!
//! Embedded store: first applies any events the aggregator had not applied, then recounts each
//! post from its like rows in one snapshot and repairs drift in the same commit as the
//! aggregator's offset. PostgreSQL: per shard, under that shard's worker lease (so no running
//! worker's aggregator commits meanwhile), each post is recounted in one snapshot with the
//! events still in the outbox or the stream counted as pending, and the repair is committed
//! with the aggregator's unchanged offset (the worker applies the pending events later). It
//! also checks each post's likers list (its liker pages) against the like rows and rebuilds
//! it when they disagree (the `LikerPageRepair` port); with `--all`, every comment's too.

use crate::progress::{Progress, ProgressArgs};
use anyhow::Context;
use likewise_app::config::Config;
use likewise_core::ids::PostId;
use likewise_core::like::Target;
use likewise_core::ports::cluster::LeaseName;
use likewise_engine::Stores;
use likewise_service::Engagement;
use likewise_workers::reconcile::EmptyLog;
use likewise_workers::{Aggregator, AggregatorOptions};
use std::sync::Arc;

pub fn run(cfg: Config, post: Option<&str>, all: bool, progress: ProgressArgs) -> anyhow::Result<()> {
    likewise_app::runtime::init_logging("warn");
    likewise_app::runtime::runtime()?.block_on(async {
        let engines = likewise_app::engines::open(&cfg).await.context(
            "opening the store (is `likewise serve` running on this data directory? stop it first)",
        )?;
        let stores = engines.stores.clone();
        let posts = |stores: Stores| async move {
            if !all {
                let id = post.unwrap_or_default();
                return anyhow::Ok(vec![
                    id.parse().map_err(|_| anyhow::anyhow!("--post must be a positive decimal ID"))?,
                ]);
            }
            let mut v: Vec<PostId> = Vec::new();
            loop {
                let page = stores.counters.counted_posts(v.last().copied(), 10_000).await?;
                if page.is_empty() {
                    break;
                }
                v.extend(page);
            }
            Ok(v)
        };
        let groups = if let Some(cluster) = &engines.cluster {
            let list = posts(stores.clone()).await?;
            let mut by_shard: Vec<(usize, Vec<PostId>)> = Vec::new();
            for p in list {
                let s = cluster.outbox.shard_of_post(p);
                match by_shard.iter_mut().find(|(k, _)| *k == s) {
                    Some((_, v)) => v.push(p),
                    None => by_shard.push((s, vec![p])),
                }
            }
            by_shard.into_iter().map(|(s, v)| (Some((cluster.clone(), s)), v)).collect::<Vec<_>>()
        } else {
            vec![(None, posts(stores.clone()).await?)]
        };
        let pages = engines.liker_pages.clone();
        let svc = Engagement::new(stores.clone(), cfg.service_options());
        let total: usize = groups.iter().map(|(_, v)| v.len()).sum();
        let bar = Progress::start("reconcile", total as u64, "posts", progress);
        let (mut drifted, mut total_drift) = (0u64, 0i64);
        let mut pages_rebuilt = 0u64;
        for (shard, posts) in groups {
            let on_shard = shard.as_ref().map(|(_, s)| *s);
            let (mut agg, _lease) = match shard {
                None => {
                    let (mut agg, _) = Aggregator::new(svc.clone(), cfg.aggregator_options()).await?;
                    while agg.step(&[]).await?.more {}
                    (agg, None)
                }
                Some((cluster, s)) => {
                    let lease = cluster.leases.try_take(LeaseName::Shard(s)).await?.with_context(|| {
                        format!(
                            "shard {s} is held by a running worker (its aggregator reconciles hot posts every \
                             minute); stop the workers to reconcile offline"
                        )
                    })?;
                    let opts = AggregatorOptions {
                        consumer: likewise_workers::cluster::counters_consumer(s),
                        ..cfg.aggregator_options()
                    };
                    let (agg, _) =
                        Aggregator::with_log(svc.clone(), opts, Arc::new(EmptyLog)).await?;
                    (agg, Some(lease))
                }
            };
            for chunk in posts.chunks(64) {
                let targets: Vec<Target> = chunk.iter().map(|p| Target::post(p.0)).collect();
                let report = agg.step(&targets).await?;
                anyhow::ensure!(
                    report.reconciled.len() == targets.len(),
                    "{} of {} posts could not be recounted now (see the log); run again",
                    targets.len() - report.reconciled.len(),
                    targets.len()
                );
                for (t, d) in report.reconciled {
                    if d != 0 {
                        drifted += 1;
                        total_drift += d;
                        bar.println(format!("post {}: drift {d:+} repaired", t.id));
                    }
                }
                // The likers list ("who liked this") too: its pages against the like rows
                // (with --all, the shard pass below covers every target at once).
                if let (false, Some(pages)) = (all, &pages) {
                    for p in chunk {
                        if let Some((rows, entries)) = pages.repair(Target::post(p.0)).await? {
                            pages_rebuilt += 1;
                            bar.println(format!(
                                "post {}: likers list rebuilt ({entries} entries for {rows} like rows)",
                                p.0
                            ));
                        }
                    }
                }
                bar.inc(chunk.len() as u64);
            }
            // With --all, one pass over the shard's paged likes finds every target whose
            // pages drifted, posts and comments.
            if let (true, Some(pages), Some(s)) = (all, &pages, on_shard) {
                for t in pages.drifted(s).await? {
                    if let Some((rows, entries)) = pages.repair(t).await? {
                        pages_rebuilt += 1;
                        bar.println(format!(
                            "{:?} {}: likers list rebuilt ({entries} entries for {rows} like rows)",
                            t.kind, t.id
                        ));
                    }
                }
            }
        }
        bar.finish();
        stores.close()?;
        println!("reconciled {total} posts: {drifted} drifted, net drift {total_drift:+}");
        if pages_rebuilt > 0 {
            println!("likers lists rebuilt: {pages_rebuilt}");
        }
        Ok(())
    })
}
