//! The comment ranker: keeps each cached post's ranking head fresh (feed previews).
//!
//! It reads the events that matter to rankings as the aggregators commit them (the service's
//! local log, fed after the counts and the rank index of each commit are stored, and on an
//! API node also by other nodes' aggregators over the cluster bus): comment events and
//! comment-like events mark their post dirty, and once per `interval` the ranking heads of
//! dirty posts that are cached are read again from the rank index (posts nobody is reading
//! are computed on their next read instead). Rankings are a cache: nothing to resume after a
//! restart.

use likewise_core::ids::PostId;
use likewise_core::like::TargetKind;
use likewise_core::ports::EventLog;
use likewise_service::ports::RankingRefresh;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Ranker tuning.
#[derive(Debug, Clone)]
pub struct RankerOptions {
    /// How often dirty posts are re-ranked.
    pub interval: Duration,
    /// Most posts re-ranked per round (the rest wait for the next round).
    pub max_posts_per_round: usize,
}

impl Default for RankerOptions {
    fn default() -> Self {
        RankerOptions { interval: Duration::from_secs(1), max_posts_per_round: 200 }
    }
}

/// One round: read new events of `log`, re-rank dirty cached posts, acknowledge the events.
/// Returns the number of posts re-ranked.
pub async fn round(
    svc: &dyn RankingRefresh,
    log: &dyn EventLog,
    offset: &mut u64,
    dirty: &mut BTreeSet<PostId>,
    max_posts: usize,
) -> likewise_core::StoreResult<usize> {
    loop {
        let events = log.read_after(*offset, 16_384).await?;
        let n = events.len();
        for e in &events {
            if !e.kind.is_like() || e.target.kind == TargetKind::Comment {
                dirty.insert(PostId(e.post));
            }
        }
        if let Some(last) = events.last() {
            *offset = last.seq;
        }
        if n < 16_384 {
            break;
        }
    }
    let mut done = 0;
    while done < max_posts {
        let Some(post) = dirty.pop_first() else { break };
        match svc.refresh_if_cached(post).await {
            Ok(false) => {}
            Ok(true) => done += 1,
            Err(e) => {
                tracing::warn!(error = %e, post = post.0, "re-ranking failed");
                done += 1;
            }
        }
    }
    log.committed(*offset).await?;
    metrics::counter!("likewise_ranker_posts_total").increment(done as u64);
    Ok(done)
}

/// Run on `log` until `shutdown` flips to true.
pub async fn run(
    svc: Arc<dyn RankingRefresh>,
    opts: RankerOptions,
    log: Arc<dyn EventLog>,
    shutdown: watch::Receiver<bool>,
) {
    let mut offset = 0;
    let mut dirty = BTreeSet::new();
    let mut ticker = crate::Ticker::new(opts.interval, shutdown);
    while ticker.next().await {
        if let Err(e) = round(&*svc, &*log, &mut offset, &mut dirty, opts.max_posts_per_round).await {
            tracing::warn!(error = %e, "ranker round failed");
        }
    }
}
