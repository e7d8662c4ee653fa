//! `bench hot-post --url`: the same workload over HTTP against a running server, with the
//! built-in (hyper) client, beside `/healthz` and 20-post feed pages measured with the same
//! client in the same run, so the ratios say how much the like path costs over an empty
//! request.

use crate::claim;
use crate::client::HttpClient;
use crate::hot_post::{HotPostArgs, Remote, print_ratios};
use crate::stats::{self, progress};
use hyper::{Method, StatusCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Run `concurrency` loops of `f` for `secs` seconds; returns requests/s and latencies.
async fn timed_phase<F, Fut>(concurrency: usize, secs: u64, f: F) -> anyhow::Result<(f64, Vec<u64>)>
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let f = Arc::new(f);
    let deadline = Instant::now() + Duration::from_secs(secs);
    let counter = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (f, counter) = (f.clone(), counter.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            while Instant::now() < deadline {
                let i = counter.fetch_add(1, Ordering::Relaxed);
                let t0 = Instant::now();
                f(i).await?;
                lat.push(t0.elapsed().as_micros() as u64);
            }
            Ok::<_, anyhow::Error>(lat)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await??);
    }
    Ok((all.len() as f64 / started.elapsed().as_secs_f64(), all))
}

/// The hot-post run over HTTP with the built-in client.
pub async fn hot_post(base: &str, a: &HotPostArgs) -> anyhow::Result<()> {
    let run = Remote::prepare(base, a).await?;
    let health_rate = health_phase(&run.client, a).await?;
    let (like_rate, last_write) = like_phase(&run, a).await?;

    // Convergence: the author reads the post until the count equals the distinct likers.
    let author_token = run.mint(run.author, false)?;
    let converged = loop {
        if run.client.like_count(run.hot, &author_token).await? == Some(a.likers) {
            break Some(last_write.elapsed());
        }
        if last_write.elapsed() > Duration::from_secs(30) {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };

    let feed_rate = feed_phase(&run, a).await?;
    print_ratios(like_rate, feed_rate, health_rate);
    match converged {
        Some(d) => {
            println!("count converged to {} {:.0} ms after the last like", a.likers, d.as_secs_f64() * 1000.0)
        }
        None => anyhow::bail!("count did NOT converge to {} within 30 s", a.likers),
    }
    println!("check: final count == distinct likers ({})  OK", a.likers);
    Ok(())
}

/// Phase 1: /healthz, the cheapest request the server answers. Returns requests/s.
async fn health_phase(client: &HttpClient, a: &HotPostArgs) -> anyhow::Result<f64> {
    let (c, u) = (client.clone(), client.url("/healthz"));
    let (health_rate, mut hl) = timed_phase(a.concurrency, a.phase_seconds, move |_| {
        let (c, u) = (c.clone(), u.clone());
        async move {
            let (st, _) = c.send(Method::GET, &u, None, None).await?;
            anyhow::ensure!(st == StatusCode::OK, "healthz {st}");
            Ok(())
        }
    })
    .await?;
    println!("/healthz: {health_rate:.0} req/s   {}", stats::summarise(&mut hl));
    Ok(health_rate)
}

/// Phase 2: likes from distinct users on one post. Returns likes/s and when the last like
/// was answered.
async fn like_phase(run: &Remote, a: &HotPostArgs) -> anyhow::Result<(f64, Instant)> {
    // Tokens are minted up front so the client's signing cost does not compete with the
    // server for the CPU.
    let tokens = run.user_tokens(a.likers)?;
    let bar = progress(a.likers);
    let started = Instant::now();
    let url = run.client.url(&format!("/v1/posts/{}/like", run.hot));
    // What every like needs, behind one `Arc`: one clone per like.
    let shared = Arc::new((run.client.clone(), bar.clone(), tokens, url));
    let mut samples = claim::each(a.likers, a.concurrency, move |i| {
        let shared = shared.clone();
        async move {
            let (client, bar, tokens, url) = &*shared;
            let t0 = Instant::now();
            let (st, b) = client.send(Method::PUT, url, Some(&tokens[i as usize]), None).await?;
            let us = t0.elapsed().as_micros() as u64;
            anyhow::ensure!(st == StatusCode::OK, "like {st}: {}", String::from_utf8_lossy(&b));
            if i % 1024 == 0 {
                bar.set_position(i);
            }
            Ok(us)
        }
    })
    .await?;
    let like_elapsed = started.elapsed();
    bar.finish_and_clear();
    let last_write = Instant::now();
    let like_rate = a.likers as f64 / like_elapsed.as_secs_f64();
    println!("likes on one post: {like_rate:.0} likes/s   {}", stats::summarise(&mut samples));
    Ok((like_rate, last_write))
}

/// Phase 3: 20-post feed pages, each viewer different. Returns pages/s.
async fn feed_phase(run: &Remote, a: &HotPostArgs) -> anyhow::Result<f64> {
    let (c, u) = (run.client.clone(), run.client.url(&run.feed_path()));
    let viewer_tokens: Arc<Vec<String>> = Arc::new(run.user_tokens(1000)?);
    let (feed_rate, mut fl) = timed_phase(a.concurrency, a.phase_seconds, move |i| {
        let (c, u, t) = (c.clone(), u.clone(), viewer_tokens.clone());
        async move {
            let (st, _) = c.send(Method::GET, &u, Some(&t[(i % 1000) as usize]), None).await?;
            anyhow::ensure!(st == StatusCode::OK, "feed {st}");
            Ok(())
        }
    })
    .await?;
    println!("20-post feed pages: {feed_rate:.0} pages/s   {}", stats::summarise(&mut fl));
    Ok(feed_rate)
}
