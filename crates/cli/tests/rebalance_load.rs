//! `likewise shards rebalance` under a write storm on two API nodes, every writer aiming at
//! posts whose buckets move: no acknowledged like or comment is lost, counts equal the rows on
//! both nodes, and the run prints how long writes to a moving bucket were held and the
//! longest request (figures; the assert on them is only a generous ceiling, speed targets
//! belong in benchmarks). A binary of its own: three shards under two API nodes and a
//! worker take most of the server's 100 connections.

mod common;


use common::SECRET;
use common::deployment::Deployment;
use common::proc::{Client, put_post, stop};
use hyper::Method;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Writers of the storm, spread over the two nodes.
const WRITERS: u64 = 24;

/// What the storm got acknowledged, and how long its requests took.
#[derive(Default)]
struct Storm {
    /// Per post: the users whose like answered 200.
    likers: HashMap<u64, HashSet<u64>>,
    /// Per post: the comments answered 201.
    comments: HashMap<u64, HashSet<String>>,
    requests: usize,
    /// Answered other than 200/201 (not acknowledged), by status (0: no answer).
    refused: HashMap<u16, usize>,
    longest: Duration,
}

/// One writer until `stop`: each round a new user likes a post (through the node of the
/// round), and every third round also comments on it.
async fn writer(
    c: Arc<Client>,
    bases: Vec<String>,
    posts: Vec<u64>,
    me: u64,
    stop: Arc<AtomicBool>,
) -> Storm {
    let mut s = Storm::default();
    let mut round = 0u64;
    while !stop.load(Ordering::Acquire) {
        round += 1;
        let user = 1_000_000 + me * 100_000 + round;
        let post = posts[((me + round) % posts.len() as u64) as usize];
        let base = &bases[(round % bases.len() as u64) as usize];
        let mut timed = |answer: &Result<(u16, serde_json::Value), String>, took: Duration| {
            s.requests += 1;
            s.longest = s.longest.max(took);
            let st = answer.as_ref().map_or(0, |(st, _)| *st);
            if st != 200 && st != 201 {
                *s.refused.entry(st).or_default() += 1;
            }
        };
        let t = Instant::now();
        let answer = c.call(base, Method::PUT, &format!("/v1/posts/{post}/like"), user, false, "").await;
        timed(&answer, t.elapsed());
        if let Ok((200, v)) = &answer {
            assert_eq!(v["liked"], true, "{v}");
            s.likers.entry(post).or_default().insert(user);
        }
        if round.is_multiple_of(3) {
            let body = format!(r#"{{"text":"round {round} of writer {me}"}}"#);
            let t = Instant::now();
            let answer =
                c.call(base, Method::POST, &format!("/v1/posts/{post}/comments"), user, false, &body).await;
            timed(&answer, t.elapsed());
            if let Ok((201, v)) = &answer {
                let id = v["comment_id"].as_str().expect("comment_id").to_string();
                s.comments.entry(post).or_default().insert(id);
            }
        }
    }
    s
}

/// The first column of `sql` (one `$1`, bound to `id`) on each of `urls`.
async fn rows_per_shard(urls: &[String], sql: &str, id: u64) -> Vec<HashSet<i64>> {
    let mut out = Vec::new();
    for url in urls {
        let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connect shard");
        tokio::spawn(conn);
        let rows = c.query(sql, &[&(id as i64)]).await.expect("rows");
        out.push(rows.iter().map(|r| r.get::<_, i64>(0)).collect());
    }
    out
}

/// The rows of `sql` for `id` over every shard, asserting they are all on one shard.
async fn rows_on_one_shard(urls: &[String], sql: &str, id: u64) -> HashSet<i64> {
    let per_shard = rows_per_shard(urls, sql, id).await;
    assert!(per_shard.iter().filter(|s| !s.is_empty()).count() <= 1, "post {id}: rows on two shards");
    per_shard.into_iter().flatten().collect()
}

// Open (issue 45): in 2 of 19 runs on a heavily loaded machine a like or comment count did not
// equal its rows within 15 s after the move; whether that is slow convergence under load or an
// event lost or applied twice across a move is not known yet. Out of the README's test command
// until it is: `cargo test -p likewise --test rebalance_load -- --ignored --nocapture`.
#[ignore = "issue 45: counts missed their rows within 15 s in 2 of 19 loaded runs; cause unknown"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebalance_under_a_storm_keeps_every_write_and_prints_its_holds() {
    let d = Deployment::new().await;
    let third = likewise_scaleout::postgres::testing::TestShards::create(1).await;
    let mut urls = d.shards.urls.clone();
    urls.push(third.urls[0].clone());
    let config = std::fs::read_to_string(&d.config).expect("config");
    std::fs::write(&d.config, config.replace("postgres_pool_size = 8", "postgres_pool_size = 3"))
        .expect("config");
    let likewise = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_likewise"))
            .args(args)
            .args(["--config", &d.config.display().to_string()])
            .env("LIKEWISE__AUTH__SECRET", SECRET)
            .output()
            .expect("likewise")
    };
    let worker = d.start("worker");
    let (a, b) = (d.start("api"), d.start("api"));
    let bases = vec![a.base.clone(), b.base.clone()];
    let c = Client::new();
    // Posts in buckets the rebalance moves (the top third of the 4,096, half of each shard's).
    let posts: Vec<u64> = (0..32).map(|k| 2_900 + k * 37).collect();
    for p in &posts {
        put_post(&c, &a.base, *p, 7).await;
    }
    let out = likewise(&["shards", "add", &urls[2]]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let stop_storm = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|me| tokio::spawn(writer(c.clone(), bases.clone(), posts.clone(), me, stop_storm.clone())))
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = Instant::now();
    let config = d.config.display().to_string();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_likewise"))
            .args(["shards", "rebalance", "--buckets-per-move", "128", "--config", &config])
            .env("LIKEWISE__AUTH__SECRET", SECRET)
            .output()
            .expect("rebalance")
    })
    .await
    .expect("rebalance");
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop_storm.store(true, Ordering::Release);
    let mut storm = Storm::default();
    for w in writers {
        let s = w.await.expect("writer");
        for (p, users) in s.likers {
            storm.likers.entry(p).or_default().extend(users);
        }
        for (p, ids) in s.comments {
            storm.comments.entry(p).or_default().extend(ids);
        }
        storm.requests += s.requests;
        for (st, n) in s.refused {
            *storm.refused.entry(st).or_default() += n;
        }
        storm.longest = storm.longest.max(s.longest);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("shard 2: 1365 buckets"), "{text}");
    let holds: Vec<u64> = text
        .lines()
        .filter_map(|l| l.split("writes to them waited ").nth(1)?.strip_suffix(" ms")?.parse().ok())
        .collect();
    assert!(!holds.is_empty(), "{text}");
    let mut sorted = holds.clone();
    sorted.sort_unstable();
    eprintln!(
        "rebalance under a storm: {} moves in {:.1} s; writes to a moving bucket held {} ms at most \
         (median {} ms); {} requests ({:.0}/s), the longest {} ms; not acknowledged: {:?}",
        holds.len(),
        took.as_secs_f64(),
        sorted[sorted.len() - 1],
        sorted[sorted.len() / 2],
        storm.requests,
        storm.requests as f64 / (took.as_secs_f64() + 3.0),
        storm.longest.as_millis(),
        storm.refused
    );

    // Every acknowledged write is there, on one shard; counts equal the rows on both nodes.
    let mut failures = Vec::new();
    for p in &posts {
        let likers =
            rows_on_one_shard(&urls, "SELECT user_id FROM likes WHERE kind = 1 AND target = $1", *p).await;
        for u in storm.likers.get(p).into_iter().flatten() {
            assert!(likers.contains(&(*u as i64)), "post {p}: acknowledged like of {u} lost");
        }
        let comments = rows_on_one_shard(&urls, "SELECT id FROM comments WHERE post_id = $1", *p).await;
        let comments: HashSet<String> = comments.iter().map(i64::to_string).collect();
        for id in storm.comments.get(p).into_iter().flatten() {
            assert!(comments.contains(id), "post {p}: acknowledged comment {id} lost");
        }
        for base in &bases {
            for (field, want) in [("like_count", likers.len() as i64), ("comment_count", comments.len() as i64)] {
                if let Some(f) = diag::converge(&c, base, &urls, &d.prefix, *p, field, want).await {
                    failures.push(f);
                }
            }
        }
    }
    for u in &urls {
        eprintln!("DIAG relay order on {}: {}", u.rsplit('/').next().unwrap_or(u), diag::reordered(u).await);
    }
    assert!(failures.is_empty(), "counts missed their rows: {failures:#?}");
    let acked: usize = storm.likers.values().map(HashSet::len).sum();
    assert!(acked > 500, "the storm got too little acknowledged to tell: {acked}");
    // A generous ceiling only: the figures above are what to read.
    assert!(storm.longest < Duration::from_secs(10), "a request took {:?}", storm.longest);
    for s in [a, b, worker] {
        stop(s);
    }
    d.cleanup().await;
}

/// Temporary diagnostics (issue 45): what a count that misses its rows looks like.
mod diag {
    use super::*;

    async fn connect(url: &str) -> tokio_postgres::Client {
        let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connect shard");
        tokio::spawn(conn);
        c
    }

    /// Outbox rows relayed after a row with a higher seq (the relay published out of seq order).
    pub async fn reordered(url: &str) -> String {
        let c = connect(url).await;
        let r = c
            .query_one(
                "SELECT count(*) FILTER (WHERE stream_seq < m), count(*), max(seq - lo) FROM (
                   SELECT seq, stream_seq,
                          max(stream_seq) OVER (ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) m,
                          min(CASE WHEN stream_seq IS NOT NULL THEN seq END) OVER
                            (ORDER BY stream_seq DESC ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) lo
                   FROM outbox) x",
                &[],
            )
            .await
            .expect("reordered");
        format!("{} of {} outbox rows relayed after a later-seq row", r.get::<_, i64>(0), r.get::<_, i64>(1))
    }

    async fn value(c: &Client, base: &str, post: u64, field: &str) -> Option<i64> {
        let (st, v) = c
            .call(base, Method::GET, &format!("/v1/posts/{post}"), common::OBSERVER, false, "")
            .await
            .ok()?;
        (st == 200).then(|| v[field].as_i64()).flatten()
    }

    /// Wait for `field` of `post` to read `want` on `base`: `None` within 15 s; else a dump
    /// of the post's state, polling on for 120 s.
    pub async fn converge(
        c: &Client,
        base: &str,
        urls: &[String],
        prefix: &str,
        post: u64,
        field: &str,
        want: i64,
    ) -> Option<String> {
        let start = Instant::now();
        let mut got = None;
        while start.elapsed() < Duration::from_secs(15) {
            got = value(c, base, post, field).await;
            if got == Some(want) {
                if start.elapsed() > Duration::from_millis(500) {
                    eprintln!("DIAG slow post {post} {field} on {base}: {:?}", start.elapsed());
                }
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        eprintln!("DIAG MISS post {post} {field} on {base}: {got:?}, rows {want} ({:+})", got.unwrap_or(0) - want);
        dump(urls, prefix, post).await;
        let mut last = got;
        let mut converged = None;
        while start.elapsed() < Duration::from_secs(135) {
            let now = value(c, base, post, field).await;
            if now != last {
                eprintln!("DIAG   at {:.1} s: {now:?}", start.elapsed().as_secs_f64());
                last = now;
            }
            if now == Some(want) {
                converged = Some(start.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        eprintln!("DIAG post {post} {field}: converged {converged:?}; last {last:?} want {want}");
        dump(urls, prefix, post).await;
        Some(format!(
            "post {post} {field} on {base}: {got:?} at 15 s, rows {want}; converged after {converged:?}"
        ))
    }

    /// Everything about `post` on every shard and in Redis.
    pub async fn dump(urls: &[String], prefix: &str, post: u64) {
        let bucket = (post % 4096) as i32;
        let c0 = connect(&urls[0]).await;
        let placed: i32 =
            c0.query_one("SELECT shard FROM placement WHERE bucket = $1", &[&bucket]).await.expect("placed").get(0);
        let moves: Vec<String> = c0
            .query("SELECT bucket, source, target, phase FROM bucket_moves WHERE bucket = $1", &[&bucket])
            .await
            .expect("moves")
            .iter()
            .map(|r| format!("{:?}", (r.get::<_, i32>(0), r.get::<_, i32>(1), r.get::<_, i32>(2), r.get::<_, String>(3))))
            .collect();
        eprintln!("DIAG post {post} bucket {bucket}: started on shard {}, placed on {placed}; journal {moves:?}", bucket % 2);
        for (k, url) in urls.iter().enumerate() {
            let c = connect(url).await;
            let likes: i64 = c
                .query_one("SELECT count(*) FROM likes WHERE kind = 1 AND target = $1", &[&(post as i64)])
                .await
                .expect("likes")
                .get(0);
            let comments: Vec<(i16, i64)> = c
                .query("SELECT status::smallint, count(*) FROM comments WHERE post_id = $1 GROUP BY 1", &[&(post as i64)])
                .await
                .map(|rows| rows.iter().map(|r| (r.get(0), r.get(1))).collect())
                .unwrap_or_default();
            let counters: Vec<(i16, i64)> = c
                .query("SELECT field, value FROM counters WHERE kind = 1 AND target = $1 ORDER BY field", &[&(post as i64)])
                .await
                .expect("counters")
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect();
            let offsets: Vec<(String, i64)> = c
                .query("SELECT consumer, upto FROM consumer_offsets ORDER BY consumer", &[])
                .await
                .expect("offsets")
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect();
            let fences: Vec<String> = c
                .query("SELECT moved, logging FROM bucket_fences WHERE bucket = $1", &[&bucket])
                .await
                .map(|rows| rows.iter().map(|r| format!("moved {} logging {}", r.get::<_, bool>(0), r.get::<_, bool>(1))).collect())
                .unwrap_or_default();
            let o = c
                .query_one(
                    "SELECT count(*), count(*) FILTER (WHERE stream_seq IS NULL), max(seq), max(stream_seq) FROM outbox",
                    &[],
                )
                .await
                .expect("outbox");
            eprintln!(
                "DIAG  shard {k}: likes {likes}, comments by status {comments:?}, counters (field, value) {counters:?}, \
                 fences {fences:?}; outbox rows {} unrelayed {} max seq {:?} max stream_seq {:?}; offsets {offsets:?}",
                o.get::<_, i64>(0),
                o.get::<_, i64>(1),
                o.get::<_, Option<i64>>(2),
                o.get::<_, Option<i64>>(3)
            );
            let own = format!("counters@{k}");
            let at = offsets.iter().find(|(n, _)| *n == own).map_or(0, |(_, u)| *u);
            let rows = c
                .query(
                    "SELECT seq, stream_seq, body, created_ms FROM outbox WHERE part = $1 ORDER BY seq",
                    &[&((post % 64) as i16)],
                )
                .await
                .expect("outbox rows");
            let (mut like_sum, mut comment_sum, mut unapplied) = (0i64, 0i64, 0i64);
            let mut lines = Vec::new();
            for r in &rows {
                let seq: i64 = r.get(0);
                let ss: Option<i64> = r.get(1);
                let events = likewise_scaleout::postgres::outbox::unpack(r.get::<_, &[u8]>(2), |i| i as u64)
                    .expect("unpack");
                for e in events.iter().filter(|e| e.post == post) {
                    let d = e.delta();
                    if e.kind.is_like() {
                        like_sum += d;
                    } else {
                        comment_sum += d;
                    }
                    if ss.is_none_or(|s| s > at) {
                        unapplied += 1;
                    }
                    lines.push(format!("{seq}/{ss:?}/{:?}{d:+}/{}@{}", e.kind, e.actor.0, r.get::<_, i64>(3)));
                }
            }
            eprintln!(
                "DIAG  shard {k} outbox events of post {post}: {} (likes {like_sum:+}, comments {comment_sum:+}, \
                 past counters@{k}'s offset {at}: {unapplied})",
                lines.len()
            );
            if !lines.is_empty() {
                eprintln!("DIAG   seq/stream_seq/kind/actor@ms: {}", lines.join(" "));
            }
        }
        let client = redis::Client::open("redis://127.0.0.1:6379/0").expect("redis");
        if let Ok(mut r) = client.get_multiplexed_async_connection().await {
            for k in 0..4 {
                let key = format!("{prefix}:c:1:{post}#r{k}");
                let v: Result<HashMap<String, String>, _> = redis::cmd("HGETALL").arg(&key).query_async(&mut r).await;
                eprintln!("DIAG  redis {key}: {v:?}");
            }
        }
    }
}
