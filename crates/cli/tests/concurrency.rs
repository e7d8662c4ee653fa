//! The concurrency suite: rounds of comment operations chosen at random (comments, replies,
//! deletes, pins, reports, moderation, likes, re-registration of the post, blocks), each
//! round's operations released together by a barrier, and after every round the invariants:
//!
//! - no orphans: every reply stands under a top-level comment that is still stored;
//! - counts equal what a viewer can page through (once the counters settle): `comment_count`
//!   the visible comments and replies an outsider can list, each `reply_count` the replies
//!   listed under it (replies under a parent held from others are neither);
//! - every acknowledged write is visible: a created comment not deleted is still stored,
//!   a deleted one is gone (or a placeholder over replies), and each visible comment's
//!   `like_count` counts the likes acknowledged standing;
//! - notifications match the state: the post's `post_liked` item counts its likers.
//!
//! Bounded: a fixed number of rounds. Every failure message carries the seed; rerun one with
//! `LIKEWISE_SEED=<seed>`.

mod common;

use common::TestApp;
use hyper::{Method, StatusCode};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tokio::sync::Barrier;

/// The post under test, and a post only liked (never re-registered), for the like item.
const POST: u64 = 1;
const LIKED: u64 = 2;
const AUTHORS: [u64; 2] = [7, 8];
const USERS: std::ops::Range<u64> = 100..112;
const ROUNDS: usize = 15;
const OPS: usize = 8;

#[derive(Debug, Clone)]
enum Op {
    Comment { user: u64 },
    Reply { user: u64, parent: u64 },
    Delete { user: u64, id: u64 },
    Pin { id: u64, pin: bool },
    Report { user: u64, id: u64 },
    Moderate { id: u64, approve: bool },
    LikeComment { user: u64, id: u64, like: bool },
    LikePost { user: u64, like: bool },
    Reregister,
    Block { user: u64, on: bool },
}

/// What the suite knows from acknowledged answers.
#[derive(Default)]
struct Model {
    /// Comments acknowledged created and not acknowledged deleted: id -> (author, parent).
    live: BTreeMap<u64, (u64, Option<u64>)>,
    /// Comments acknowledged deleted.
    deleted: BTreeSet<u64>,
    author: u64,
    /// Users whose like of `LIKED` stands.
    likers: BTreeSet<u64>,
    /// Users whose like of each comment stands (as acknowledged).
    comment_likers: BTreeMap<u64, BTreeSet<u64>>,
}

fn pick<T: Copy>(rng: &mut StdRng, v: &[T]) -> Option<T> {
    (!v.is_empty()).then(|| v[rng.random_range(0..v.len())])
}

fn choose(rng: &mut StdRng, m: &Model) -> Op {
    let user = rng.random_range(USERS);
    let ids: Vec<u64> = m.live.keys().copied().collect();
    let tops: Vec<u64> = m.live.iter().filter(|(_, (_, p))| p.is_none()).map(|(id, _)| *id).collect();
    let mine: Vec<(u64, u64)> = m.live.iter().map(|(id, (a, _))| (*id, *a)).collect();
    match rng.random_range(0..11) {
        0 | 1 => Op::Comment { user },
        2 | 3 => pick(rng, &tops).map_or(Op::Comment { user }, |parent| Op::Reply { user, parent }),
        4 => pick(rng, &mine).map_or(Op::Comment { user }, |(id, a)| Op::Delete { user: a, id }),
        5 => pick(rng, &tops).map_or(Op::Reregister, |id| Op::Pin { id, pin: rng.random_bool(0.7) }),
        6 => pick(rng, &ids).map_or(Op::Comment { user }, |id| Op::Report { user, id }),
        7 => pick(rng, &ids)
            .map_or(Op::Comment { user }, |id| Op::Moderate { id, approve: rng.random_bool(0.6) }),
        8 => pick(rng, &ids).map_or(Op::LikePost { user, like: true }, |id| Op::LikeComment {
            user,
            id,
            like: rng.random_bool(0.7),
        }),
        9 => Op::LikePost { user, like: rng.random_bool(0.7) },
        _ if rng.random_bool(0.5) => Op::Reregister,
        _ => Op::Block { user, on: rng.random_bool(0.3) },
    }
}

fn cid(v: &Value) -> u64 {
    v["comment_id"].as_str().and_then(|s| s.parse().ok()).expect("comment_id")
}

/// Run one operation; the status and body.
async fn run(app: &TestApp, op: &Op, author: u64) -> (StatusCode, Value) {
    let user = |u: u64| app.user(u);
    match op {
        Op::Comment { user: u } => {
            let body = json!({"text": format!("a thought from {u} {}", rand::random::<u32>())}).to_string();
            app.call(Method::POST, &format!("/v1/posts/{POST}/comments"), Some(&user(*u)), Some(&body)).await
        }
        Op::Reply { user: u, parent } => {
            let body = json!({"text": format!("an answer from {u} {}", rand::random::<u32>()),
                              "parent_id": parent.to_string()})
            .to_string();
            app.call(Method::POST, &format!("/v1/posts/{POST}/comments"), Some(&user(*u)), Some(&body)).await
        }
        Op::Delete { user: u, id } => {
            app.call(Method::DELETE, &format!("/v1/comments/{id}"), Some(&user(*u)), None).await
        }
        Op::Pin { id, pin } => {
            let m = if *pin { Method::PUT } else { Method::DELETE };
            app.call(m, &format!("/v1/posts/{POST}/pins/{id}"), Some(&user(author)), None).await
        }
        Op::Report { user: u, id } => {
            let body = json!({"reason": "spam"}).to_string();
            app.call(Method::POST, &format!("/v1/comments/{id}/reports"), Some(&user(*u)), Some(&body)).await
        }
        Op::Moderate { id, approve } => {
            let body = json!({"action": if *approve { "approve" } else { "hide" }}).to_string();
            app.call(
                Method::POST,
                &format!("/v1/moderation/comments/{id}"),
                Some(&app.service()),
                Some(&body),
            )
            .await
        }
        Op::LikeComment { user: u, id, like } => {
            let m = if *like { Method::PUT } else { Method::DELETE };
            app.call(m, &format!("/v1/comments/{id}/like"), Some(&user(*u)), None).await
        }
        Op::LikePost { user: u, like } => {
            let m = if *like { Method::PUT } else { Method::DELETE };
            app.call(m, &format!("/v1/posts/{LIKED}/like"), Some(&user(*u)), None).await
        }
        Op::Reregister => {
            let next = if author == AUTHORS[0] { AUTHORS[1] } else { AUTHORS[0] };
            let body = json!({"author_id": next.to_string()}).to_string();
            app.call(Method::PUT, &format!("/v1/posts/{POST}"), Some(&app.service()), Some(&body)).await
        }
        Op::Block { user: u, on } => {
            let m = if *on { Method::PUT } else { Method::DELETE };
            app.call(m, &format!("/v1/me/blocks/{u}"), Some(&user(author)), None).await
        }
    }
}

/// Every page of `path` (a list with `next_cursor`) as `token` sees it.
async fn all_pages(app: &TestApp, path: &str, token: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let sep = if path.contains('?') { '&' } else { '?' };
        let p = match &cursor {
            Some(c) => format!("{path}{sep}limit=50&cursor={c}"),
            None => format!("{path}{sep}limit=50"),
        };
        let (st, v) = app.call(Method::GET, &p, Some(token), None).await;
        assert_eq!(st, StatusCode::OK, "{p}: {v}");
        out.extend(v["items"].as_array().expect("items").iter().cloned());
        match v["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return out,
        }
    }
}

/// Top-level comments and all replies as `token` sees them: (top-level, replies by parent).
async fn thread(app: &TestApp, token: &str) -> (Vec<Value>, BTreeMap<u64, Vec<Value>>) {
    let tops = all_pages(app, &format!("/v1/posts/{POST}/comments?order=oldest"), token).await;
    let mut replies = BTreeMap::new();
    for t in &tops {
        let r = all_pages(app, &format!("/v1/comments/{}/replies", cid(t)), token).await;
        replies.insert(cid(t), r);
    }
    (tops, replies)
}

async fn check(app: &TestApp, m: &Model, seed: u64, round: usize) {
    let at = format!("seed {seed}, round {round}");
    // The service role sees every stored comment with its real status.
    let svc = app.service();
    let (tops, replies) = thread(app, &svc).await;
    let stored: BTreeSet<u64> = tops.iter().map(cid).chain(replies.values().flatten().map(cid)).collect();
    // No orphans: every acknowledged reply still live is listed under its parent, and its
    // parent is a stored top-level comment.
    for (id, (_, parent)) in &m.live {
        if let Some(p) = parent {
            assert!(tops.iter().any(|t| cid(t) == *p), "{at}: reply {id} under missing parent {p}");
            assert!(replies[p].iter().any(|r| cid(r) == *id), "{at}: reply {id} not under {p}");
        }
    }
    // Acknowledged writes: live comments are stored; deleted ones are gone or placeholders.
    for id in m.live.keys() {
        assert!(stored.contains(id), "{at}: acknowledged comment {id} is missing");
    }
    for t in &tops {
        if m.deleted.contains(&cid(t)) {
            assert_eq!(t["status"], "deleted", "{at}: deleted comment {} is back", cid(t));
            assert!(!replies[&cid(t)].is_empty(), "{at}: placeholder {} without replies", cid(t));
        }
    }
    for id in replies.values().flatten().map(cid) {
        assert!(!m.deleted.contains(&id), "{at}: deleted reply {id} is still listed");
    }
    // Counts: what an outsider can page through, once the counters settle.
    let outsider = app.user(9_999);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (tops, replies) = thread(app, &outsider).await;
        let visible = tops.iter().filter(|t| t["status"] == "visible").count()
            + replies.values().flatten().filter(|r| r["status"] == "visible").count();
        let counted = app.view(9_999, POST).await["comment_count"].as_i64();
        let replies_ok =
            tops.iter().all(|t| t["reply_count"].as_u64() == Some(replies[&cid(t)].len() as u64));
        // Each visible comment the model knows counts the likes acknowledged standing.
        let wrong_likes: Vec<(u64, i64, usize)> = tops
            .iter()
            .chain(replies.values().flatten())
            .filter(|c| c["status"] == "visible" && m.live.contains_key(&cid(c)))
            .map(|c| {
                (
                    cid(c),
                    c["like_count"].as_i64().unwrap_or(-1),
                    m.comment_likers.get(&cid(c)).map_or(0, |l| l.len()),
                )
            })
            .filter(|(_, got, want)| *got != *want as i64)
            .collect();
        if counted == Some(visible as i64) && replies_ok && wrong_likes.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{at}: comment_count {counted:?}, pageable {visible}; (comment, like_count, acknowledged likes): {wrong_likes:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // Notifications: the liked post's item counts exactly its likers (its author never likes).
    let want = m.likers.len() as i64;
    loop {
        let (st, v) =
            app.call(Method::GET, "/v1/me/notifications?limit=100", Some(&app.user(50)), None).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        let item = v["items"].as_array().expect("items").iter().find(|i| i["kind"] == "post_liked").cloned();
        let got = item.as_ref().map_or(0, |i| i["actor_count"].as_i64().unwrap_or(-1));
        let named = item.as_ref().is_none_or(|i| i["actors"].as_array().is_some_and(|a| !a.is_empty()));
        if got == want && named {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{at}: post_liked counts {got}, likers {want}: {item:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_concurrent_comment_operations_keep_every_invariant() {
    let seed: u64 =
        std::env::var("LIKEWISE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    eprintln!("concurrency suite seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let app = Arc::new(TestApp::start(dir.path()).await);
    app.post(POST, AUTHORS[0], false).await;
    app.post(LIKED, 50, false).await;
    let mut m = Model { author: AUTHORS[0], ..Model::default() };
    for round in 0..ROUNDS {
        // At most one like or unlike of the liked post per user, of each comment per user, and
        // one re-registration, per round: two of them racing have no order the model could
        // know.
        let mut ops: Vec<Op> = Vec::with_capacity(OPS);
        let mut post_likers = BTreeSet::new();
        let mut comment_likes = BTreeSet::new();
        while ops.len() < OPS {
            let op = choose(&mut rng, &m);
            let fresh = match &op {
                Op::LikePost { user, .. } => post_likers.insert(*user),
                Op::LikeComment { user, id, .. } => comment_likes.insert((*user, *id)),
                Op::Reregister => !ops.iter().any(|o| matches!(o, Op::Reregister)),
                _ => true,
            };
            if fresh {
                ops.push(op);
            }
        }
        let barrier = Arc::new(Barrier::new(ops.len()));
        let tasks: Vec<_> = ops
            .iter()
            .cloned()
            .map(|op| {
                let (app, barrier, author) = (app.clone(), barrier.clone(), m.author);
                tokio::spawn(async move {
                    barrier.wait().await;
                    let answer = run(&app, &op, author).await;
                    (op, answer)
                })
            })
            .collect();
        for t in tasks {
            let (op, (st, v)) = t.await.expect("join");
            assert!(!st.is_server_error(), "seed {seed}, round {round}: {op:?} answered {st}: {v}");
            match op {
                Op::Comment { user } if st == StatusCode::CREATED => {
                    m.live.insert(cid(&v), (user, None));
                }
                Op::Reply { user, .. } if st == StatusCode::CREATED => {
                    let parent = v["parent_id"].as_str().and_then(|s| s.parse().ok());
                    m.live.insert(cid(&v), (user, parent));
                }
                Op::Delete { id, .. } if st == StatusCode::NO_CONTENT => {
                    m.live.remove(&id);
                    m.deleted.insert(id);
                }
                Op::Reregister if st == StatusCode::OK => {
                    m.author = if m.author == AUTHORS[0] { AUTHORS[1] } else { AUTHORS[0] };
                }
                Op::LikeComment { user, id, .. } if st == StatusCode::OK => {
                    let likers = m.comment_likers.entry(id).or_default();
                    if v["liked"] == true {
                        likers.insert(user);
                    } else {
                        likers.remove(&user);
                    }
                }
                Op::LikePost { user, like } if st == StatusCode::OK => {
                    if like {
                        m.likers.insert(user);
                    } else {
                        m.likers.remove(&user);
                    }
                }
                _ => {}
            }
        }
        check(&app, &m, seed, round).await;
    }
}
