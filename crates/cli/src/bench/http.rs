//! `bench hot-post --url`: the same workload over HTTP against a running server, beside
//! `/healthz` and 20-post feed pages measured with the same client in the same run, so the
//! ratios say how much the like path costs over an empty request.

use super::{HotPostArgs, progress, stats};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use likewise_core::ids::UserId;
use likewise_http::auth::TokenKeys;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub(super) type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// One request; the status and the body.
pub(super) async fn call(
    client: &HttpClient,
    method: Method,
    url: &str,
    token: Option<&str>,
    body: Option<String>,
) -> anyhow::Result<(StatusCode, Bytes)> {
    let mut req = Request::builder().method(method).uri(url);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let body = match body {
        Some(b) => {
            req = req.header("content-type", "application/json");
            Full::new(Bytes::from(b))
        }
        None => Full::new(Bytes::new()),
    };
    let resp = client.request(req.body(body)?).await?;
    let status = resp.status();
    let bytes = resp.into_body().collect().await?.to_bytes();
    Ok((status, bytes))
}

/// The post's `like_count` as `token`'s holder reads it (None when hidden from them).
pub(super) async fn like_count(
    client: &HttpClient,
    base: &str,
    post: u64,
    token: &str,
) -> anyhow::Result<Option<u64>> {
    let (st, b) = call(client, Method::GET, &format!("{base}/v1/posts/{post}"), Some(token), None).await?;
    anyhow::ensure!(st == StatusCode::OK, "read post: {st}");
    Ok(serde_json::from_slice::<serde_json::Value>(&b)?["like_count"].as_u64())
}

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

/// IDs of one run: fresh per run, so runs against one server do not collide.
pub(super) struct Setup {
    /// The post everyone likes (also the first of the feed page).
    pub(super) hot: u64,
    /// Author of the run's posts.
    pub(super) author: u64,
    /// The 20 posts of the feed page.
    pub(super) feed_ids: Vec<u64>,
    /// First user ID of the run's likers and viewers.
    pub(super) user_base: u64,
}

pub async fn hot_post(base: &str, a: &HotPostArgs) -> anyhow::Result<()> {
    let base = base.trim_end_matches('/').to_string();
    let secret = super::server_secret(a.secret.as_deref(), a.config.as_deref(), a.data_dir.as_deref())?;
    let keys = TokenKeys::new(&secret);
    let ttl = Duration::from_secs(3600);
    let mint = |u: u64, svc: bool| keys.mint(UserId(u), svc, ttl).map_err(|e| anyhow::anyhow!(e));
    let client: HttpClient =
        Client::builder(TokioExecutor::new()).pool_max_idle_per_host(a.concurrency).build_http();

    // Fresh IDs per run so runs against one server do not collide.
    let run = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs() % 1_000_000;
    let hot = run * 1000 + 1;
    let author = 7u64;
    let service = mint(author, true)?;
    let feed_ids: Vec<u64> = (0..20).map(|i| hot + i).collect();
    for id in &feed_ids {
        let body = format!(r#"{{"author_id":"{author}"}}"#);
        let (st, b) =
            call(&client, Method::PUT, &format!("{base}/v1/posts/{id}"), Some(&service), Some(body)).await?;
        anyhow::ensure!(st == StatusCode::OK, "registering post {id}: {st} {}", String::from_utf8_lossy(&b));
    }
    println!(
        "hot-post over HTTP at {base}: {} likers on post {hot}, concurrency {}",
        a.likers, a.concurrency
    );
    let user_base = 10_000_000 + run * 10_000_000;
    if a.client == super::Client::Wrk {
        let setup = Setup { hot, author, feed_ids, user_base };
        return super::wrk::hot_post(&base, a, &keys, &client, &setup).await;
    }

    // Phase 1: /healthz, the cheapest request the server answers.
    let (c, u) = (client.clone(), format!("{base}/healthz"));
    let (health_rate, mut hl) = timed_phase(a.concurrency, a.phase_seconds, move |_| {
        let (c, u) = (c.clone(), u.clone());
        async move {
            let (st, _) = call(&c, Method::GET, &u, None, None).await?;
            anyhow::ensure!(st == StatusCode::OK, "healthz {st}");
            Ok(())
        }
    })
    .await?;
    println!("/healthz: {health_rate:.0} req/s   {}", stats::summarise(&mut hl));

    // Phase 2: likes from distinct users on one post. Tokens are minted up front so the
    // client's signing cost does not compete with the server for the CPU.
    let tokens: Arc<Vec<String>> = Arc::new(
        (0..a.likers)
            .map(|i| keys.mint(UserId(user_base + i), false, ttl))
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow::anyhow!(e))?,
    );
    let next = Arc::new(AtomicU64::new(0));
    let bar = progress(a.likers);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..a.concurrency {
        let (client, next, bar, tokens) = (client.clone(), next.clone(), bar.clone(), tokens.clone());
        let (n, url) = (a.likers, format!("{base}/v1/posts/{hot}/like"));
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok::<_, anyhow::Error>(lat);
                }
                let t0 = Instant::now();
                let (st, b) = call(&client, Method::PUT, &url, Some(&tokens[i as usize]), None).await?;
                lat.push(t0.elapsed().as_micros() as u64);
                anyhow::ensure!(st == StatusCode::OK, "like {st}: {}", String::from_utf8_lossy(&b));
                if i % 1024 == 0 {
                    bar.set_position(i);
                }
            }
        }));
    }
    let mut samples = Vec::new();
    for t in tasks {
        samples.extend(t.await??);
    }
    let like_elapsed = started.elapsed();
    bar.finish_and_clear();
    let last_write = Instant::now();
    let like_rate = a.likers as f64 / like_elapsed.as_secs_f64();
    println!("likes on one post: {like_rate:.0} likes/s   {}", stats::summarise(&mut samples));

    // Convergence: the author reads the post until the count equals the distinct likers.
    let author_token = mint(author, false)?;
    let converged = loop {
        if like_count(&client, &base, hot, &author_token).await? == Some(a.likers) {
            break Some(last_write.elapsed());
        }
        if last_write.elapsed() > Duration::from_secs(30) {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };

    // Phase 3: 20-post feed pages, each viewer different.
    let ids = feed_ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",");
    let (c, u, k) = (client.clone(), format!("{base}/v1/posts?ids={ids}"), keys.clone());
    let viewer_tokens: Arc<Vec<String>> = Arc::new(
        (0..1000u64)
            .map(|i| k.mint(UserId(user_base + i), false, ttl))
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow::anyhow!(e))?,
    );
    let (feed_rate, mut fl) = timed_phase(a.concurrency, a.phase_seconds, move |i| {
        let (c, u, t) = (c.clone(), u.clone(), viewer_tokens.clone());
        async move {
            let (st, _) = call(&c, Method::GET, &u, Some(&t[(i % 1000) as usize]), None).await?;
            anyhow::ensure!(st == StatusCode::OK, "feed {st}");
            Ok(())
        }
    })
    .await?;
    println!("20-post feed pages: {feed_rate:.0} pages/s   {}", stats::summarise(&mut fl));
    println!(
        "ratios to /healthz: likes {:.2}x (target >= 0.5x), feed pages {:.2}x (target >= 0.3x)",
        like_rate / health_rate,
        feed_rate / health_rate
    );
    match converged {
        Some(d) => {
            println!("count converged to {} {:.0} ms after the last like", a.likers, d.as_secs_f64() * 1000.0)
        }
        None => anyhow::bail!("count did NOT converge to {} within 30 s", a.likers),
    }
    println!("check: final count == distinct likers ({})  OK", a.likers);
    Ok(())
}
