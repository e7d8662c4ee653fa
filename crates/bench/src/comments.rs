//! `bench comments`: keyset page latency at depth 0 and at depth N (a page 100,000 comments
//! deep should cost the same as the first), how fast a post's ranking head is read from the
//! rank index, and what an `Idempotency-Key` costs a comment create. In process, on a fresh
//! durable store;
//! the post's comments are written through the real write path (group commit), bypassing
//! only the per-user rate limit and classifiers; the keyed and unkeyed creates go through the
//! whole service (checks, classifiers, write path), alternating rounds of each.

use crate::claim;
use crate::fresh::{Fresh, fresh};
use crate::stats::{self, progress};
use likewise_core::comment::idempotency::IdempotencyKey;
use likewise_core::comment::status::CommentStatus;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::write::{CommentOp, CommentOutcome, CommentRecord};
use likewise_engine::Stores;
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
    /// Comment creates per round of the keyed / unkeyed comparison (0: skip it).
    #[arg(long, default_value_t = 5_000)]
    pub creates: u64,
    /// Rounds of each kind, alternating.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Measure the top order over HTTP on a post with this many top-level comments
    /// receiving comment likes, with the rank index kept and without (0: skip it).
    #[arg(long, default_value_t = 0)]
    pub top: u64,
    /// Seconds of the comment-like storm of each `--top` run.
    #[arg(long, default_value_t = 10)]
    pub like_seconds: u64,
    /// Spread the storm's likes uniformly over the comments (default: Zipf-like, as real
    /// engagement is: a comment's share falls with its popularity rank, density 1/rank).
    #[arg(long)]
    pub uniform_likes: bool,
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
    if a.top > 0 {
        // The rank index kept, then not kept (what it costs comment likes), then kept again.
        for rank_index in [true, false, true] {
            top_over_http(a.top, a.like_seconds, rank_index, a.uniform_likes).await?;
        }
        return Ok(());
    }
    anyhow::ensure!(a.depth + 20 <= a.comments, "--depth must leave a full page");
    let Fresh { svc, stores, .. } = &fresh().await?;
    write_comments(stores, a.comments).await?;
    // Count and rank them as the service's aggregator would (the ranking reads its index).
    let started = Instant::now();
    let (mut agg, _) =
        likewise_workers::Aggregator::new(svc.clone(), likewise_workers::AggregatorOptions::default())
            .await?;
    while agg.step(&[]).await?.more {}
    println!("aggregated and ranked in {:.1} s", started.elapsed().as_secs_f64());

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
    let head = svc.ranking.compute(PostId(1)).await?.ranked.len();
    anyhow::ensure!(head == likewise_service::ranking::TOP_K, "a ranking head of {head} comments");
    println!(
        "ranking heads read from the rank index: {per_sec:.0}/s ({:.0} comments/s)",
        per_sec * head as f64
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
        let started = Instant::now();
        let svc = svc.clone();
        let round_lat = claim::each(n, 64, move |i| {
            let svc = svc.clone();
            async move {
                let user = UserId(base + i);
                let key = keyed
                    .then(|| IdempotencyKey::parse(format!("bench-{}", user.0).as_bytes()))
                    .transpose()?;
                let text = format!("a comment from {} with a few ordinary words", user.0);
                let t0 = Instant::now();
                svc.comments.create(user, PostId(1), &text, None, key).await?;
                Ok(t0.elapsed().as_micros() as u64)
            }
        })
        .await?;
        lat[usize::from(keyed)].extend(round_lat);
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

/// `n` comments on post 1 from 5,000 authors, through the write path, 256 at a time; their
/// IDs.
async fn write_comments(stores: &Stores, n: u64) -> anyhow::Result<Vec<CommentId>> {
    println!("writing {n} comments on one post...");
    let bar = progress(n);
    let started = Instant::now();
    // What every write needs, behind one `Arc`: one clone per write.
    let shared = Arc::new((stores.writer.clone(), bar.clone()));
    let ids = claim::each(n, 256, move |i| {
        let shared = shared.clone();
        async move {
            let (writer, bar) = &*shared;
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
            let id = match writer.submit_comment(CommentOp::Create(rec, None)).await?.outcome {
                CommentOutcome::Done(Some(r)) => r.id,
                other => anyhow::bail!("comment not written: {other:?}"),
            };
            if i % 1024 == 0 {
                bar.set_position(i);
            }
            Ok(id)
        }
    })
    .await?;
    bar.finish_and_clear();
    println!("durable comments/s: {:.0}", n as f64 / started.elapsed().as_secs_f64());
    Ok(ids)
}

/// One `--top` run: a whole service on a fresh store, serving HTTP on a local port, with `n`
/// top-level comments on post 1 (written through the write path, then ranked and counted by
/// its own aggregator). For `like_seconds`, 64 tasks like random comments through the service
/// (distinct users, like rate limit off) while one client reads the first `order=top` page
/// over HTTP, one request at a time; then the same reads with the storm over.
async fn top_over_http(n: u64, like_seconds: u64, rank_index: bool, uniform: bool) -> anyhow::Result<()> {
    use likewise_core::like::{LikeAction, Target};
    let (mut cfg, tmp) = crate::served::config(None, None, Some("127.0.0.1:0"))?;
    cfg.auth.secret = Some("bench-secret-bench-secret-bench-secret".into());
    cfg.limits.likes_per_minute = 0;
    cfg.aggregator.rank_index = rank_index;
    let served = crate::served::Served::start(&cfg, tmp).await?;
    let (svc, keys) = (served.service.clone(), served.keys.clone());
    let client = crate::client::HttpClient::new(&served.base, 4);
    let meta = likewise_core::model::PostMeta {
        author: UserId(1),
        hide_like_count: false,
        comments: likewise_core::model::CommentsPolicy::Everyone,
    };
    svc.upstream.put_post(PostId(1), meta).await?;
    println!(
        "--top {n}, rank index {}, likes {}",
        if rank_index { "kept" } else { "NOT kept (cost measurement)" },
        if uniform { "uniform over the comments" } else { "Zipf-like over the comments" }
    );
    let ids = Arc::new(write_comments(svc.stores(), n).await?);
    let started = Instant::now();
    loop {
        let c = svc.stores().counters.counts(&[Target::post(1)]).await?[0];
        if c.comments >= n as i64 {
            break;
        }
        anyhow::ensure!(started.elapsed().as_secs() < 600, "the aggregator did not catch up");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    println!("aggregated {n} comments in {:.1} s", started.elapsed().as_secs_f64());
    let token =
        keys.mint(UserId(3), false, std::time::Duration::from_secs(3600)).map_err(anyhow::Error::msg)?;
    let url = client.url("/v1/posts/1/comments?order=top&limit=20");
    let read = |client: crate::client::HttpClient, url: String, token: String, until: Instant| async move {
        let mut lat = Vec::new();
        while Instant::now() < until {
            let t0 = Instant::now();
            let (st, body) = client.send(hyper::Method::GET, &url, Some(&token), None).await?;
            anyhow::ensure!(st == hyper::StatusCode::OK, "top page: {st} {}", String::from_utf8_lossy(&body));
            lat.push(t0.elapsed().as_micros() as u64);
        }
        Ok::<_, anyhow::Error>(lat)
    };
    let until = Instant::now() + std::time::Duration::from_secs(like_seconds);
    let liked = Arc::new(AtomicU64::new(0));
    let mut likers = Vec::new();
    for t in 0..64u64 {
        let (svc, ids, liked) = (svc.clone(), ids.clone(), liked.clone());
        likers.push(tokio::spawn(async move {
            let mut user = 50_000_000 + t * 10_000_000;
            while Instant::now() < until {
                let at = if uniform {
                    rand::random_range(0..ids.len())
                } else {
                    // Log-uniform over 1..=n (Zipf with s = 1): the k-th most liked comment
                    // gets about 1/k of the top one's likes.
                    ((ids.len() as f64).powf(rand::random::<f64>()) as usize)
                        .saturating_sub(1)
                        .min(ids.len() - 1)
                };
                let id = ids[at];
                svc.likes.set_comment_like(UserId(user), id, LikeAction::Like).await?;
                user += 1;
                liked.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    let storm_started = Instant::now();
    let mut busy = read(client.clone(), url.clone(), token.clone(), until).await?;
    for l in likers {
        l.await??;
    }
    let rate = liked.load(Ordering::Relaxed) as f64 / storm_started.elapsed().as_secs_f64();
    println!("comment likes/s during the storm: {rate:.0}");
    println!("first top page over HTTP, during the storm: {}", stats::summarise(&mut busy));
    let mut idle = read(client, url, token, Instant::now() + std::time::Duration::from_secs(5)).await?;
    println!("first top page over HTTP, after it:        {}", stats::summarise(&mut idle));
    // The service's last handle outside it goes first: its directory goes with it.
    drop(svc);
    served.stop().await
}
