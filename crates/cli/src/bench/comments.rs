//! `bench comments`: keyset page latency at depth 0 and at depth N (a page 100,000 comments
//! deep should cost the same as the first), and the ranker's throughput (top-K rankings/s).
//! In process, on a fresh durable store; comments are written through the real write path
//! (group commit), bypassing only the per-user rate limit and classifiers.

use super::{progress, stats};
use crate::config::{Config, Overrides};
use likewise_core::comment::status::CommentStatus;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::model::{CommentsPolicy, PostMeta};
use likewise_core::write::{CommentOp, CommentOutcome, CommentRecord};
use likewise_service::Engagement;
use likewise_service::comments::{Order, Reader};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// `bench comments` options.
#[derive(Debug, clap::Args)]
pub struct CommentsArgs {
    /// Comments on the post.
    #[arg(long, default_value_t = 120_000)]
    pub comments: u64,
    /// Depth of the deep page.
    #[arg(long, default_value_t = 100_000)]
    pub depth: u64,
    /// Page reads per measurement.
    #[arg(long, default_value_t = 2_000)]
    pub reads: usize,
}

async fn time_pages(
    svc: &Engagement,
    after: Option<CommentId>,
    reads: usize,
) -> anyhow::Result<(f64, Vec<u64>)> {
    let reader = Reader { user: UserId(3), moderator: false };
    let mut lat = Vec::with_capacity(reads);
    let started = Instant::now();
    for _ in 0..reads {
        let t0 = Instant::now();
        let page = svc.list_comments(reader, PostId(1), Order::Newest, after, 20).await?;
        anyhow::ensure!(page.items.len() == 20, "short page");
        lat.push(t0.elapsed().as_micros() as u64);
    }
    Ok((reads as f64 / started.elapsed().as_secs_f64(), lat))
}

pub async fn run(a: &CommentsArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.depth + 20 <= a.comments, "--depth must leave a full page");
    let tmp = tempfile::tempdir()?;
    let cfg = Config::load(
        None,
        &Overrides { listen: None, role: None, data_dir: Some(tmp.path().to_path_buf()) },
    )?;
    let stores = likewise_store::open(&cfg.store_config())?;
    let svc = Engagement::new(stores.clone(), cfg.service_options());
    let meta = PostMeta { author: UserId(1), hide_like_count: false, comments: CommentsPolicy::Everyone };
    svc.put_post(PostId(1), meta).await?;

    println!("writing {} comments on one post...", a.comments);
    let bar = progress(a.comments);
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..256 {
        let (stores, next, bar, n) = (stores.clone(), next.clone(), bar.clone(), a.comments);
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok::<_, anyhow::Error>(());
                }
                let rec = CommentRecord {
                    id: CommentId(0),
                    post: PostId(1),
                    author: UserId(1000 + i % 5000),
                    post_author: UserId(1),
                    parent: None,
                    reply_to_user: None,
                    status: CommentStatus::Visible,
                    text: format!("comment number {i} with a few ordinary words"),
                    simhash: i,
                };
                match stores.writer.submit_comment(CommentOp::Create(rec)).await?.outcome {
                    CommentOutcome::Done(Some(_)) => {}
                    other => anyhow::bail!("comment not written: {other:?}"),
                }
                if i % 1024 == 0 {
                    bar.set_position(i);
                }
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    bar.finish_and_clear();
    println!("durable comments/s: {:.0}", a.comments as f64 / started.elapsed().as_secs_f64());

    // The ID at the requested depth (newest first), found by walking the keyset once.
    let reader = Reader { user: UserId(3), moderator: false };
    let mut after = None;
    let mut seen = 0u64;
    while seen < a.depth {
        let page = svc.list_comments(reader, PostId(1), Order::Newest, after, 100).await?;
        let take = (a.depth - seen).min(page.items.len() as u64) as usize;
        after = Some(page.items[take - 1].record.id);
        seen += take as u64;
    }
    let (r0, mut l0) = time_pages(&svc, None, a.reads).await?;
    let (rd, mut ld) = time_pages(&svc, after, a.reads).await?;
    println!("page of 20 at depth 0:       {r0:.0} pages/s   {}", stats::summarise(&mut l0));
    println!("page of 20 at depth {}: {rd:.0} pages/s   {}", a.depth, stats::summarise(&mut ld));

    let rounds = 200;
    let started = Instant::now();
    for _ in 0..rounds {
        svc.compute_top(PostId(1)).await?;
    }
    let per_sec = rounds as f64 / started.elapsed().as_secs_f64();
    println!(
        "ranker: {per_sec:.0} top-{} rankings/s ({:.0} comments scored/s)",
        likewise_service::ranking::TOP_K,
        per_sec * likewise_service::ranking::TOP_K as f64
    );
    stores.close()?;
    Ok(())
}
