//! `bench comments`: keyset page latency at depth 0 and at depth N (a page 100,000 comments
//! deep should cost the same as the first), the ranker's throughput (top-K rankings/s), and
//! what an `Idempotency-Key` costs a comment create. In process, on a fresh durable store;
//! the post's comments are written through the real write path (group commit), bypassing
//! only the per-user rate limit and classifiers; the keyed and unkeyed creates go through the
//! whole service (checks, classifiers, write path), alternating rounds of each.

use crate::fresh::{Fresh, fresh};
use crate::stats::{self, progress};
use likewise_core::comment::idempotency::IdempotencyKey;
use likewise_core::comment::status::CommentStatus;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::write::{CommentOp, CommentOutcome, CommentRecord};
use likewise_service::Engagement;
use likewise_service::comments::{Order, Reader};
use likewise_store::Stores;
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
    /// Comment creates per round of the keyed / unkeyed comparison (0: skip it).
    #[arg(long, default_value_t = 5_000)]
    pub creates: u64,
    /// Rounds of each kind, alternating.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
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
        let page = svc.comments.list(reader, PostId(1), Order::Newest, after, 20).await?;
        anyhow::ensure!(page.items.len() == 20, "short page");
        lat.push(t0.elapsed().as_micros() as u64);
    }
    Ok((reads as f64 / started.elapsed().as_secs_f64(), lat))
}

/// Run `bench comments`.
pub async fn run(a: &CommentsArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.depth + 20 <= a.comments, "--depth must leave a full page");
    let Fresh { svc, stores, .. } = &fresh().await?;
    write_comments(stores, a.comments).await?;

    // The ID at the requested depth (newest first), found by walking the keyset once.
    let reader = Reader { user: UserId(3), moderator: false };
    let mut after = None;
    let mut seen = 0u64;
    while seen < a.depth {
        let page = svc.comments.list(reader, PostId(1), Order::Newest, after, 100).await?;
        let take = (a.depth - seen).min(page.items.len() as u64) as usize;
        after = Some(page.items[take - 1].record.id);
        seen += take as u64;
    }
    let (r0, mut l0) = time_pages(svc, None, a.reads).await?;
    let (rd, mut ld) = time_pages(svc, after, a.reads).await?;
    println!("page of 20 at depth 0:       {r0:.0} pages/s   {}", stats::summarise(&mut l0));
    println!("page of 20 at depth {}: {rd:.0} pages/s   {}", a.depth, stats::summarise(&mut ld));

    let rounds = 200;
    let started = Instant::now();
    for _ in 0..rounds {
        svc.ranking.compute(PostId(1)).await?;
    }
    let per_sec = rounds as f64 / started.elapsed().as_secs_f64();
    println!(
        "ranker: {per_sec:.0} top-{} rankings/s ({:.0} comments scored/s)",
        likewise_service::ranking::TOP_K,
        per_sec * likewise_service::ranking::TOP_K as f64
    );
    if a.creates > 0 {
        keyed_against_unkeyed(svc, a.creates, a.rounds).await?;
    }
    stores.close()?;
    Ok(())
}

/// Creates/s through the service, with and without an `Idempotency-Key`, in alternating
/// rounds of `n` creates by distinct users (the per-user rate limit never applies), 64 at a
/// time.
async fn keyed_against_unkeyed(svc: &Arc<Engagement>, n: u64, rounds: u32) -> anyhow::Result<()> {
    let mut rates: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut lat: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
    let first_user = Arc::new(AtomicU64::new(10_000_000));
    for round in 0..rounds * 2 {
        let keyed = round % 2 == 1;
        let base = first_user.fetch_add(n, Ordering::Relaxed);
        let next = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..64 {
            let (svc, next) = (svc.clone(), next.clone());
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return Ok::<_, anyhow::Error>(lat);
                    }
                    let user = UserId(base + i);
                    let key = keyed
                        .then(|| IdempotencyKey::parse(format!("bench-{}", user.0).as_bytes()))
                        .transpose()?;
                    let text = format!("a comment from {} with a few ordinary words", user.0);
                    let t0 = Instant::now();
                    svc.comments.create(user, PostId(1), &text, None, key).await?;
                    lat.push(t0.elapsed().as_micros() as u64);
                }
            }));
        }
        for t in tasks {
            lat[usize::from(keyed)].extend(t.await??);
        }
        rates[usize::from(keyed)].push(n as f64 / started.elapsed().as_secs_f64());
    }
    for (i, name) in ["unkeyed", "keyed  "].iter().enumerate() {
        let r: Vec<String> = rates[i].iter().map(|v| format!("{v:.0}")).collect();
        println!("{name} comment creates/s: {}   {}", r.join(" / "), stats::summarise(&mut lat[i]));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (u, k) = (median(&mut rates[0]), median(&mut rates[1]));
    println!("keyed / unkeyed (medians): {:.3}", k / u);
    Ok(())
}

/// `n` comments on post 1 from 5,000 authors, through the write path, 256 at a time.
async fn write_comments(stores: &Stores, n: u64) -> anyhow::Result<()> {
    println!("writing {n} comments on one post...");
    let bar = progress(n);
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..256 {
        let (stores, next, bar) = (stores.clone(), next.clone(), bar.clone());
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
    println!("durable comments/s: {:.0}", n as f64 / started.elapsed().as_secs_f64());
    Ok(())
}
