//! Partitions and slow servers on the scale-out engines, the way Jepsen tests them: a fault
//! proxy of the harness (`common/fault_proxy.rs`) sits between every `likewise` process and
//! each of PostgreSQL, Redis and NATS. Two API nodes, a worker and a standby worker serve a
//! storm of likes, unlikes and comments while each fault (blackhole, 500 ms delay, dropped
//! connections, half-open connections, a 16 KiB/s throttle) is applied to each server in
//! turn for `LIKEWISE_PARTITION_FAULT_SECONDS` (6) seconds, then healed. Then the active
//! worker alone is cut off from PostgreSQL, and the standby must take over.
//!
//! Checked throughout: every request is answered within `server.request_timeout_ms` (half
//! as much again for a write that was committing, plus a margin for the network), with a
//! success, a 503 or a 504 `outcome_unknown`, never a 500 and never a hang;
//! `/healthz` names the server that is cut off. After each heal: how long until a like
//! succeeds again on both nodes. At the end: every acknowledged like, unlike and comment
//! stands, counts equal the like rows on both nodes (nothing counted twice, nothing lost),
//! likers lists equal the rows, and each post's notification names exactly its likers.

mod common;

use common::deployment::{Deployment, Proxies};
use common::fault_proxy::{Fault, FaultProxy};
use common::proc::{Client, Server, signal};
use hyper::Method;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const REQUEST_TIMEOUT_MS: u64 = 2_000;
/// What a request may take beyond the server's timeout before it counts as a hang.
const MARGIN: Duration = Duration::from_millis(1_500);
const POSTS: u64 = 4;
const USERS: u64 = 40;

fn author(post: u64) -> u64 {
    900 + post
}

fn fault_time() -> Duration {
    let s = std::env::var("LIKEWISE_PARTITION_FAULT_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(6);
    Duration::from_secs(s)
}

/// What the storm saw.
#[derive(Default)]
struct Seen {
    /// Per (post, user): the outcome of the last like or unlike sent, when it was answered.
    last: Mutex<HashMap<(u64, u64), Option<bool>>>,
    /// Acknowledged comments: (post, comment ID).
    comments: Mutex<Vec<(u64, String)>>,
    /// Answers that break the contract: statuses other than success or 503, errors, hangs.
    violations: Mutex<Vec<String>>,
    /// Requests answered 503 (expected while a dependency is gone).
    unavailable: AtomicU64,
    /// Requests acknowledged.
    acked: AtomicU64,
}

/// One request, bounded: Ok(status, body) within the timeout and margin; a hang or a
/// transport error is recorded as a violation and answered None.
async fn call(
    c: &Client,
    seen: &Seen,
    base: &str,
    m: Method,
    path: &str,
    user: u64,
    body: &str,
) -> Option<(u16, Value)> {
    // A write already committing at the deadline is waited for, half the timeout more.
    let limit = Duration::from_millis(REQUEST_TIMEOUT_MS * 3 / 2) + MARGIN;
    let started = Instant::now();
    match tokio::time::timeout(limit, c.call(base, m.clone(), path, user, false, body)).await {
        // 503: nothing was written. 504 `outcome_unknown`: a write was committing when the
        // server's connection broke or the time ran out; it may be stored (the final checks
        // treat both as unknown and read the truth back).
        Ok(Ok((st, v))) if st == 503 || (st == 504 && v["error"] == "outcome_unknown") => {
            seen.unavailable.fetch_add(1, Ordering::Relaxed);
            Some((st, v))
        }
        Ok(Ok((st, v))) if st < 300 => Some((st, v)),
        Ok(Ok((st, v))) => {
            seen.violations.lock().expect("lock").push(format!("{m} {path}: {st} {v}"));
            None
        }
        Ok(Err(e)) => {
            seen.violations.lock().expect("lock").push(format!("{m} {path}: transport error {e}"));
            None
        }
        Err(_) => {
            seen.violations
                .lock()
                .expect("lock")
                .push(format!("{m} {path}: no answer in {:?}", started.elapsed()));
            None
        }
    }
}

/// A user's part of the storm until `stop`: likes, unlikes and now and then a comment, each
/// to a random API node.
async fn storm_user(
    c: Arc<Client>,
    seen: Arc<Seen>,
    bases: Arc<Vec<String>>,
    user: u64,
    stop: Arc<AtomicBool>,
) {
    let mut k = 0u64;
    while !stop.load(Ordering::Relaxed) {
        k += 1;
        let base = &bases[rand::random_range(0..bases.len())];
        let post = 1 + rand::random_range(0..POSTS);
        if k.is_multiple_of(8) {
            let body =
                format!(r#"{{"text": "User {user} writes note {k} about the view from post {post}"}}"#);
            if let Some((201, v)) =
                call(&c, &seen, base, Method::POST, &format!("/v1/posts/{post}/comments"), user, &body).await
            {
                let id = v["comment_id"].as_str().expect("comment_id").to_string();
                seen.comments.lock().expect("lock").push((post, id));
                seen.acked.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            let like = rand::random_bool(0.6);
            let m = if like { Method::PUT } else { Method::DELETE };
            let outcome = match call(&c, &seen, base, m, &format!("/v1/posts/{post}/like"), user, "").await {
                Some((200, v)) => {
                    seen.acked.fetch_add(1, Ordering::Relaxed);
                    Some(v["liked"].as_bool().expect("liked"))
                }
                _ => None,
            };
            seen.last.lock().expect("lock").insert((post, user), outcome);
        }
        tokio::time::sleep(Duration::from_millis(rand::random_range(20..60))).await;
    }
}

/// The like count each node answers for `post`.
async fn node_counts(c: &Client, bases: &[String], post: u64) -> Vec<Option<i64>> {
    let mut out = Vec::new();
    for b in bases {
        out.push(c.count(b, post).await);
    }
    out
}

/// `/healthz` of `base`: (status, the `checks` object).
async fn health(c: &Client, base: &str) -> Option<(u16, Value)> {
    let limit = Duration::from_millis(REQUEST_TIMEOUT_MS) + MARGIN;
    let r = tokio::time::timeout(limit, c.call(base, Method::GET, "/healthz", 1, false, "")).await;
    r.ok().and_then(|r| r.ok()).map(|(st, v)| (st, v["checks"].clone()))
}

/// After a heal: how long until a like succeeds on every node (a fresh user each try).
async fn resumed(c: &Client, bases: &[String], probe_user: &AtomicU64) -> Duration {
    let healed = Instant::now();
    for base in bases {
        loop {
            let user = probe_user.fetch_add(1, Ordering::Relaxed);
            let r = tokio::time::timeout(
                Duration::from_millis(REQUEST_TIMEOUT_MS) + MARGIN,
                c.call(base, Method::PUT, "/v1/posts/1/like", user, false, ""),
            )
            .await;
            if matches!(r, Ok(Ok((200, _)))) {
                break;
            }
            assert!(healed.elapsed() < Duration::from_secs(60), "{base} never resumed after the heal");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    healed.elapsed()
}

fn stop(s: Server) {
    signal(&s.child, "-TERM");
    let mut child = s.child;
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn faults_on_each_server_lose_nothing_count_nothing_twice_and_never_hang() {
    let extra = format!(
        "[server]\nrequest_timeout_ms = {REQUEST_TIMEOUT_MS}\n[limits]\nlikes_per_minute = 0\n\
         comments_per_minute = 600\ncomment_burst = 100\n"
    );
    let (d, proxies) = Deployment::behind_proxies(&extra).await;
    let Proxies { pg, redis, nats } = &proxies;
    // The first worker reaches PostgreSQL through a proxy of its own as well, so it can be
    // cut off alone; the second is its hot standby.
    let worker_pg = FaultProxy::start(&format!("127.0.0.1:{}", pg.port)).await;
    let worker = d.start_via_pg("worker", worker_pg.port, &proxies);
    let api = [d.start("api"), d.start("api")];
    let bases: Arc<Vec<String>> = Arc::new(api.iter().map(|s| s.base.clone()).collect());
    let c = Client::new();
    for post in 1..=POSTS {
        let body = format!(r#"{{"author_id":"{}"}}"#, author(post));
        let (st, v) =
            c.call(&bases[0], Method::PUT, &format!("/v1/posts/{post}"), 1, true, &body).await.expect("post");
        assert_eq!(st, 200, "{v}");
    }
    // The first worker holds the leases before the standby starts.
    c.call(&bases[0], Method::PUT, "/v1/posts/1/like", 7_000, false, "").await.expect("like");
    c.wait_count(&bases[0], 1, 1).await;
    let standby = d.start("worker");

    let seen = Arc::new(Seen::default());
    let stop_storm = Arc::new(AtomicBool::new(false));
    let storm: Vec<_> = (1..=USERS)
        .map(|u| tokio::spawn(storm_user(c.clone(), seen.clone(), bases.clone(), u, stop_storm.clone())))
        .collect();
    let probe_user = AtomicU64::new(10_000);
    for (name, proxy) in [("storage", pg), ("cache", redis), ("stream", nats)] {
        for fault in Fault::ALL {
            proxy.set(fault);
            let (started, mut reported_down, mut worst_health) = (Instant::now(), false, Duration::ZERO);
            while started.elapsed() < fault_time() {
                let asked = Instant::now();
                let h = health(&c, &bases[0]).await;
                worst_health = worst_health.max(asked.elapsed());
                match h {
                    Some((st, checks)) => {
                        reported_down |= checks[name] == "down";
                        // Only a storage outage makes the whole node unavailable. /healthz
                        // reuses its checks for a second (docs/api.md): the first answers of a
                        // phase may still carry the previous phase's storage outage.
                        if name != "storage" && asked.duration_since(started) > Duration::from_millis(1500) {
                            assert_eq!(st, 200, "{name} {fault:?}: /healthz {st} {checks}");
                        }
                    }
                    None => {
                        seen.violations.lock().expect("lock").push(format!("{name} {fault:?}: /healthz hung"))
                    }
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            proxy.set(Fault::None);
            let resume = resumed(&c, &bases, &probe_user).await;
            let line = format!(
                "{name:8} {fault:?}: /healthz reported it down: {reported_down}; slowest /healthz {worst_health:?}; \
                 likes resumed {resume:?} after the heal"
            );
            println!("{line}");
            if matches!(fault, Fault::Blackhole | Fault::Drop | Fault::HalfOpen) {
                assert!(reported_down, "{name} {fault:?}: /healthz never said it was down");
            }
            // The issue's bound for service after a heal (measured: 0.05-1.5 s).
            assert!(
                resume <= Duration::from_secs(5),
                "{name} {fault:?}: likes resumed only after {resume:?}"
            );
        }
    }

    // The active worker alone loses PostgreSQL: the server ends its lease sessions, the
    // standby takes the leases, and counts keep converging while it is still cut off.
    worker_pg.set(Fault::Blackhole);
    tokio::time::sleep(Duration::from_secs(8)).await;
    // Likes go on meanwhile: the API nodes do not need the worker. A write that met a lock
    // of the cut-off worker's open transaction may answer 503 until PostgreSQL ends that
    // session; a like must succeed within the bound.
    let user = probe_user.fetch_add(1, Ordering::Relaxed);
    let cut_at = Instant::now();
    loop {
        let (st, v) =
            c.call(&bases[0], Method::PUT, "/v1/posts/2/like", user, false, "").await.expect("like");
        if st == 200 {
            break;
        }
        assert!(
            st == 503 && cut_at.elapsed() < Duration::from_secs(40),
            "a like while the worker is cut off: {st} {v}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rows = d.rows(2).await;
        if c.count(&bases[1], 2).await == Some(rows) && d.rows(2).await == rows {
            break;
        }
        assert!(Instant::now() < deadline, "the standby never took over the counting");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    worker_pg.set(Fault::None);
    tokio::time::sleep(Duration::from_secs(3)).await;

    stop_storm.store(true, Ordering::Relaxed);
    for t in storm {
        t.await.expect("storm task");
    }
    println!(
        "acknowledged {}, answered 503 {}",
        seen.acked.load(Ordering::Relaxed),
        seen.unavailable.load(Ordering::Relaxed)
    );
    let violations = seen.violations.lock().expect("lock").clone();
    assert!(violations.is_empty(), "{} answers broke the contract: {violations:#?}", violations.len());

    // Convergence: counts on both nodes, likers lists and notifications equal the rows.
    for post in 1..=POSTS {
        let rows = d.likers_in_rows(1, post).await;
        for base in bases.iter() {
            // The standby may still be working through the backlog of the shards it took
            // over (their events queued while the cut-off worker held them): 45 s, not the 15 s
            // of a quiet deployment.
            let deadline = Instant::now() + Duration::from_secs(45);
            loop {
                let got = c.count(base, post).await;
                if got == Some(rows.len() as i64) {
                    break;
                }
                if Instant::now() >= deadline {
                    let other: Vec<_> = node_counts(&c, &bases, post).await;
                    panic!(
                        "post {post} on {base}: count {got:?} did not converge to {} rows; counts on the \
                         nodes {other:?}\n{}",
                        rows.len(),
                        d.count_layers(post).await
                    );
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        assert_eq!(c.likers(&bases[0], post).await, rows, "post {post}: likers list");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (st, v) = c
                .call(&bases[1], Method::GET, "/v1/me/notifications", author(post), false, "")
                .await
                .expect("inbox");
            assert_eq!(st, 200, "{v}");
            let count = v["items"]
                .as_array()
                .expect("items")
                .iter()
                .find(|i| i["kind"] == "post_liked")
                .and_then(|i| i["actor_count"].as_u64());
            if count == Some(rows.len() as u64) {
                break;
            }
            if Instant::now() >= deadline {
                let (stored, actors) = d.post_liked_item(author(post), post).await;
                let mut missing: Vec<_> = rows.difference(&actors).collect();
                let mut extra: Vec<_> = actors.difference(&rows).collect();
                missing.sort();
                extra.sort();
                panic!(
                    "post {post}: notification names {count:?}, rows {}; stored actor_count {stored:?}, \
                     actor rows {}, likers missing from them {missing:?}, actors without a like {extra:?}",
                    rows.len(),
                    actors.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // Every acknowledged outcome that was the user's last word on the post stands.
        for ((p, user), outcome) in seen.last.lock().expect("lock").iter() {
            if let (true, Some(liked)) = (*p == post, outcome) {
                assert_eq!(
                    rows.contains(user),
                    *liked,
                    "post {post} user {user}: acknowledged liked={liked}"
                );
            }
        }
    }
    let comments = seen.comments.lock().expect("lock").clone();
    for post in 1..=POSTS {
        let mut listed = HashSet::new();
        let mut path = format!("/v1/posts/{post}/comments?order=newest&limit=100");
        loop {
            let (st, v) = c.call(&bases[0], Method::GET, &path, 1, true, "").await.expect("comments");
            assert_eq!(st, 200, "{v}");
            for i in v["items"].as_array().expect("items") {
                listed.insert(i["comment_id"].as_str().expect("id").to_string());
            }
            match v["next_cursor"].as_str() {
                Some(cur) => path = format!("/v1/posts/{post}/comments?order=newest&limit=100&cursor={cur}"),
                None => break,
            }
        }
        for (_, id) in comments.iter().filter(|(p, _)| *p == post) {
            assert!(listed.contains(id), "post {post}: acknowledged comment {id} is missing");
        }
    }
    for s in api {
        stop(s);
    }
    stop(standby);
    stop(worker);
    d.cleanup().await;
}
