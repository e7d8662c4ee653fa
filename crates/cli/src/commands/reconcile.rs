//! `likewise reconcile --post ID | --all`: offline recount with a progress bar. It first
//! applies any events the aggregator had not applied, then recounts each post from its like
//! rows in one snapshot and repairs drift in the same commit as the aggregator's offset.

use crate::config::Config;
use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use likewise_core::ids::PostId;
use likewise_core::like::Target;
use likewise_service::Engagement;
use likewise_workers::Aggregator;

pub fn run(cfg: Config, post: Option<&str>, all: bool) -> anyhow::Result<()> {
    super::init_logging("warn");
    super::runtime()?.block_on(async {
        let stores = likewise_store::open(&cfg.store_config()).context(
            "opening the store (is `likewise serve` running on this data directory? stop it first)",
        )?;
        let svc = Engagement::new(stores.clone(), cfg.service_options());
        let (mut agg, _) = Aggregator::new(svc, cfg.aggregator_options()).await?;
        while agg.step(&[]).await?.more {}

        let posts: Vec<PostId> = if all {
            let mut v = Vec::new();
            loop {
                let page = stores.counters.counted_posts(v.last().copied(), 10_000).await?;
                if page.is_empty() {
                    break;
                }
                v.extend(page);
            }
            v
        } else {
            let id = post.unwrap_or_default();
            vec![id.parse().map_err(|_| anyhow::anyhow!("--post must be a positive decimal ID"))?]
        };
        let bar = ProgressBar::new(posts.len() as u64);
        bar.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} posts  {per_sec}  eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let (mut drifted, mut total_drift) = (0u64, 0i64);
        for chunk in posts.chunks(64) {
            let targets: Vec<Target> = chunk.iter().map(|p| Target::post(p.0)).collect();
            let report = agg.step(&targets).await?;
            for (t, d) in report.reconciled {
                if d != 0 {
                    drifted += 1;
                    total_drift += d;
                    bar.println(format!("post {}: drift {d:+} repaired", t.id));
                }
            }
            bar.inc(chunk.len() as u64);
        }
        bar.finish_and_clear();
        stores.close()?;
        println!("reconciled {} posts: {drifted} drifted, net drift {total_drift:+}", posts.len());
        Ok(())
    })
}
