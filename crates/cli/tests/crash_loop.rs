//! Crash loops: the real binary SIGKILLed at random moments under a mixed workload,
//! again and again on the same state, and checked after every restart.
//!
//! - Embedded store: `likewise serve` killed 20 times on one data directory while tasks like,
//!   unlike, retry, comment, delete comments and like comments. After each restart: every
//!   acknowledged like is a row, every acknowledged unlike is not, no like row comes from
//!   nowhere, like counts converge to the rows, every acknowledged comment is still there (and
//!   every acknowledged delete holds), comment counts converge to the visible comments and
//!   comment like counts to the acknowledged comment likes. At the end an offline
//!   `likewise reconcile --all` must find no drift.
//! - Scale-out: the worker process (relay, aggregators, reverse index) killed 10 times while
//!   likes and unlikes flow through an API node. After each kill the rows summed over the
//!   PostgreSQL shards are exactly the acknowledged likes and the restarted worker must bring
//!   the counts to them; at the end the likers, the reverse index and the outbox are exact.
//!   Needs the real PostgreSQL, Redis and NATS: fails, never skips.
//!
//! A request whose answer never came (the kill, or a 503) leaves its key's state unknown; the
//! checks only use acknowledged states, and after a restart the client retries the unanswered
//! request (as a real client would), which makes the state known again.
//!
//! Recovery times are printed with `eprintln!` (`cargo test --test crash_loop -- --nocapture`).

mod common;

use common::deployment::Deployment;
use common::proc::{Client, Server, signal, start_with};
use hyper::Method;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The two tests measure recovery times and each wants the 2 cores to itself: run one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Run `body` alone (see [`SERIAL`]) on a 2-thread runtime.
fn serial<F: std::future::Future<Output = ()>>(body: F) {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(body);
}

/// A running server that is SIGKILLed if the test panics with it still running, so a failed
/// run leaves no orphan process behind.
struct Proc(Server);

impl std::ops::Deref for Proc {
    type Target = Server;
    fn deref(&self) -> &Server {
        &self.0
    }
}

impl std::ops::DerefMut for Proc {
    fn deref_mut(&mut self) -> &mut Server {
        &mut self.0
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Already reaped (stopped or killed by the test): nothing happens.
        if let Ok(None) = self.0.child.try_wait() {
            let _ = self.0.child.kill();
            let _ = self.0.child.wait();
        }
    }
}

/// Stop gracefully (SIGTERM); it must exit 0.
fn stop(mut s: Proc) {
    signal(&s.child, "-TERM");
    let status = s.child.wait().expect("wait");
    assert!(status.success(), "graceful stop exits 0, got {status}");
}

/// The post author; sees counts always.
const AUTHOR: u64 = 7;

// ---------------------------------------------------------------------------------------------
// Like ledger: what the client knows about each (target, user) key.

/// The client's knowledge of one like key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    /// The last request on this key was acknowledged: liked or not.
    Known(bool),
    /// The last request (asking for liked = the flag) got no answer: the state is unknown.
    Pending(bool),
}

/// Like keys of one kind (post likes or comment likes), as (target, user).
#[derive(Default)]
struct Likes {
    /// Comment likes (`/v1/comments/{id}/like`) rather than post likes.
    comment: bool,
    keys: Vec<(u64, u64)>,
    state: HashMap<(u64, u64), St>,
}

/// What became of one request.
enum Sent {
    /// Answered with the expected status.
    Acked,
    /// Answered 503 (a timeout: the write may still commit); the server is alive.
    Unanswered,
    /// No answer: the server is gone.
    Dead,
}

impl Likes {
    fn path(&self, target: u64) -> String {
        if self.comment { format!("/v1/comments/{target}/like") } else { format!("/v1/posts/{target}/like") }
    }

    /// A random key currently known to be `liked` (a few tries; None when unlucky or none).
    fn pick(&self, rng: &mut StdRng, liked: bool) -> Option<(u64, u64)> {
        if self.keys.is_empty() {
            return None;
        }
        for _ in 0..8 {
            let k = self.keys[rng.random_range(0..self.keys.len())];
            if self.state.get(&k) == Some(&St::Known(liked)) {
                return Some(k);
            }
        }
        None
    }

    /// Ask for `liked` on `key`; record the outcome. `changed` is what an acknowledged answer
    /// must say (None: either is right, e.g. a retry of an unanswered request).
    async fn send(
        &mut self,
        c: &Client,
        base: &str,
        key: (u64, u64),
        liked: bool,
        changed: Option<bool>,
    ) -> Sent {
        if !self.state.contains_key(&key) {
            self.keys.push(key);
        }
        self.state.insert(key, St::Pending(liked));
        let m = if liked { Method::PUT } else { Method::DELETE };
        match c.call(base, m, &self.path(key.0), key.1, false, "").await {
            Ok((200, v)) => {
                assert_eq!(v["liked"].as_bool(), Some(liked), "{} as {}: {v}", self.path(key.0), key.1);
                if let Some(want) = changed {
                    assert_eq!(
                        v["changed"].as_bool(),
                        Some(want),
                        "{} {} as {}: {v}",
                        if liked { "PUT" } else { "DELETE" },
                        self.path(key.0),
                        key.1
                    );
                }
                self.state.insert(key, St::Known(liked));
                Sent::Acked
            }
            Ok((503 | 504, _)) => Sent::Unanswered,
            Ok((st, v)) => panic!("{} as {} answered {st}: {v}", self.path(key.0), key.1),
            Err(_) => Sent::Dead,
        }
    }

    /// Retry every unanswered request (the server is up); afterwards every state is known.
    async fn settle(&mut self, c: &Client, base: &str) -> usize {
        let pending: Vec<((u64, u64), bool)> = self
            .state
            .iter()
            .filter_map(|(k, s)| match s {
                St::Pending(want) => Some((*k, *want)),
                St::Known(_) => None,
            })
            .collect();
        for (key, want) in &pending {
            let mut tries = 0;
            while !matches!(self.send(c, base, *key, *want, None).await, Sent::Acked) {
                tries += 1;
                assert!(tries < 20, "retrying {key:?} never succeeded");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        pending.len()
    }
}

// ---------------------------------------------------------------------------------------------
// Embedded store: mixed workload, 20 kills.

/// Registered posts: one hot, three others.
const POSTS: [u64; 4] = [1, 2, 3, 4];
const HOT: u64 = 1;
/// Concurrent client tasks.
const TASKS: u64 = 6;
/// Users each task likes comments as.
const COMMENT_LIKERS: u64 = 40;
/// SIGKILLs in a row.
const KILLS: usize = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CState {
    Alive,
    /// The delete got no answer.
    Deleting,
    Deleted,
}

/// An acknowledged (201) comment.
struct MyComment {
    id: u64,
    post: u64,
    author: u64,
    /// Only these may be deleted; the others ("keepers") take likes.
    deletable: bool,
    state: CState,
}

/// One client task's ledger. Tasks own disjoint users, so one key's requests are never
/// concurrent and "the last request" of a key is well defined.
struct Task {
    rng: StdRng,
    next_user: u64,
    comment_likers: std::ops::Range<u64>,
    likes: Likes,
    comment_likes: Likes,
    comments: Vec<MyComment>,
    /// Comment creations that got no answer (they may exist).
    unknown_comments: u64,
    acked: u64,
}

impl Task {
    fn new(t: u64, seed: u64) -> Task {
        let first = 5_000_000 + t * 1_000;
        Task {
            rng: StdRng::seed_from_u64(seed ^ t.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            next_user: 10_000 + t * 1_000_000,
            comment_likers: first..first + COMMENT_LIKERS,
            likes: Likes::default(),
            comment_likes: Likes { comment: true, ..Likes::default() },
            comments: Vec::new(),
            unknown_comments: 0,
            acked: 0,
        }
    }

    fn fresh_user(&mut self) -> u64 {
        self.next_user += 1;
        self.next_user
    }

    fn random_post(&mut self) -> u64 {
        if self.rng.random_bool(0.6) { HOT } else { POSTS[self.rng.random_range(1..POSTS.len())] }
    }

    /// Run until the server stops answering.
    async fn run(
        mut self,
        c: Arc<Client>,
        base: String,
        keepers: Arc<Vec<u64>>,
        total: Arc<AtomicU64>,
    ) -> Task {
        loop {
            let sent = self.step(&c, &base, &keepers).await;
            match sent {
                Sent::Acked => {
                    self.acked += 1;
                    total.fetch_add(1, Ordering::Relaxed);
                }
                Sent::Unanswered => {}
                Sent::Dead => return self,
            }
        }
    }

    /// One random operation.
    async fn step(&mut self, c: &Client, base: &str, keepers: &[u64]) -> Sent {
        let r = self.rng.random_range(0..100);
        if r < 40 {
            // A new like (a fresh user), sometimes retried at once: the retry changes nothing.
            let key = (self.random_post(), self.fresh_user());
            let sent = self.likes.send(c, base, key, true, Some(true)).await;
            if matches!(sent, Sent::Acked) && self.rng.random_bool(0.25) {
                return self.likes.send(c, base, key, true, Some(false)).await;
            }
            return sent;
        }
        if r < 55 {
            if let Some(key) = self.likes.pick(&mut self.rng, true) {
                return self.likes.send(c, base, key, false, Some(true)).await;
            }
        } else if r < 62 {
            if let Some(key) = self.likes.pick(&mut self.rng, false) {
                return self.likes.send(c, base, key, true, Some(true)).await;
            }
        } else if r < 68 {
            // A late retry of an acknowledged like (possibly from before a crash).
            if let Some(key) = self.likes.pick(&mut self.rng, true) {
                return self.likes.send(c, base, key, true, Some(false)).await;
            }
        } else if r < 76 {
            return self.comment(c, base).await;
        } else if r < 80 {
            let alive: Vec<usize> = (0..self.comments.len())
                .filter(|&i| self.comments[i].deletable && self.comments[i].state == CState::Alive)
                .collect();
            if !alive.is_empty() {
                let i = alive[self.rng.random_range(0..alive.len())];
                return self.delete_comment(c, base, i).await;
            }
        } else if !keepers.is_empty() {
            // Toggle a comment like of one of this task's comment likers.
            let comment = keepers[self.rng.random_range(0..keepers.len())];
            let user = self.rng.random_range(self.comment_likers.clone());
            match self.comment_likes.state.get(&(comment, user)).copied() {
                None | Some(St::Known(false)) => {
                    return self.comment_likes.send(c, base, (comment, user), true, Some(true)).await;
                }
                Some(St::Known(true)) => {
                    return self.comment_likes.send(c, base, (comment, user), false, Some(true)).await;
                }
                Some(St::Pending(_)) => {}
            }
        }
        // Nothing fitted: a plain new like.
        let key = (self.random_post(), self.fresh_user());
        self.likes.send(c, base, key, true, Some(true)).await
    }

    /// A top-level comment by a fresh user (so no rate limit or duplicate filter applies).
    async fn comment(&mut self, c: &Client, base: &str) -> Sent {
        let (post, author) = (self.random_post(), self.fresh_user());
        // Plain words only: digits can read as leetspeak to the toxicity filter.
        let (things, verdicts) = (
            ["garden", "sunset", "harbour", "mountain", "recipe", "concert", "library", "bridge"],
            ["Lovely", "What a", "Such a calm", "I miss this", "Great light on this", "Beautiful"],
        );
        let text = format!(
            "{} {} picture",
            verdicts[self.rng.random_range(0..verdicts.len())],
            things[self.rng.random_range(0..things.len())]
        );
        let body = serde_json::json!({ "text": text }).to_string();
        match c.call(base, Method::POST, &format!("/v1/posts/{post}/comments"), author, false, &body).await {
            Ok((201, v)) => {
                let id = v["comment_id"].as_str().and_then(|s| s.parse().ok()).expect("comment_id");
                let deletable = self.rng.random_bool(0.4);
                self.comments.push(MyComment { id, post, author, deletable, state: CState::Alive });
                Sent::Acked
            }
            Ok((503 | 504, _)) => {
                self.unknown_comments += 1;
                Sent::Unanswered
            }
            Ok((st, v)) => panic!("POST comment on {post} as {author} answered {st}: {v}"),
            Err(_) => {
                self.unknown_comments += 1;
                Sent::Dead
            }
        }
    }

    async fn delete_comment(&mut self, c: &Client, base: &str, i: usize) -> Sent {
        let (id, author) = (self.comments[i].id, self.comments[i].author);
        self.comments[i].state = CState::Deleting;
        match c.call(base, Method::DELETE, &format!("/v1/comments/{id}"), author, false, "").await {
            Ok((204, _)) => {
                self.comments[i].state = CState::Deleted;
                Sent::Acked
            }
            Ok((503 | 504, _)) => Sent::Unanswered,
            Ok((st, v)) => panic!("DELETE comment {id} as {author} answered {st}: {v}"),
            Err(_) => Sent::Dead,
        }
    }

    /// Retry every unanswered request; afterwards every state is known.
    async fn settle(&mut self, c: &Client, base: &str) -> usize {
        let mut n = self.likes.settle(c, base).await + self.comment_likes.settle(c, base).await;
        for m in self.comments.iter_mut().filter(|m| m.state == CState::Deleting) {
            let (st, v) = c
                .call(base, Method::DELETE, &format!("/v1/comments/{}", m.id), m.author, false, "")
                .await
                .expect("retry delete");
            // 404: the first delete had committed and the leaf is gone.
            assert!(st == 204 || st == 404, "retried delete of {} answered {st}: {v}", m.id);
            m.state = CState::Deleted;
            n += 1;
        }
        n
    }
}

/// The embedded service on `data_dir`, with a short aggregation window.
fn start_embedded(data_dir: &Path) -> Proc {
    let dir = data_dir.display().to_string();
    Proc(start_with(
        &["serve", "--listen", "127.0.0.1:0", "--data-dir", &dir],
        &[("LIKEWISE__AGGREGATOR__WINDOW_MS", "20"), ("LIKEWISE__STORE__CACHE_MB", "16")],
    ))
}

/// Every top-level comment of `post` as a moderator sees it (real statuses):
/// id -> (status, like_count).
async fn all_comments(c: &Client, base: &str, post: u64) -> HashMap<u64, (String, i64)> {
    let mut out = HashMap::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/v1/posts/{post}/comments?order=newest&limit=100");
        if let Some(cur) = &cursor {
            path.push_str(&format!("&cursor={cur}"));
        }
        let (st, v) = c.call(base, Method::GET, &path, 1, true, "").await.expect("list comments");
        assert_eq!(st, 200, "{v}");
        for i in v["items"].as_array().expect("items") {
            let id = i["comment_id"].as_str().and_then(|s| s.parse().ok()).expect("comment_id");
            let status = i["status"].as_str().expect("status").to_string();
            let likes = i["like_count"].as_i64().expect("like_count");
            assert!(out.insert(id, (status, likes)).is_none(), "comment {id} listed twice");
        }
        match v["next_cursor"].as_str() {
            Some(cur) => cursor = Some(cur.to_string()),
            None => return out,
        }
    }
}

async fn comment_count(c: &Client, base: &str, post: u64) -> Option<i64> {
    let (st, v) = c.call(base, Method::GET, &format!("/v1/posts/{post}"), AUTHOR, false, "").await.ok()?;
    assert_eq!(st, 200, "{v}");
    v["comment_count"].as_i64()
}

/// min / median / max, in milliseconds.
fn stats(xs: &[Duration]) -> String {
    let mut ms: Vec<f64> = xs.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(|a, b| a.total_cmp(b));
    if ms.is_empty() {
        return "n/a".into();
    }
    format!(
        "min {:.0} ms / median {:.0} ms / max {:.0} ms (n = {})",
        ms[0],
        ms[ms.len() / 2],
        ms[ms.len() - 1],
        ms.len()
    )
}

/// After a restart: check every acknowledged state against the rows, wait for the counts to
/// converge to the rows, retry what was unanswered, and check the comments. Returns the time
/// from `spawned` until every post's like count equalled its rows.
async fn verify(c: &Client, base: &str, tasks: &mut [Task], spawned: Instant, round: usize) -> Duration {
    // (a) Acknowledged likes are rows, acknowledged unlikes are not, and no row is unexplained.
    let mut rows: HashMap<u64, HashSet<u64>> = HashMap::new();
    for p in POSTS {
        rows.insert(p, c.likers(base, p).await);
    }
    let mut tracked: HashMap<u64, HashSet<u64>> = HashMap::new();
    let (mut lost, mut resurrected) = (Vec::new(), Vec::new());
    for t in tasks.iter() {
        for (&(post, user), s) in &t.likes.state {
            tracked.entry(post).or_default().insert(user);
            match s {
                St::Known(true) if !rows[&post].contains(&user) => lost.push((post, user)),
                St::Known(false) if rows[&post].contains(&user) => resurrected.push((post, user)),
                _ => {}
            }
        }
    }
    assert!(
        lost.is_empty(),
        "round {round}: {} acknowledged likes lost, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    assert!(
        resurrected.is_empty(),
        "round {round}: {} acknowledged unlikes came back, e.g. {:?}",
        resurrected.len(),
        &resurrected[..resurrected.len().min(5)]
    );
    for p in POSTS {
        let empty = HashSet::new();
        let stray: Vec<&u64> = rows[&p].difference(tracked.get(&p).unwrap_or(&empty)).collect();
        assert!(stray.is_empty(), "round {round}: post {p} has likes nobody sent: {stray:?}");
    }

    // (b) Counts converge to the rows.
    for p in POSTS {
        c.wait_count(base, p, rows[&p].len() as i64).await;
    }
    let converged = spawned.elapsed();

    // The client retries its unanswered requests; now every state is known.
    for t in tasks.iter_mut() {
        t.settle(c, base).await;
    }

    // (c) Acknowledged comments exist, acknowledged deletes hold, comment counts equal the
    // visible comments and comment like counts equal the known comment likes.
    let mut want_likes: HashMap<u64, i64> = HashMap::new();
    for t in tasks.iter() {
        for (&(comment, _), s) in &t.comment_likes.state {
            assert!(!matches!(s, St::Pending(_)), "settled");
            *want_likes.entry(comment).or_default() += i64::from(*s == St::Known(true));
        }
    }
    for p in POSTS {
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut first = true;
        loop {
            let listed = all_comments(c, base, p).await;
            if first {
                first = false;
                for m in tasks.iter().flat_map(|t| &t.comments).filter(|m| m.post == p) {
                    let got = listed.get(&m.id).map(|(s, _)| s.as_str());
                    match m.state {
                        CState::Alive => assert_eq!(
                            got,
                            Some("visible"),
                            "round {round}: acknowledged comment {} on post {p} is missing or not visible",
                            m.id
                        ),
                        CState::Deleted => assert!(
                            got.is_none() || got == Some("deleted"),
                            "round {round}: deleted comment {} is back: {got:?}",
                            m.id
                        ),
                        CState::Deleting => unreachable!("settled"),
                    }
                }
            }
            let visible = listed.values().filter(|(s, _)| s == "visible").count() as i64;
            let count = comment_count(c, base, p).await;
            let bad_likes: Vec<(u64, i64, i64)> = listed
                .iter()
                .filter(|(id, (_, n))| *n != want_likes.get(id).copied().unwrap_or(0))
                .map(|(id, (_, n))| (*id, *n, want_likes.get(id).copied().unwrap_or(0)))
                .collect();
            if count == Some(visible) && bad_likes.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: post {p}: comment_count {count:?} vs {visible} visible; comment like counts \
                 (id, got, want) off: {:?}",
                &bad_likes[..bad_likes.len().min(5)]
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    converged
}

#[test]
fn embedded_store_survives_twenty_sigkills_under_a_mixed_workload() {
    serial(embedded_crash_loop());
}

async fn embedded_crash_loop() {
    let began = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    let c = Client::new();
    let seed: u64 = rand::random();
    eprintln!("crash_loop(embedded): seed {seed:#x}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut tasks: Vec<Task> = (0..TASKS).map(|t| Task::new(t, seed)).collect();
    let (mut listen, mut first_read, mut converged) = (Vec::new(), Vec::new(), Vec::new());
    let mut kills = 0;
    loop {
        let spawned = Instant::now();
        let mut s = start_embedded(dir.path());
        if kills == 0 {
            for p in POSTS {
                let (st, v) = c
                    .call(&s.base, Method::PUT, &format!("/v1/posts/{p}"), 1, true, r#"{"author_id":"7"}"#)
                    .await
                    .expect("register post");
                assert_eq!(st, 200, "{v}");
            }
        } else {
            listen.push(spawned.elapsed());
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if let Ok((200, _)) = c.call(&s.base, Method::GET, "/v1/posts/1", 3, false, "").await {
                    break;
                }
                assert!(Instant::now() < deadline, "no successful read 10 s after restart {kills}");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            first_read.push(spawned.elapsed());
            converged.push(verify(&c, &s.base, &mut tasks, spawned, kills).await);
        }
        if kills == KILLS {
            stop(s);
            break;
        }

        // The workload, then SIGKILL at a random moment of it.
        let keepers: Arc<Vec<u64>> = Arc::new(
            tasks
                .iter()
                .flat_map(|t| &t.comments)
                .filter(|m| !m.deletable && m.state == CState::Alive)
                .map(|m| m.id)
                .collect(),
        );
        let total = Arc::new(AtomicU64::new(0));
        let running: Vec<_> = tasks
            .drain(..)
            .map(|t| tokio::spawn(t.run(c.clone(), s.base.clone(), keepers.clone(), total.clone())))
            .collect();
        // SIGKILL at a random moment 150-900 ms into the workload, but not before a write was
        // acknowledged (on a loaded machine the first answers can take a while).
        tokio::time::sleep(Duration::from_millis(rng.random_range(150..900))).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while total.load(Ordering::Relaxed) == 0 {
            assert!(Instant::now() < deadline, "restart {kills}: no write acknowledged within 10 s");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        s.child.kill().expect("SIGKILL");
        s.child.wait().expect("wait");
        kills += 1;
        for r in running {
            tasks.push(r.await.expect("a workload task failed"));
        }
    }

    // Offline recount of every post on the stopped server: the counters had no drift.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_likewise"))
        .args(["reconcile", "--all", "--data-dir", &dir.path().display().to_string()])
        .env("LIKEWISE__AUTH__SECRET", common::SECRET)
        .output()
        .expect("run likewise reconcile");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "reconcile failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(": 0 drifted"), "{text}");

    let acked: u64 = tasks.iter().map(|t| t.acked).sum();
    let likes: usize =
        tasks.iter().map(|t| t.likes.state.values().filter(|s| **s == St::Known(true)).count()).sum();
    let comments: usize = tasks.iter().map(|t| t.comments.len()).sum();
    let unknown: u64 = tasks.iter().map(|t| t.unknown_comments).sum();
    eprintln!(
        "crash_loop(embedded): {kills} SIGKILLs, {acked} acknowledged writes, {likes} likes standing, \
         {comments} acknowledged comments (+{unknown} unanswered), {:.1} s",
        began.elapsed().as_secs_f64()
    );
    eprintln!("crash_loop(embedded): spawn -> listening: {}", stats(&listen));
    eprintln!("crash_loop(embedded): spawn -> first successful read: {}", stats(&first_read));
    eprintln!(
        "crash_loop(embedded): spawn -> like counts equal the rows (incl. listing likers): {}",
        stats(&converged)
    );
}

// ---------------------------------------------------------------------------------------------
// Scale-out: the worker killed 10 times mid-storm.

/// Worker SIGKILLs in a row.
const WORKER_KILLS: usize = 10;
/// Posts on both shards (post % 2).
const SO_POSTS: [u64; 2] = [77, 78];

/// A client task of the scale-out storm: likes, unlikes, re-likes and retries of its own users.
struct Storm {
    rng: StdRng,
    next_user: u64,
    likes: Likes,
    acked: u64,
}

impl Storm {
    async fn run(
        mut self,
        c: Arc<Client>,
        base: String,
        stop: Arc<AtomicBool>,
        total: Arc<AtomicU64>,
    ) -> Storm {
        while !stop.load(Ordering::Relaxed) {
            let r = self.rng.random_range(0..100);
            let post = SO_POSTS[self.rng.random_range(0..SO_POSTS.len())];
            let (key, liked, changed) = match r {
                0..55 => {
                    self.next_user += 1;
                    ((post, self.next_user), true, true)
                }
                55..75 => match self.likes.pick(&mut self.rng, true) {
                    Some(k) => (k, false, true),
                    None => continue,
                },
                75..88 => match self.likes.pick(&mut self.rng, false) {
                    Some(k) => (k, true, true),
                    None => continue,
                },
                _ => match self.likes.pick(&mut self.rng, true) {
                    Some(k) => (k, true, false),
                    None => continue,
                },
            };
            match self.likes.send(&c, &base, key, liked, Some(changed)).await {
                Sent::Acked => {
                    self.acked += 1;
                    total.fetch_add(1, Ordering::Relaxed);
                }
                Sent::Unanswered => {}
                Sent::Dead => panic!("the API node stopped answering (only the worker is killed)"),
            }
        }
        self
    }

    fn liked(&self, post: u64) -> HashSet<u64> {
        self.likes
            .state
            .iter()
            .filter(|((p, _), s)| *p == post && **s == St::Known(true))
            .map(|((_, u), _)| *u)
            .collect()
    }
}

#[test]
fn scale_out_worker_survives_ten_sigkills_mid_storm() {
    serial(worker_crash_loop());
}

async fn worker_crash_loop() {
    let began = Instant::now();
    let d = Deployment::new().await;
    let mut worker = Proc(d.start("worker"));
    let api = Proc(d.start("api"));
    let c = Client::new();
    for p in SO_POSTS {
        let (st, v) = c
            .call(&api.base, Method::PUT, &format!("/v1/posts/{p}"), 1, true, r#"{"author_id":"7"}"#)
            .await
            .expect("register post");
        assert_eq!(st, 200, "{v}");
    }
    let seed: u64 = rand::random();
    eprintln!("crash_loop(scale-out): seed {seed:#x}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut storms: Vec<Storm> = (0..4u64)
        .map(|t| Storm {
            rng: StdRng::seed_from_u64(seed ^ (t + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            next_user: 100_000 + t * 1_000_000,
            likes: Likes::default(),
            acked: 0,
        })
        .collect();
    let (mut listen, mut caught_up, mut backlog) = (Vec::new(), Vec::new(), Vec::new());
    let total = Arc::new(AtomicU64::new(0));
    for kill in 1..=WORKER_KILLS {
        let stop_flag = Arc::new(AtomicBool::new(false));
        let running: Vec<_> = storms
            .drain(..)
            .map(|s| tokio::spawn(s.run(c.clone(), api.base.clone(), stop_flag.clone(), total.clone())))
            .collect();
        // Likes flow with the worker up, then it is SIGKILLed mid-stream, and they keep flowing
        // for a while with no worker at all (the API node does not need one to answer).
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..600))).await;
        worker.child.kill().expect("SIGKILL worker");
        worker.child.wait().expect("wait");
        let acked_at_kill = total.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(rng.random_range(50..400))).await;
        stop_flag.store(true, Ordering::Relaxed);
        for r in running {
            storms.push(r.await.expect("a storm task failed"));
        }
        for s in storms.iter_mut() {
            s.likes.settle(&c, &api.base).await;
        }

        // The rows are exactly the acknowledged states (the API node answered everything).
        let mut want = HashMap::new();
        for p in SO_POSTS {
            let liked: usize = storms.iter().map(|s| s.liked(p).len()).sum();
            assert_eq!(d.rows(p).await, liked as i64, "kill {kill}: post {p} rows vs acknowledged likes");
            want.insert(p, liked as i64);
        }
        // Writes acknowledged while no worker ran: the backlog the new worker finds.
        backlog.push(total.load(Ordering::Relaxed) - acked_at_kill);

        // Restart the worker; it must catch the counts up to the rows.
        let spawned = Instant::now();
        worker = Proc(d.start("worker"));
        listen.push(spawned.elapsed());
        for p in SO_POSTS {
            c.wait_count(&api.base, p, want[&p]).await;
        }
        caught_up.push(spawned.elapsed());
    }

    // The final state, through the API and straight from the shards.
    for p in SO_POSTS {
        let want: HashSet<u64> = storms.iter().flat_map(|s| s.liked(p)).collect();
        assert_eq!(c.likers(&api.base, p).await, want, "post {p}: likers are exactly the acknowledged likes");
        assert_eq!(d.rows(p).await, want.len() as i64);
        c.wait_count(&api.base, p, want.len() as i64).await;
    }
    // The reverse index (written by the killed worker's consumer) converges to exactly the
    // rows, and the relay left nothing unpublished.
    let want: HashSet<(u64, u64)> = storms
        .iter()
        .flat_map(|s| s.likes.state.iter().filter(|(_, st)| **st == St::Known(true)).map(|(k, _)| *k))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (index, unrelayed) = d.reverse_index(&SO_POSTS).await;
        if index == want && unrelayed == 0 {
            break;
        }
        let missing = want.difference(&index).count();
        let extra = index.difference(&want).count();
        assert!(
            Instant::now() < deadline,
            "reverse index: {missing} likes missing, {extra} extra; {unrelayed} outbox rows unrelayed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let acked: u64 = storms.iter().map(|s| s.acked).sum();
    stop(api);
    stop(worker);
    let cached = d.flush_redis().await;
    assert!(cached > 0, "the deployment used Redis");
    eprintln!(
        "crash_loop(scale-out): {WORKER_KILLS} worker SIGKILLs, {acked} acknowledged likes/unlikes, {:.1} s",
        began.elapsed().as_secs_f64()
    );
    eprintln!("crash_loop(scale-out): worker spawn -> listening: {}", stats(&listen));
    eprintln!("crash_loop(scale-out): worker spawn -> counts equal the rows: {}", stats(&caught_up));
    eprintln!("crash_loop(scale-out): writes acknowledged while the worker was down, per kill: {backlog:?}");
}

// ---------------------------------------------------------------------------------------------
// Embedded store: held comments and the review queue across SIGKILLs.

/// Every comment ID in the review queue, with its `held_by`.
async fn review_queue(c: &Client, base: &str) -> HashMap<u64, Value> {
    let mut out = HashMap::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = "/v1/moderation/queue?limit=100".to_string();
        if let Some(cur) = &cursor {
            path.push_str(&format!("&cursor={cur}"));
        }
        let (st, v) = c.call(base, Method::GET, &path, 1, true, "").await.expect("queue");
        assert_eq!(st, 200, "{v}");
        for i in v["items"].as_array().expect("items") {
            let id = i["comment_id"].as_str().and_then(|s| s.parse().ok()).expect("comment_id");
            out.insert(id, i["held_by"].clone());
        }
        match v["next_cursor"].as_str() {
            Some(cur) => cursor = Some(cur.to_string()),
            None => return out,
        }
    }
}

/// Comments held by the post author's hidden words, created by fresh users (so no rate limit
/// or duplicate check interferes) until the server stops answering; the count of answers.
async fn held_storm(c: Arc<Client>, base: String, task: u64, acked: Arc<AtomicU64>) {
    for n in 0.. {
        let user = 9_000_000 + task * 100_000 + n;
        let body = format!(r#"{{"text":"a forbidden thought number {n} from task {task}"}}"#);
        match c.call(&base, Method::POST, "/v1/posts/1/comments", user, false, &body).await {
            Ok((201, _)) => {
                acked.fetch_add(1, Ordering::Relaxed);
            }
            Ok((503 | 504, _)) => {}
            Ok((st, v)) => panic!("a held comment answered {st}: {v}"),
            Err(_) => return,
        }
    }
}

/// `likewise serve` SIGKILLed five times during a storm of comments that the post author's
/// hidden words hold. After every restart each stored held comment is in the review queue,
/// held by `hidden_words`: the comment, its hold and its queue entry are one atomic write, so
/// no kill lands between them.
#[test]
fn held_comments_are_in_the_review_queue_after_sigkills_mid_storm() {
    serial(held_comments_crash_loop());
}

async fn held_comments_crash_loop() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = Client::new();
    let mut rng = StdRng::seed_from_u64(rand::random());
    let mut s = start_embedded(dir.path());
    let (st, v) =
        c.call(&s.base, Method::PUT, "/v1/posts/1", 1, true, r#"{"author_id":"7"}"#).await.expect("post");
    assert_eq!(st, 200, "{v}");
    let words = r#"{"words":["forbidden"]}"#;
    let (st, v) =
        c.call(&s.base, Method::PUT, "/v1/me/hidden-words", AUTHOR, false, words).await.expect("words");
    assert_eq!(st, 200, "{v}");
    for kill in 1..=5 {
        let acked = Arc::new(AtomicU64::new(0));
        let storm: Vec<_> = (0..8u64)
            .map(|t| tokio::spawn(held_storm(c.clone(), s.base.clone(), t, acked.clone())))
            .collect();
        // SIGKILL once the storm is under way, at a random moment of it.
        let deadline = Instant::now() + Duration::from_secs(10);
        while acked.load(Ordering::Relaxed) < 16 {
            assert!(Instant::now() < deadline, "kill {kill}: no comment acknowledged within 10 s");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(20..300))).await;
        s.child.kill().expect("SIGKILL");
        s.child.wait().expect("wait");
        for t in storm {
            t.await.expect("a storm task failed");
        }
        s = start_embedded(dir.path());
        let comments = all_comments(&c, &s.base, 1).await;
        let queue = review_queue(&c, &s.base).await;
        let held: Vec<u64> =
            comments.iter().filter(|(_, (st, _))| st == "hidden_by_filter").map(|(id, _)| *id).collect();
        assert_eq!(held.len(), comments.len(), "kill {kill}: every comment is held");
        let missing: Vec<&u64> = held.iter().filter(|id| !queue.contains_key(id)).collect();
        assert!(missing.is_empty(), "kill {kill}: held comments out of the review queue: {missing:?}");
        for id in &held {
            assert_eq!(queue[id], "hidden_words", "kill {kill}: comment {id}");
        }
        eprintln!("kill {kill}: {} held comments, all queued", held.len());
    }
    stop(s);
}
