//! A user's likes and unlikes racing over two API nodes of a real scale-out deployment (two
//! PostgreSQL shards, Redis, NATS, one worker): when the last response is in, every node
//! answers `viewer_has_liked` as the like rows say, for posts and for comments. Each API node
//! records the viewer's outcome in Redis after its commit; two nodes' records of one user's
//! like and unlike can land in either order, and only the record of the later commit may
//! stand. The servers must be running (`.ci/run` starts them); the test fails without them.

mod common;

use common::deployment::Deployment;
use common::proc::Client;
use futures::StreamExt;
use hyper::Method;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Barrier, Semaphore};

/// Users racing per seed.
const USERS: u64 = 200;
/// Requests per user and target...
const TOGGLES: usize = 16;
/// ...sent this many at a time, released together by a barrier.
const AT_ONCE: usize = 4;
/// Users racing at the same time (each node's open connections stay well below its limits).
const USERS_AT_ONCE: usize = 32;

/// `PUT` (like) or `DELETE` (unlike) of `target` (`/v1/posts/1` or `/v1/comments/2`) by each
/// user: rounds of [`AT_ONCE`] concurrent requests, each to a node and with an action drawn
/// from `seed`. Every request must answer 200.
async fn race(c: &Arc<Client>, bases: &[String], seed: u64, target: &str) {
    let mut users = Vec::new();
    let slots = Arc::new(Semaphore::new(USERS_AT_ONCE));
    for user in 1_000..1_000 + USERS {
        let (c, bases, target, slots) = (c.clone(), bases.to_vec(), target.to_string(), slots.clone());
        users.push(tokio::spawn(async move {
            let _slot = slots.acquire().await.expect("semaphore");
            let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(1_000_003) ^ user);
            for _ in 0..TOGGLES / AT_ONCE {
                let barrier = Arc::new(Barrier::new(AT_ONCE));
                let mut round = Vec::new();
                for _ in 0..AT_ONCE {
                    let base = bases[rng.random_range(0..bases.len())].clone();
                    let m = if rng.random_bool(0.5) { Method::PUT } else { Method::DELETE };
                    let (c, barrier, path) = (c.clone(), barrier.clone(), format!("{target}/like"));
                    round.push(tokio::spawn(async move {
                        barrier.wait().await;
                        let (st, v) = call(&c, &base, m, &path, user).await;
                        assert_eq!(st, 200, "{path} as {user}: {v}");
                    }));
                }
                for r in round {
                    r.await.expect("join");
                }
            }
        }));
    }
    for u in users {
        u.await.expect("join");
    }
}

/// One request, sent again when it never got an answer (the client can pick a pooled
/// connection the node is just closing); a repeated toggle is only one more toggle.
async fn call(c: &Client, base: &str, m: Method, path: &str, user: u64) -> (u16, Value) {
    let mut tries = 0;
    loop {
        tries += 1;
        match c.call(base, m.clone(), path, user, false, "").await {
            Ok(answer) => return answer,
            Err(e) => assert!(tries < 3, "{path} as {user}: {e}"),
        }
    }
}

/// The users for whom a node's `viewer_has_liked` disagrees with the rows, as
/// `(node, user, answered)`.
async fn mismatches(
    c: &Client,
    bases: &[String],
    read: impl Fn(Value) -> bool,
    path: &str,
    rows: &HashSet<u64>,
) -> Vec<(usize, u64, bool)> {
    let read = &read;
    let mut out = Vec::new();
    for (n, base) in bases.iter().enumerate() {
        let answers = futures::stream::iter(1_000..1_000 + USERS)
            .map(|user| async move {
                let (st, v) = call(c, base, Method::GET, path, user).await;
                assert_eq!(st, 200, "{v}");
                (user, read(v))
            })
            .buffer_unordered(16)
            .collect::<Vec<_>>()
            .await;
        for (user, liked) in answers {
            if liked != rows.contains(&user) {
                out.push((n, user, liked));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn toggles_racing_over_two_nodes_leave_viewer_has_liked_equal_to_the_rows() {
    let d = Deployment::with_config("[limits]\nlikes_per_minute = 0\n").await;
    let _worker = d.start("worker");
    let (a, b) = (d.start("api"), d.start("api"));
    let bases = vec![a.base.clone(), b.base.clone()];
    // Three rounds in CI; LIKEWISE_TOGGLE_ROUNDS for more.
    let rounds = std::env::var("LIKEWISE_TOGGLE_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3u64);
    for seed in 1..=rounds {
        // A client per round: the nodes close connections idle for 10 s, as the last round's
        // are by now.
        let c = Client::new();
        let post = 40 + seed;
        let body = r#"{"author_id":"7"}"#;
        let (st, v) =
            c.call(&a.base, Method::PUT, &format!("/v1/posts/{post}"), 1, true, body).await.expect("post");
        assert_eq!(st, 200, "{v}");
        let text = format!(r#"{{"text":"round {seed} of the toggle race"}}"#);
        let (st, v) = c
            .call(&b.base, Method::POST, &format!("/v1/posts/{post}/comments"), 7, false, &text)
            .await
            .expect("c");
        assert_eq!(st, 201, "{v}");
        let comment_id = v["comment_id"].as_str().expect("comment id").to_string();
        let comment: u64 = comment_id.parse().expect("comment id");

        let (post_path, comment_path) = (format!("/v1/posts/{post}"), format!("/v1/comments/{comment}"));
        tokio::join!(race(&c, &bases, seed, &post_path), race(&c, &bases, seed + 100, &comment_path));

        // The last response is in: both nodes answer as the rows say, at once.
        let rows = d.likers_in_rows(1, post).await;
        let wrong =
            mismatches(&c, &bases, |v| v["viewer_has_liked"] == true, &format!("/v1/posts/{post}"), &rows)
                .await;
        assert!(
            wrong.is_empty(),
            "seed {seed}: post {post}, {} rows; (node, user, answered): {wrong:?}",
            rows.len()
        );
        let comment_rows = d.likers_in_rows(2, comment).await;
        let in_page = |v: Value| {
            v["items"]
                .as_array()
                .and_then(|items| {
                    items.iter().find(|i| i["comment_id"].as_str() == Some(comment_id.as_str()))
                })
                .is_some_and(|i| i["viewer_has_liked"] == true)
        };
        let path = format!("/v1/posts/{post}/comments?order=newest");
        let wrong = mismatches(&c, &bases, in_page, &path, &comment_rows).await;
        assert!(
            wrong.is_empty(),
            "seed {seed}: comment {comment}, {} rows; (node, user, answered): {wrong:?}",
            comment_rows.len()
        );

        // Counts converge to the rows; the likers list is the rows.
        for base in &bases {
            c.wait_count(base, post, rows.len() as i64).await;
            assert_eq!(c.likers(base, post).await, rows, "seed {seed}: likers of post {post}");
            let deadline = Instant::now() + Duration::from_secs(15);
            loop {
                let (_, v) = c.call(base, Method::GET, &path, 7, false, "").await.expect("comments");
                let count = v["items"]
                    .as_array()
                    .and_then(|items| {
                        items.iter().find(|i| i["comment_id"].as_str() == Some(comment_id.as_str()))
                    })
                    .and_then(|i| i["like_count"].as_i64());
                if count == Some(comment_rows.len() as i64) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "seed {seed}: comment count {count:?}, rows {}",
                    comment_rows.len()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    d.cleanup().await;
}
