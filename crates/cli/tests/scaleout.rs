//! The scale-out deployment, for real: separate `likewise` processes (two API nodes and a
//! worker) on PostgreSQL (two shards), Redis and NATS JetStream. Each test has its own
//! databases, Redis key prefix and stream prefix, and removes them when done. The servers
//! must be running (`.ci/run` starts them); a test fails, never skips, without them.

mod common;

use common::SECRET;
use common::deployment::Deployment;
use common::proc::{Client, get_post, like_with_retry, put_post, stop};
use hyper::Method;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Like `post` as each user, alternating nodes, each request twice (a retry).
async fn like_all(c: &Arc<Client>, bases: &[String], post: u64, users: Vec<u64>) -> Vec<u64> {
    let acked = Arc::new(Mutex::new(Vec::new()));
    let users = Arc::new(users);
    let mut tasks = Vec::new();
    for w in 0..16usize {
        let (c, bases, users, acked) = (c.clone(), bases.to_vec(), users.clone(), acked.clone());
        tasks.push(tokio::spawn(async move {
            for (i, u) in users.iter().enumerate().skip(w).step_by(16) {
                if like_with_retry(&c, &bases, i, post, *u).await {
                    acked.lock().expect("lock").push(*u);
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("join");
    }
    acked.lock().expect("lock").clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_api_nodes_and_a_worker_converge_to_the_rows() {
    let d = Deployment::new().await;
    // `likewise migrate` is idempotent on shards that are up to date.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_likewise"))
        .args(["migrate", "--config", &d.config.display().to_string()])
        .env("LIKEWISE__AUTH__SECRET", SECRET)
        .output()
        .expect("migrate");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("shard 1: up to date"));

    let worker = d.start("worker");
    let (a, b) = (d.start("api"), d.start("api"));
    let bases = vec![a.base.clone(), b.base.clone()];
    let c = Client::new();
    // Posts on both shards (post % 2).
    put_post(&c, &a.base, 42, 7).await;
    put_post(&c, &b.base, 43, 7).await;

    // Read-your-writes across nodes: like through A, read through B at once.
    let (st, _) = c.call(&a.base, Method::PUT, "/v1/posts/43/like", 9, false, "").await.expect("like");
    assert_eq!(st, 200);
    assert_eq!(get_post(&c, &b.base, 43, 9).await["viewer_has_liked"], true);
    let (st, _) = c.call(&b.base, Method::DELETE, "/v1/posts/43/like", 9, false, "").await.expect("unlike");
    assert_eq!(st, 200);
    assert_eq!(get_post(&c, &a.base, 43, 9).await["viewer_has_liked"], false);

    let acked = like_all(&c, &bases, 42, (1_000..1_500).collect()).await;
    assert_eq!(acked.len(), 500, "every like (and its retry) answered 200");
    like_all(&c, &bases, 43, (1_000..1_100).collect()).await;
    for base in &bases {
        c.wait_count(base, 42, 500).await;
        c.wait_count(base, 43, 100).await;
    }
    assert_eq!(d.rows(42).await, 500);
    assert_eq!(d.rows(43).await, 100);
    assert_eq!(c.likers(&b.base, 42).await.len(), 500);
    // The worker's ops endpoint answers; its API does not exist.
    let (st, _) = c.call(&worker.base, Method::GET, "/healthz", 1, false, "").await.expect("healthz");
    assert_eq!(st, 200);
    let (st, _) = c.call(&worker.base, Method::GET, "/v1/posts/42", 1, false, "").await.expect("no api");
    assert_eq!(st, 404);

    // Offline reconciliation: refused while a worker holds the shards; with the workers
    // stopped, a corrupted counter is found and repaired.
    let reconcile = |which: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_likewise"))
            .arg("reconcile")
            .args(which)
            .args(["--config", &d.config.display().to_string()])
            .env("LIKEWISE__AUTH__SECRET", SECRET)
            .output()
            .expect("reconcile")
    };
    let out = reconcile(&["--post", "43"]);
    assert!(!out.status.success(), "reconcile must not run beside a worker");
    assert!(String::from_utf8_lossy(&out.stderr).contains("held by a running worker"));
    stop(worker);
    assert_eq!(d.shift_counter(43, 7).await, 107);
    let out = reconcile(&["--post", "43"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("post 43: drift -7 repaired") || text.contains("drift -7"), "{text}");
    assert_eq!(d.shift_counter(43, 0).await, 100);
    // Lost liker pages: the likers list misses those likers until reconcile rebuilds it.
    assert_eq!(d.lose_liker_pages(43).await, 100);
    assert!(c.likers(&b.base, 43).await.is_empty());
    let out = reconcile(&["--post", "43"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("likers lists rebuilt: 1"), "{text}");
    assert_eq!(c.likers(&b.base, 43).await.len(), 100);
    // `--all` on both shards: post 42's list, damaged the same way, is rebuilt; 43 is fine.
    assert_eq!(d.lose_liker_pages(42).await, 500);
    let out = reconcile(&["--all"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains("reconciled 2 posts: 0 drifted") && text.contains("likers lists rebuilt: 1"),
        "{text}"
    );
    assert_eq!(c.likers(&b.base, 42).await.len(), 500);
    // `likewise shards status`: each shard, its likes table, no replica, and the limits.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_likewise"))
        .args(["shards", "status", "--config", &d.config.display().to_string()])
        .env("LIKEWISE__AUTH__SECRET", SECRET)
        .output()
        .expect("shards status");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for want in [
        "placement: 4096 buckets",
        "catalog version 1",
        "2048 buckets",
        "shard 0: ",
        "shard 1: ",
        "  likes ",
        "replica: none",
        "redis: 1 server(s)",
    ] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
    for s in [a, b] {
        stop(s);
    }
    d.cleanup().await;
}

/// The relay wake-ups of `cause` the process at `base` counted, over its shards.
async fn wakeups(c: &Client, base: &str, cause: &str) -> f64 {
    metric(c, base, &format!("likewise_relay_wakeups_total{{cause=\"{cause}\"}}")).await
}

/// The value of `series` (a metric's name and labels) on the process at `base`, summed.
async fn metric(c: &Client, base: &str, series: &str) -> f64 {
    use http_body_util::BodyExt;
    let resp = c.http.get(format!("{base}/metrics").parse().expect("uri")).await.expect("metrics");
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    String::from_utf8_lossy(&body)
        .lines()
        .filter(|l| l.split_whitespace().next() == Some(series))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .fold(0.0, |a, b| a + b)
}

/// An idle worker waits for work instead of polling for it: at most 10 PostgreSQL
/// transactions a second per shard (its relays used to poll their outboxes every 5 ms, 200
/// a second each). A like made while it idles still reaches its count and its author's
/// notification as fast as before: the write wakes the shard's relay (`NOTIFY`), which does
/// not wait for its one-second timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_makes_few_transactions_and_a_like_still_arrives_at_once() {
    let d = Deployment::new().await;
    let worker = d.start("worker");
    // Start-up (leases, consumers, snapshots) is over well within this once the worker runs
    // all 64 notifier partitions (each starts with a few transactions: its fence, its offset).
    let c = Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric(&c, &worker.base, "likewise_partitions_held{consumer=\"notifications\"}").await < 64.0 {
        assert!(Instant::now() < deadline, "the worker does not run the notifier's partitions");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    // The partitions' readers open after their leases are held, so on a slow machine the
    // first window can still hold their start-up: the worker is idle once one 10 s window
    // stays within the bound on every shard (a worker that polls never gets one).
    let window = Duration::from_secs(10);
    let mut windows = Vec::new();
    for _ in 0..3 {
        let before = d.transactions().await;
        tokio::time::sleep(window).await;
        let after = d.transactions().await;
        let rates: Vec<f64> =
            before.iter().zip(&after).map(|(b, a)| (a - b) as f64 / window.as_secs_f64()).collect();
        let idle = rates.iter().all(|r| *r <= 10.0);
        windows.push(rates);
        if idle {
            break;
        }
    }
    let last = windows.last().expect("a window");
    assert!(
        last.iter().all(|r| *r <= 10.0),
        "an idle worker made more than 10 transactions/s on a shard in every window: {windows:?}"
    );

    let api = d.start("api");
    let (post, author) = (21u64, 7u64);
    put_post(&c, &api.base, post, author).await;
    let woken = || wakeups(&c, &worker.base, "notified");
    let woken_before = woken().await;
    let mut took = Vec::new();
    for user in 1..=4u64 {
        // Past the relay's busy spell (500 ms after its last rows): it waits for a wake-up.
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        let (st, _) = c
            .call(&api.base, Method::PUT, &format!("/v1/posts/{post}/like"), user, false, "")
            .await
            .expect("like");
        assert_eq!(st, 200);
        let started = Instant::now();
        c.wait_count(&api.base, post, user as i64).await;
        took.push(started.elapsed());
    }
    // Each like woke its shard's relay (a missed wake-up would wait for the timeout).
    assert!(woken().await - woken_before >= 4.0, "relay wake-ups: {} then {}", woken_before, woken().await);
    took.sort();
    eprintln!("like -> count: {took:?}");
    // Today's path (aggregator window 50 ms, the count pushed to the node) takes a fraction
    // of the relay's one-second timeout, which a missed wake-up would add.
    assert!(took[1] < Duration::from_millis(700), "like -> count took {took:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (count, actors) = d.post_liked_item(author, post).await;
        if count == Some(4) && actors.len() == 4 {
            break;
        }
        assert!(Instant::now() < deadline, "the author's notification: {count:?} {actors:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for s in [api, worker] {
        stop(s);
    }
    d.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_flushed_mid_run_loses_nothing() {
    let d = Deployment::new().await;
    let worker = d.start("worker");
    let (a, b) = (d.start("api"), d.start("api"));
    let bases = vec![a.base.clone(), b.base.clone()];
    let c = Client::new();
    put_post(&c, &a.base, 10, 7).await;
    like_all(&c, &bases, 10, (1..=150).collect()).await;
    c.wait_count(&a.base, 10, 150).await;
    assert!(d.flush_redis().await > 0, "the deployment had cached keys to lose");
    // Unlike a few after the flush, like a few more.
    for u in 1..=10u64 {
        let (st, _) =
            c.call(&b.base, Method::DELETE, "/v1/posts/10/like", u, false, "").await.expect("unlike");
        assert_eq!(st, 200);
    }
    like_all(&c, &bases, 10, (151..=200).collect()).await;
    assert!(d.flush_redis().await > 0);
    for base in &bases {
        c.wait_count(base, 10, 190).await;
        // Own likes recover from the reverse index once the shared cache is gone.
        let deadline = Instant::now() + Duration::from_secs(15);
        for (user, want) in [(5u64, false), (11, true), (199, true), (4_000, false)] {
            loop {
                let got = get_post(&c, base, 10, user).await["viewer_has_liked"].as_bool();
                if got == Some(want) {
                    break;
                }
                assert!(Instant::now() < deadline, "user {user}: viewer_has_liked {got:?}, want {want}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    assert_eq!(d.rows(10).await, 190);
    for s in [a, b, worker] {
        stop(s);
    }
    d.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_killed_mid_stream_then_restarted_ends_exact() {
    let d = Deployment::new().await;
    let mut worker = d.start("worker");
    let a = d.start("api");
    let c = Client::new();
    put_post(&c, &a.base, 77, 7).await;
    let storm = {
        let (c, base) = (c.clone(), vec![a.base.clone()]);
        tokio::spawn(async move { like_all(&c, &base, 77, (10_000..13_000).collect()).await })
    };
    // Kill the worker once likes are flowing through the stream.
    let deadline = Instant::now() + Duration::from_secs(30);
    while d.rows(77).await < 500 {
        assert!(Instant::now() < deadline, "likes are not flowing");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.child.kill().expect("SIGKILL");
    worker.child.wait().expect("wait");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let worker = d.start("worker");
    let acked = storm.await.expect("storm");
    assert_eq!(acked.len(), 3_000, "the API nodes never needed the worker to answer");
    c.wait_count(&a.base, 77, 3_000).await;
    assert_eq!(d.rows(77).await, 3_000);
    stop(a);
    stop(worker);
    d.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_connections_dropped_mid_batch_end_exact() {
    let d = Deployment::new().await;
    let worker = d.start("worker");
    let a = d.start("api");
    let c = Client::new();
    put_post(&c, &a.base, 88, 7).await;
    let storm = {
        let (c, base) = (c.clone(), vec![a.base.clone()]);
        tokio::spawn(async move { like_all(&c, &base, 88, (20_000..23_000).collect()).await })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while d.rows(88).await < 300 {
        assert!(Instant::now() < deadline, "likes are not flowing");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let killed = d.drop_pg_connections().await;
    assert!(killed > 0, "there were connections to drop");
    let acked = storm.await.expect("storm");
    // Requests whose batch died with its connection got an error: retry them (idempotent).
    let missing: Vec<u64> = (20_000..23_000).filter(|u| !acked.contains(u)).collect();
    let retried = like_all(&c, std::slice::from_ref(&a.base), 88, missing.clone()).await;
    assert_eq!(retried.len(), missing.len(), "retries after reconnecting succeed");
    c.wait_count(&a.base, 88, 3_000).await;
    assert_eq!(d.rows(88).await, 3_000);
    stop(a);
    stop(worker);
    d.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn comments_ranking_and_notifications_work_across_nodes() {
    let d = Deployment::new().await;
    let worker = d.start("worker");
    let (a, b) = (d.start("api"), d.start("api"));
    let c = Client::new();
    put_post(&c, &a.base, 5, 7).await;
    put_post(&c, &a.base, 6, 8).await;

    // A comment written through A is read through B; replies thread under it.
    let (st, top) = c
        .call(&a.base, Method::POST, "/v1/posts/5/comments", 20, false, r#"{"text":"first!"}"#)
        .await
        .expect("c");
    assert_eq!(st, 201, "{top}");
    let top_id = top["comment_id"].as_str().expect("id").to_string();
    let body = format!(r#"{{"text":"a reply","parent_id":"{top_id}"}}"#);
    let (st, reply) =
        c.call(&b.base, Method::POST, "/v1/posts/5/comments", 21, false, &body).await.expect("r");
    assert_eq!(st, 201, "{reply}");
    let (st, second) = c
        .call(&b.base, Method::POST, "/v1/posts/5/comments", 22, false, r#"{"text":"second"}"#)
        .await
        .expect("c");
    assert_eq!(st, 201, "{second}");
    let second_id = second["comment_id"].as_str().expect("id").to_string();
    let (st, page) =
        c.call(&b.base, Method::GET, "/v1/posts/5/comments?order=newest", 30, false, "").await.expect("l");
    assert_eq!(st, 200, "{page}");
    let ids: Vec<&str> =
        page["items"].as_array().expect("items").iter().filter_map(|i| i["comment_id"].as_str()).collect();
    assert_eq!(ids, vec![second_id.as_str(), top_id.as_str()], "{page}");
    let path = format!("/v1/comments/{top_id}/replies");
    let (_, replies) = c.call(&a.base, Method::GET, &path, 30, false, "").await.expect("replies");
    assert_eq!(replies["items"].as_array().map(Vec::len), Some(1), "{replies}");

    // Ranking: likes on the second comment put it first in "top", on both nodes.
    for u in 100..105u64 {
        let (st, _) = c
            .call(&a.base, Method::PUT, &format!("/v1/comments/{second_id}/like"), u, false, "")
            .await
            .expect("cl");
        assert_eq!(st, 200);
    }
    for base in [&a.base, &b.base] {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let (_, page) =
                c.call(base, Method::GET, "/v1/posts/5/comments?order=top", 30, false, "").await.expect("t");
            let first = page["items"][0]["comment_id"].as_str().map(str::to_string);
            let likes = page["items"][0]["like_count"].as_i64();
            if first.as_deref() == Some(second_id.as_str()) && likes == Some(5) {
                break;
            }
            assert!(Instant::now() < deadline, "top comments did not update: {page}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    // A block made through A is enforced by B (cluster invalidation, asynchronous: probe with
    // an idempotent like until B refuses, then a comment must be refused too).
    let (st, _) =
        c.call(&b.base, Method::PUT, "/v1/posts/5/like", 41, false, "").await.expect("warm block cache");
    assert_eq!(st, 200);
    let (st, _) = c.call(&a.base, Method::PUT, "/v1/me/blocks/41", 7, false, "").await.expect("block");
    assert!(st == 200 || st == 204, "block answered {st}");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (st, _) = c.call(&b.base, Method::PUT, "/v1/posts/5/like", 41, false, "").await.expect("probe");
        if st == 403 {
            break;
        }
        assert!(Instant::now() < deadline, "B still accepts likes from a blocked user ({st})");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (st, _) = c
        .call(&b.base, Method::POST, "/v1/posts/5/comments", 41, false, r#"{"text":"hi"}"#)
        .await
        .expect("c");
    assert_eq!(st, 403, "a blocked user cannot comment through any node");

    // Notifications: the post author's inbox, aggregated, read through either node.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (st, inbox) =
            c.call(&b.base, Method::GET, "/v1/me/notifications", 7, false, "").await.expect("inbox");
        assert_eq!(st, 200, "{inbox}");
        let kinds: Vec<String> = inbox["items"]
            .as_array()
            .expect("items")
            .iter()
            .filter_map(|i| i["kind"].as_str().map(str::to_string))
            .collect();
        if kinds.iter().any(|k| k == "commented") && kinds.iter().any(|k| k == "post_liked") {
            break;
        }
        assert!(Instant::now() < deadline, "inbox did not fill: {inbox}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // One user's comment allowance is shared by the nodes (burst of 20), not multiplied.
    let mut statuses = Vec::new();
    for k in 0..26u64 {
        let base = if k % 2 == 0 { &a.base } else { &b.base };
        let body = format!(r#"{{"text":"thought number {k} on gardening and {}"}}"#, k * 7919);
        let (st, _) = c.call(base, Method::POST, "/v1/posts/6/comments", 50, false, &body).await.expect("c");
        statuses.push(st);
    }
    let created = statuses.iter().filter(|s| **s == 201).count();
    let limited = statuses.iter().filter(|s| **s == 429).count();
    // Shared: two node-local allowances would take all 26. At least the burst is allowed; a
    // token may refill (one every 3 s) while a loaded machine serves the 26.
    assert_eq!(created + limited, 26, "{statuses:?}");
    assert!((20..26).contains(&created), "{statuses:?}");

    // Three visible comments (the blocked user's was refused), on both nodes.
    for base in [&a.base, &b.base] {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (_, post) = c.call(base, Method::GET, "/v1/posts/5", 30, false, "").await.expect("post");
            if post["comment_count"] == 3 {
                break;
            }
            assert!(Instant::now() < deadline, "comment count did not converge: {post}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    for s in [a, b, worker] {
        stop(s);
    }
    d.cleanup().await;
}

/// The `post_liked` item of `post` in `author`'s inbox: its actor count.
async fn liked_item_count(c: &Client, base: &str, author: u64, post: u64) -> Option<i64> {
    let (st, v) =
        c.call(base, Method::GET, "/v1/me/notifications?limit=100", author, false, "").await.ok()?;
    assert_eq!(st, 200, "{v}");
    v["items"]
        .as_array()?
        .iter()
        .find(|i| {
            i["kind"] == "post_liked"
                && i["post_id"].as_str().and_then(|s| s.parse::<u64>().ok()) == Some(post)
        })
        .and_then(|i| i["actor_count"].as_i64())
}

/// Wait until every post's author has its `post_liked` item with `want` actors: the promise
/// is delivery within the hold (300 ms here) plus 5 s of the last like, without any later
/// traffic.
async fn wait_items(c: &Client, base: &str, posts: &[u64], want: i64, what: &str) {
    let deadline = Instant::now() + Duration::from_millis(300) + Duration::from_secs(5);
    for &p in posts {
        loop {
            let got = liked_item_count(c, base, 1_000 + p, p).await;
            if got == Some(want) {
                break;
            }
            assert!(Instant::now() < deadline, "{what}: post {p}'s item has {got:?} actors, not {want}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The active worker is killed mid-storm while a standby waits; after the storm, nothing more
/// happens. Every post's notification must still arrive in time, and a like after the
/// failover too. Five deployments in a row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_notifications_are_released_after_a_failover_without_later_traffic() {
    // Two failovers in CI (each about 17 s); LIKEWISE_FAILOVER_RUNS for more.
    let runs = std::env::var("LIKEWISE_FAILOVER_RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(2u32);
    for run in 0..runs {
        let d = Deployment::new().await;
        let mut active = d.start("worker");
        let (a, b) = (d.start("api"), d.start("api"));
        let c = Client::new();
        let posts: Vec<u64> = (1..=8).collect();
        for &p in &posts {
            put_post(&c, &a.base, p, 1_000 + p).await;
        }
        put_post(&c, &a.base, 9, 1_009).await;
        let bases = vec![a.base.clone(), b.base.clone()];
        let storm = {
            let (c, bases, posts) = (c.clone(), bases.clone(), posts.clone());
            tokio::spawn(async move {
                let mut acked = Vec::new();
                for p in posts {
                    acked.push(like_all(&c, &bases, p, (10_000..10_120).collect()).await.len());
                }
                acked
            })
        };
        // The standby joins once the active worker is busy, and the active one dies mid-storm.
        let deadline = Instant::now() + Duration::from_secs(30);
        while d.rows(1).await < 60 {
            assert!(Instant::now() < deadline, "run {run}: likes are not flowing");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let standby = d.start("worker");
        while d.rows(3).await < 30 {
            assert!(Instant::now() < deadline, "run {run}: likes are not flowing");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        active.child.kill().expect("SIGKILL");
        active.child.wait().expect("wait");
        let acked = storm.await.expect("storm");
        assert!(acked.iter().all(|n| *n == 120), "run {run}: {acked:?}");
        wait_items(&c, &b.base, &posts, 120, &format!("run {run}, the storm")).await;
        // One more like, then silence: it must not wait for traffic that never comes.
        let (st, _) =
            c.call(&a.base, Method::PUT, "/v1/posts/9/like", 20_000, false, "").await.expect("like");
        assert_eq!(st, 200);
        wait_items(&c, &b.base, &[9], 1, &format!("run {run}, after the failover")).await;
        stop(a);
        stop(b);
        stop(standby);
        d.cleanup().await;
    }
}

/// Each API node keeps its own sketch of a post's viewers; the store merges the flushed
/// sketches and insights fold the merged one in, so either node counts every node's viewers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_viewers_over_two_api_nodes_are_counted_from_either_node() {
    let d = Deployment::new().await;
    let _worker = d.start("worker");
    let (a, b) = (d.start("api"), d.start("api"));
    let bases = Arc::new(vec![a.base.clone(), b.base.clone()]);
    let c = Client::new();
    put_post(&c, &a.base, 44, 7).await;
    const VIEWERS: u64 = 2_000;
    let mut tasks = Vec::new();
    for w in 0..8u64 {
        let (c, bases) = (c.clone(), bases.clone());
        tasks.push(tokio::spawn(async move {
            for user in (20_000 + w..20_000 + VIEWERS).step_by(8) {
                // Each viewer on one node (by parity), and once more on it: a repeat view.
                let base = &bases[(user % 2) as usize];
                for _ in 0..2 {
                    let (st, v) = c
                        .call(base, Method::POST, "/v1/posts/44/views", user, false, "")
                        .await
                        .expect("view");
                    assert_eq!(st, 204, "{v}");
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("join");
    }
    for base in bases.iter() {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (st, v) =
                c.call(base, Method::GET, "/v1/posts/44/insights", 7, false, "").await.expect("insights");
            assert_eq!(st, 200, "{v}");
            let uniques = v["unique_viewers"].as_u64().expect("unique_viewers") as f64;
            if (uniques - VIEWERS as f64).abs() / VIEWERS as f64 <= 0.03 {
                break;
            }
            assert!(Instant::now() < deadline, "{base}: unique_viewers {uniques}, want {VIEWERS} within 3%");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// `order=top` pages continue on any API node: the cursor holds the walk's position, not a
/// node's state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_pages_alternate_between_api_nodes_while_comments_arrive() {
    let d = Deployment::new().await;
    let _worker = d.start("worker");
    let (a, b) = (d.start("api"), d.start("api"));
    let bases = [a.base.clone(), b.base.clone()];
    let c = Client::new();
    put_post(&c, &a.base, 46, 7).await;
    let write = |user: u64| {
        let (c, base) = (c.clone(), bases[(user % 2) as usize].clone());
        async move {
            let body = format!(r#"{{"text": "a comment from {user} about the harbor"}}"#);
            let (st, v) = c
                .call(&base, Method::POST, "/v1/posts/46/comments", user, false, &body)
                .await
                .expect("comment");
            assert_eq!(st, 201, "{v}");
            v["comment_id"].as_str().expect("id").to_string()
        }
    };
    let mut snapshot = std::collections::HashSet::new();
    for u in 10_000..10_150u64 {
        let id = write(u).await;
        if u % 9 == 0 {
            let (st, _) = c
                .call(&bases[1], Method::PUT, &format!("/v1/comments/{id}/like"), 3, false, "")
                .await
                .expect("like");
            assert_eq!(st, 200);
        }
        snapshot.insert(id);
    }
    // The 16 likes ranked (the aggregator's index) before the walk starts.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, v) = c
            .call(&bases[0], Method::GET, "/v1/posts/46/comments?order=top&limit=16", 9, false, "")
            .await
            .expect("top");
        if v["items"].as_array().is_some_and(|i| i.len() == 16 && i.iter().all(|x| x["like_count"] == 1)) {
            break;
        }
        assert!(Instant::now() < deadline, "likes never ranked: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (mut seen, mut cursor, mut newer) = (Vec::new(), String::new(), 20_000u64);
    for page in 0.. {
        let base = &bases[page % 2];
        let path = format!("/v1/posts/46/comments?order=top&limit=20{cursor}");
        let (st, v) = c.call(base, Method::GET, &path, 9, false, "").await.expect("page");
        assert_eq!(st, 200, "{v}");
        seen.extend(
            v["items"]
                .as_array()
                .expect("items")
                .iter()
                .map(|i| i["comment_id"].as_str().expect("id").to_string()),
        );
        let Some(next) = v["next_cursor"].as_str() else { break };
        cursor = format!("&cursor={next}");
        if page < 3 {
            for u in newer..newer + 20 {
                write(u).await;
            }
            newer += 20;
        }
    }
    let unique: std::collections::HashSet<String> = seen.iter().cloned().collect();
    assert_eq!(unique.len(), seen.len(), "no comment twice");
    assert_eq!(unique, snapshot, "every comment of the first page's moment, and none written after it");
}

/// Poll the `comment_count` `viewer` sees of `post` through `base` until `stop`: every
/// value seen.
fn watch_comment_count(
    c: Arc<Client>,
    base: String,
    post: u64,
    viewer: u64,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Vec<i64>> {
    tokio::spawn(async move {
        let mut seen = Vec::new();
        while !stop.load(std::sync::atomic::Ordering::Acquire) {
            seen.push(get_post(&c, &base, post, viewer).await["comment_count"].as_i64().expect("count"));
        }
        seen
    })
}

/// The author of a comment sees it counted whether it is held or not: approved through one
/// API node (no dip) or held by reports made there (never counted twice), the
/// `comment_count` they read through the other node never moves, while the counters catch
/// up and after. The other node learns of each change over the cluster bus.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_and_holds_through_one_api_node_never_move_their_authors_count_on_the_other() {
    let d = Deployment::new().await;
    let _worker = d.start("worker");
    let (a, b) = (d.start("api"), d.start("api"));
    let c = Client::new();
    let (post, post_author, author) = (42u64, 7u64, 11u64);
    put_post(&c, &a.base, post, post_author).await;
    // Restricted by the post's author: the author's comment waits for their approval.
    let path = format!("/v1/me/restricts/{author}");
    let (st, v) = c.call(&a.base, Method::PUT, &path, post_author, false, "").await.expect("restrict");
    assert_eq!(st, 204, "{v}");
    let write = |user: u64, text: &str| {
        let (c, base, body) = (c.clone(), a.base.clone(), format!(r#"{{"text":"{text}"}}"#));
        async move {
            let path = format!("/v1/posts/{post}/comments");
            let (st, v) = c.call(&base, Method::POST, &path, user, false, &body).await.expect("comment");
            assert_eq!(st, 201, "{v}");
            v["comment_id"].as_str().expect("id").to_string()
        }
    };
    write(10, "a fine post").await;
    let mine = write(author, "a thoughtful remark").await;
    let others = |want: i64| {
        let (c, base) = (c.clone(), b.base.clone());
        async move {
            let deadline = Instant::now() + Duration::from_secs(15);
            while get_post(&c, &base, post, common::OBSERVER).await["comment_count"] != want {
                assert!(Instant::now() < deadline, "others never saw {want}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    others(1).await;
    assert_eq!(get_post(&c, &b.base, post, author).await["comment_count"], 2);

    for (what, others_after) in [("approved", 2), ("held by reports", 1)] {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watchers: Vec<_> = (0..4)
            .map(|_| watch_comment_count(c.clone(), b.base.clone(), post, author, stop.clone()))
            .collect();
        tokio::time::sleep(Duration::from_millis(100)).await;
        if others_after == 2 {
            let path = format!("/v1/comments/{mine}/approve");
            let (st, v) =
                c.call(&a.base, Method::POST, &path, post_author, false, "").await.expect("approve");
            assert_eq!(st, 200, "{v}");
        } else {
            for reporter in 80..85u64 {
                let path = format!("/v1/comments/{mine}/reports");
                let body = r#"{"reason":"spam"}"#;
                let (st, v) =
                    c.call(&a.base, Method::POST, &path, reporter, false, body).await.expect("report");
                assert_eq!(st, 202, "{v}");
            }
        }
        others(others_after).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        stop.store(true, std::sync::atomic::Ordering::Release);
        let mut seen = Vec::new();
        for w in watchers {
            seen.extend(w.await.expect("join"));
        }
        let moved: Vec<&i64> = seen.iter().filter(|n| **n != 2).collect();
        assert!(moved.is_empty(), "{what}: the author saw {moved:?} among {} counts of 2", seen.len());
    }
    d.cleanup().await;
}

/// Client-side sharding over two Redis servers (`cache.redis_urls`): every key lands on the
/// server its hash slot names, the service is right with its cache split, and losing one
/// server (its keys gone) costs misses, never a wrong count or heart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_spread_over_two_redis_servers_and_losing_one_loses_nothing() {
    use futures::StreamExt;
    use likewise_scaleout::shared_cache::servers::{assign, slot};
    let mut second = common::deployment::RedisProcess::start().await;
    let d = Deployment::with_redis_servers(&[second.url.clone()], "[limits]\nlikes_per_minute = 0\n").await;
    let worker = d.start("worker");
    let (a, b) = (d.start("api"), d.start("api"));
    let bases = vec![a.base.clone(), b.base.clone()];
    let c = Client::new();
    let posts = [1u64, 2, 3, 4];
    for p in posts {
        put_post(&c, &a.base, p, 7).await;
    }
    // Who likes what: most users like most posts; some unlike again through the other node.
    // Users run side by side (16 at a time), each user's own changes in order.
    let per_user = futures::stream::iter(1..=120u64)
        .map(|u| {
            let (c, bases) = (c.clone(), bases.clone());
            async move {
                let mut liked = Vec::new();
                for p in posts {
                    if (u + p) % 3 == 0 {
                        continue;
                    }
                    let i = ((u + p) % 2) as usize;
                    assert!(like_with_retry(&c, &bases, i, p, u).await, "user {u} post {p}");
                    if (u + p) % 5 == 0 {
                        let (st, _) = c
                            .call(&bases[1 - i], Method::DELETE, &format!("/v1/posts/{p}/like"), u, false, "")
                            .await
                            .expect("unlike");
                        assert_eq!(st, 200);
                    } else {
                        liked.push((u, p));
                    }
                }
                liked
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    let mut liked: std::collections::HashSet<(u64, u64)> = per_user.into_iter().flatten().collect();
    // Every (user, post) heart on both nodes, 16 reads at a time.
    let hearts = |liked: &std::collections::HashSet<(u64, u64)>, users: std::ops::RangeInclusive<u64>| {
        let (c, liked) = (c.clone(), Arc::new(liked.clone()));
        let checks: Vec<(u64, u64, String)> = users
            .flat_map(|u| posts.into_iter().flat_map(move |p| [(u, p, 0usize), (u, p, 1)]))
            .map(|(u, p, n)| (u, p, bases[n].clone()))
            .collect();
        async move {
            futures::stream::iter(checks)
                .for_each_concurrent(16, |(u, p, base)| {
                    let (c, liked) = (c.clone(), liked.clone());
                    async move {
                        let got = get_post(&c, &base, p, u).await["viewer_has_liked"].as_bool();
                        assert_eq!(got, Some(liked.contains(&(u, p))), "user {u} post {p} on {base}");
                    }
                })
                .await;
        }
    };
    let converge = |liked: &std::collections::HashSet<(u64, u64)>| {
        let (c, bases) = (c.clone(), bases.clone());
        let want: Vec<(u64, i64)> =
            posts.iter().map(|p| (*p, liked.iter().filter(|(_, q)| q == p).count() as i64)).collect();
        let d = &d;
        async move {
            for (p, n) in want {
                assert_eq!(d.rows(p).await, n, "post {p}: rows");
                for base in &bases {
                    c.wait_count(base, p, n).await;
                }
            }
        }
    };
    converge(&liked).await;
    hearts(&liked, 1..=120).await;

    // Both servers hold this deployment's keys, each only those of its own slots.
    let owner = assign(2);
    for (n, url) in d.redis_servers.iter().enumerate() {
        let keys = common::deployment::RedisProcess::keys(url, &d.prefix).await;
        assert!(keys.len() >= 4, "server {n} holds {} keys: {keys:?}", keys.len());
        for k in keys {
            assert_eq!(owner[slot(&k) as usize] as usize, n, "{k} is on server {n}");
        }
    }

    // The second server is lost with its keys: the service goes on, from PostgreSQL where
    // the lost slots were, and says the cache is down.
    second.kill();
    for u in 121..=150u64 {
        for p in [1u64, 2] {
            assert!(like_with_retry(&c, &bases, (u % 2) as usize, p, u).await, "user {u} post {p}");
            liked.insert((u, p));
        }
    }
    // /healthz reuses its engine checks for one second (docs/api.md).
    let down_by = std::time::Instant::now() + Duration::from_secs(3);
    loop {
        let (st, v) = c.call(&a.base, Method::GET, "/healthz", 1, false, "").await.expect("healthz");
        assert_eq!(st, 200, "{v}");
        if v["checks"]["cache"] == "down" {
            break;
        }
        assert!(std::time::Instant::now() < down_by, "the lost cache server is not reported: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    converge(&liked).await;
    hearts(&liked, 100..=150).await;

    // Back, empty: keys on its slots refill.
    second.restart().await;
    for u in 151..=170u64 {
        assert!(like_with_retry(&c, &bases, (u % 2) as usize, 3, u).await, "user {u}");
        liked.insert((u, 3));
    }
    converge(&liked).await;
    hearts(&liked, 140..=170).await;
    for s in [a, b, worker] {
        stop(s);
    }
    d.cleanup().await;
}

/// Like (or unlike) `post` as `user` through `base`, again until it answers 200 (20 s at
/// most); returns when it was acknowledged.
async fn set_like(c: &Client, base: &str, post: u64, user: u64, liked: bool) -> Instant {
    let (m, path) = (if liked { Method::PUT } else { Method::DELETE }, format!("/v1/posts/{post}/like"));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok((200, v)) = c.call(base, m.clone(), &path, user, false, "").await {
            assert_eq!(v["liked"], liked, "{v}");
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "user {user} post {post}: no 200 in 20 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Two Redis servers; the second is killed and restarted empty while likes go on. Every
/// (user, post) heart, on both API nodes, equals the like rows within 5 s: the hearts of
/// likes from before the restart from 5 s after it, and those of likes and unlikes committed
/// in the 5 s after the restart 5 s after each was acknowledged; and they stay right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hearts_equal_the_rows_within_5_s_of_a_redis_server_restarting_empty() {
    use futures::StreamExt;
    use std::collections::{HashMap, HashSet};
    let mut second = common::deployment::RedisProcess::start().await;
    let d = Deployment::with_redis_servers(&[second.url.clone()], "[limits]\nlikes_per_minute = 0\n").await;
    let worker = d.start("worker");
    let (a, b) = (d.start("api"), d.start("api"));
    let bases = vec![a.base.clone(), b.base.clone()];
    let c = Client::new();
    let posts = [1u64, 2, 3, 4];
    for p in posts {
        put_post(&c, &a.base, p, 7).await;
    }
    // Before: users 1..=60 like most posts, some unlike again through the other node.
    futures::stream::iter((1..=60u64).flat_map(|u| posts.map(|p| (u, p))))
        .for_each_concurrent(16, |(u, p)| {
            let (c, bases) = (c.clone(), bases.clone());
            async move {
                if (u + p) % 3 == 0 {
                    return;
                }
                let i = ((u + p) % 2) as usize;
                set_like(&c, &bases[i], p, u, true).await;
                if (u + p) % 5 == 0 {
                    set_like(&c, &bases[1 - i], p, u, false).await;
                }
            }
        })
        .await;
    // Every pair of `users` on every node, until each equals the rows or `deadline` (per pair)
    // passes; the pairs still wrong then, and how long the last one took to be right.
    let rows = |users: Vec<u64>| {
        let d = &d;
        async move {
            let mut liked = HashSet::new();
            for p in posts {
                for u in d.likers_in_rows(1, p).await {
                    if users.contains(&u) {
                        liked.insert((u, p));
                    }
                }
            }
            liked
        }
    };
    let check =
        |users: Vec<u64>, liked: HashSet<(u64, u64)>, deadline: HashMap<(u64, u64), Instant>, by: Instant| {
            let (c, bases) = (c.clone(), bases.clone());
            async move {
                let pairs: Vec<(u64, u64, String)> = users
                    .iter()
                    .flat_map(|u| posts.map(|p| (*u, p)))
                    .flat_map(|(u, p)| bases.iter().map(move |b| (u, p, b.clone())))
                    .collect();
                let liked = Arc::new(liked);
                let wrong = Arc::new(Mutex::new(Vec::new()));
                futures::stream::iter(pairs)
                    .for_each_concurrent(16, |(u, p, base)| {
                        let until = deadline.get(&(u, p)).copied().unwrap_or(by);
                        let (c, liked, wrong) = (c.clone(), liked.clone(), wrong.clone());
                        async move {
                            let want = liked.contains(&(u, p));
                            loop {
                                let got = get_post(&c, &base, p, u).await["viewer_has_liked"].as_bool();
                                if got == Some(want) {
                                    return;
                                }
                                if Instant::now() > until {
                                    wrong.lock().expect("lock").push((u, p, base, got));
                                    return;
                                }
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                        }
                    })
                    .await;
                wrong.lock().expect("lock").clone()
            }
        };
    let before: Vec<u64> = (1..=60).collect();
    let before_liked = rows(before.clone()).await;
    let wrong =
        check(before.clone(), before_liked.clone(), HashMap::new(), Instant::now() + Duration::from_secs(15))
            .await;
    assert!(wrong.is_empty(), "hearts wrong before the restart: {wrong:?}");

    second.kill();
    second.restart().await;
    let restarted = Instant::now();
    // In the 5 s after the restart: users 301..=340 like and unlike, alternating nodes, while
    // the hearts of the pairs from before are checked.
    let after: Vec<u64> = (301..=340).collect();
    let writes = {
        let (c, bases, after) = (c.clone(), bases.clone(), after.clone());
        tokio::spawn(async move {
            let acked = Arc::new(Mutex::new(HashMap::<(u64, u64), Instant>::new()));
            let mut round = 0u64;
            while restarted.elapsed() < Duration::from_secs(5) {
                futures::stream::iter(after.iter().copied())
                    .for_each_concurrent(16, |u| {
                        let (c, bases, acked) = (c.clone(), bases.clone(), acked.clone());
                        async move {
                            let p = posts[((u + round) % 4) as usize];
                            let liked = !(u + round).is_multiple_of(3);
                            let at = set_like(&c, &bases[((u + round) % 2) as usize], p, u, liked).await;
                            acked.lock().expect("lock").insert((u, p), at);
                        }
                    })
                    .await;
                round += 1;
            }
            let acked = acked.lock().expect("lock").clone();
            (round, acked)
        })
    };
    let wrong =
        check(before.clone(), before_liked.clone(), HashMap::new(), restarted + Duration::from_secs(5)).await;
    let (rounds, acked) = writes.await.expect("writes");
    assert!(wrong.is_empty(), "hearts from before the restart still wrong 5 s after it: {wrong:?}");
    let after_liked = rows(after.clone()).await;
    let deadlines: HashMap<(u64, u64), Instant> =
        acked.iter().map(|(pair, at)| (*pair, *at + Duration::from_secs(5))).collect();
    let wrong =
        check(after.clone(), after_liked.clone(), deadlines, restarted + Duration::from_secs(5)).await;
    assert!(
        wrong.is_empty(),
        "hearts of likes in the 5 s after the restart wrong 5 s after their 200 ({rounds} rounds): {wrong:?}"
    );
    // And they stay right.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let all: Vec<u64> = before.iter().chain(&after).copied().collect();
    let mut liked = before_liked;
    liked.extend(after_liked);
    let wrong = check(all.clone(), liked, HashMap::new(), Instant::now()).await;
    assert!(wrong.is_empty(), "hearts wrong again later: {wrong:?}");
    eprintln!(
        "hearts right within 5 s of a Redis server restart: {} pairs on 2 nodes, {rounds} rounds of writes after it",
        all.len() * posts.len()
    );
    for s in [a, b, worker] {
        stop(s);
    }
    d.cleanup().await;
}
