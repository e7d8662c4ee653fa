//! Growing a running scale-out deployment: a shard added (`likewise shards add`) and filled
//! (`likewise shards rebalance`) while likes arrive through two API nodes. A binary of its
//! own: three nodes on three shards, beside the other scale-out tests, would take more
//! connections than the server's 100.

mod common;

use common::SECRET;
use common::deployment::Deployment;
use common::proc::{Client, get_post, like_with_retry, put_post, signal, stop};
use hyper::Method;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a post's storm got acknowledged: the likers, and the comments' IDs.
#[derive(Default)]
struct Acked {
    likers: Vec<u64>,
    comments: Vec<String>,
}

/// Like `post` as each user, alternating nodes, each request twice (a retry); every fourth
/// user also comments. What answered 200 (both like requests) or 201 (the comment).
async fn storm_post(c: &Arc<Client>, bases: &[String], post: u64, users: Vec<u64>) -> Acked {
    let acked = Arc::new(Mutex::new(Acked::default()));
    let users = Arc::new(users);
    let mut tasks = Vec::new();
    for w in 0..16usize {
        let (c, bases, users, acked) = (c.clone(), bases.to_vec(), users.clone(), acked.clone());
        tasks.push(tokio::spawn(async move {
            for (i, u) in users.iter().enumerate().skip(w).step_by(16) {
                if like_with_retry(&c, &bases, i, post, *u).await {
                    acked.lock().expect("lock").likers.push(*u);
                }
                if i % 4 == 0 {
                    let body = format!(r#"{{"text":"what a view from post {post}, says {u}"}}"#);
                    let path = format!("/v1/posts/{post}/comments");
                    if let Ok((201, v)) =
                        c.call(&bases[i % bases.len()], Method::POST, &path, *u, false, &body).await
                    {
                        let id = v["comment_id"].as_str().expect("comment_id").to_string();
                        acked.lock().expect("lock").comments.push(id);
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("join");
    }
    std::mem::take(&mut *acked.lock().expect("lock"))
}

/// Every comment of `post`, through the paged list.
async fn comments(c: &Client, base: &str, post: u64) -> Vec<String> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(k) => format!("/v1/posts/{post}/comments?order=newest&limit=100&cursor={k}"),
            None => format!("/v1/posts/{post}/comments?order=newest&limit=100"),
        };
        let (st, v) = c.call(base, Method::GET, &path, 7, false, "").await.expect("comments");
        assert_eq!(st, 200, "{v}");
        for i in v["items"].as_array().expect("items") {
            out.push(i["comment_id"].as_str().expect("comment_id").to_string());
        }
        match v["next_cursor"].as_str() {
            Some(k) => cursor = Some(k.to_string()),
            None => return out,
        }
    }
}

/// One value of `/metrics` (0 when the series is not there yet).
async fn metric(c: &Client, base: &str, name: &str) -> f64 {
    use http_body_util::BodyExt;
    let resp = c.http.get(format!("{base}/metrics").parse().expect("uri")).await.expect("metrics");
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    let text = String::from_utf8_lossy(&body);
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .and_then(|l| l.split_whitespace().nth(1))
        .map_or(0.0, |v| v.parse().expect("a number"))
}

/// Shard 0's placement catalog: its version, and how many buckets shard 2 holds.
async fn catalog(url: &str) -> (i64, i64) {
    let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connect shard 0");
    tokio::spawn(conn);
    let v: i64 = c.query_one("SELECT version FROM placement_catalog", &[]).await.expect("version").get(0);
    let n: i64 =
        c.query_one("SELECT count(*) FROM placement WHERE shard = 2", &[]).await.expect("placement").get(0);
    (v, n)
}

/// The first column of `sql` (one `$1`, bound to `id`) on each of `urls`, straight from
/// PostgreSQL: which rows each shard holds.
async fn rows_per_shard(urls: &[String], sql: &str, id: u64) -> Vec<std::collections::HashSet<i64>> {
    let mut out = Vec::new();
    for url in urls {
        let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connect shard");
        tokio::spawn(conn);
        let rows = c.query(sql, &[&(id as i64)]).await.expect("rows");
        out.push(rows.iter().map(|r| r.get::<_, i64>(0)).collect());
    }
    out
}

/// A third shard joins a running two-shard deployment (`likewise shards add`, no node
/// restarted), and `likewise shards rebalance` fills it while likes and comments arrive
/// through two API nodes; the first rebalance is killed with `kill -9` midway and the second resumes.
/// Every acknowledged like and comment is on exactly one shard, counts equal rows on both
/// nodes with no drift repaired, the likers lists, comment lists and the likers' hearts are
/// right, and the new shard holds posts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_shard_is_filled_by_rebalancing_during_a_storm() {
    let d = Deployment::new().await;
    let third = likewise_scaleout::postgres::testing::TestShards::create(1).await;
    let mut urls = d.shards.urls.clone();
    urls.push(third.urls[0].clone());
    let likewise = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_likewise"))
            .args(args)
            .args(["--config", &d.config.display().to_string()])
            .env("LIKEWISE__AUTH__SECRET", SECRET)
            .output()
            .expect("likewise")
    };
    // Three nodes on three shards: smaller pools keep this test and the one running beside it
    // under the server's 100 connections.
    let config = std::fs::read_to_string(&d.config).expect("config");
    std::fs::write(&d.config, config.replace("postgres_pool_size = 8", "postgres_pool_size = 3"))
        .expect("config");
    let worker = d.start("worker");
    let (a, b) = (d.start("api"), d.start("api"));
    let bases = vec![a.base.clone(), b.base.clone()];
    let c = Arc::new(Client::new());
    // Posts in the buckets a rebalance moves first (the last of each shard's).
    let posts: Vec<u64> = (4_088..4_096).collect();
    for p in &posts {
        put_post(&c, &a.base, *p, 7).await;
    }
    // `shards add` refuses a shard listed already, and one that holds rows.
    let out = likewise(&["shards", "add", &urls[1]]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("listed"), "{out:?}");
    let used = likewise_scaleout::postgres::testing::TestShards::create(1).await;
    used.client(0)
        .await
        .batch_execute("INSERT INTO likes (kind, target, user_id, post_id, liked_at) VALUES (1, 5, 6, 5, 1)")
        .await
        .expect("a row");
    let out = likewise(&["shards", "add", &used.urls[0]]);
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("must be empty"),
        "{out:?}"
    );

    // The storm, with a rebalance killed midway and one run to the end during it.
    let storm = {
        let (c, bases, posts) = (c.clone(), bases.clone(), posts.clone());
        tokio::spawn(async move {
            let mut acked = Vec::new();
            for (k, p) in posts.iter().enumerate() {
                let users: Vec<u64> = (10_000 + k as u64 * 1_000..10_000 + k as u64 * 1_000 + 150).collect();
                acked.push(storm_post(&c, &bases, *p, users).await);
            }
            acked
        })
    };
    // The third shard joins while the nodes run (no restart): registered in the catalog,
    // which they read within a second, and appended to the configuration file.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let out = likewise(&["shards", "add", &urls[2]]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("shard 2 added"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config = std::fs::read_to_string(&d.config).expect("config");
    assert!(config.contains(&urls[2]), "{config}");
    let out = likewise(&["shards", "rebalance", "--plan"]);
    let plan = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success() && plan.contains("to shard 2"), "{plan}");
    let (registered, _) = catalog(&urls[0]).await;
    let mut first = std::process::Command::new(env!("CARGO_BIN_EXE_likewise"))
        .args([
            "shards",
            "rebalance",
            "--buckets-per-move",
            "64",
            "--config",
            &d.config.display().to_string(),
        ])
        .env("LIKEWISE__AUTH__SECRET", SECRET)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("rebalance");
    // Killed once its first move has switched the catalog: 22 moves of 64 buckets, so midway.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while catalog(&urls[0]).await.0 == registered {
        assert!(
            first.try_wait().expect("try_wait").is_none(),
            "the first rebalance ended before its first move"
        );
        assert!(std::time::Instant::now() < deadline, "no move switched the catalog in 60 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    signal(&first, "-KILL");
    let _ = first.wait();
    let (_, held) = catalog(&urls[0]).await;
    assert!(0 < held && held < 1365, "killed midway: shard 2 holds {held} buckets");
    let out = likewise(&["shards", "rebalance", "--buckets-per-move", "256"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("shard 2: 1365 buckets"), "{text}");
    eprintln!("the second rebalance:\n{text}");
    // Its progress, in plain lines on stderr (not a terminal here): from none of the buckets
    // it planned to move to all of them.
    let progress = String::from_utf8_lossy(&out.stderr);
    let planned = progress
        .lines()
        .find_map(|l| l.strip_prefix("shards rebalance: 0/")?.strip_suffix(" buckets (0%)"))
        .unwrap_or_else(|| panic!("a first progress line: {progress}"));
    assert!(planned.parse::<u64>().is_ok_and(|n| n > 0), "{progress}");
    assert!(
        progress
            .lines()
            .any(|l| l.starts_with(&format!("shards rebalance: {planned}/{planned} buckets done in "))),
        "a closing progress line: {progress}"
    );
    let acked = storm.await.expect("storm");

    let mut on_third = 0;
    for (p, acked) in posts.iter().zip(&acked) {
        let per_shard =
            rows_per_shard(&urls, "SELECT user_id FROM likes WHERE kind = 1 AND target = $1", *p).await;
        let all: Vec<i64> = per_shard.iter().flat_map(|s| s.iter().copied()).collect();
        let distinct: std::collections::HashSet<u64> = all.iter().map(|u| *u as u64).collect();
        assert_eq!(all.len(), distinct.len(), "post {p}: a like row on two shards");
        assert_eq!(per_shard.iter().filter(|s| !s.is_empty()).count(), 1, "post {p}: rows on one shard");
        on_third += usize::from(!per_shard[2].is_empty());
        for u in &acked.likers {
            assert!(distinct.contains(u), "post {p}: acknowledged like of {u} lost");
        }
        for base in &bases {
            c.wait_count(base, *p, distinct.len() as i64).await;
        }
        assert_eq!(c.likers(&b.base, *p).await, distinct, "post {p}: likers list");
        for u in acked.likers.iter().take(5) {
            assert_eq!(get_post(&c, &a.base, *p, *u).await["viewer_has_liked"], true, "post {p} user {u}");
        }
        // Comments: each on one shard, the post's; every acknowledged one listed on both
        // nodes; the count equals the rows.
        let per_shard = rows_per_shard(&urls, "SELECT id FROM comments WHERE post_id = $1", *p).await;
        let rows: std::collections::HashSet<String> =
            per_shard.iter().flat_map(|s| s.iter().map(|id| id.to_string())).collect();
        assert_eq!(
            per_shard.iter().map(|s| s.len()).sum::<usize>(),
            rows.len(),
            "post {p}: a comment on two shards"
        );
        assert!(
            per_shard.iter().filter(|s| !s.is_empty()).count() <= 1,
            "post {p}: comments on more than one shard"
        );
        assert!(!acked.comments.is_empty(), "post {p}: no comment was acknowledged");
        for base in &bases {
            let listed: std::collections::HashSet<String> =
                comments(&c, base, *p).await.into_iter().collect();
            assert_eq!(listed, rows, "post {p}: the comments listed are the rows");
            for id in &acked.comments {
                assert!(listed.contains(id), "post {p}: acknowledged comment {id} lost");
            }
            let deadline = std::time::Instant::now() + Duration::from_secs(15);
            loop {
                let v = get_post(&c, base, *p, common::OBSERVER).await;
                if v["comment_count"].as_u64() == Some(rows.len() as u64) {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "post {p}: comment_count {v} is not {}",
                    rows.len()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    // The counts came from the stream's events alone: had one been lost or applied twice
    // across a move, a count would have been off, and reconciliation would have repaired it.
    assert_eq!(metric(&c, &worker.base, "likewise_reconcile_drift_total").await, 0.0, "no drift repaired");
    assert!(on_third >= posts.len() / 2, "the new shard holds posts: {on_third}");
    let out = likewise(&["shards", "status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("shard 2: ") && !text.contains("moves in progress"),
        "{text}"
    );
    for s in [a, b, worker] {
        stop(s);
    }
    d.cleanup().await;
}
