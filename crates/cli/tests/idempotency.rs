//! Safe retries of comment creation with `Idempotency-Key` (docs/api.md, Comments): a repeat of the
//! same request answers the first call's status and body and creates nothing; the key with
//! another body is a 422; a repeat while the first is running waits for it (a 409 if it
//! outlives the wait); bad keys are a 400.
//! The in-process tests run on the embedded store, and on the scale-out engines with
//! `LIKEWISE_TEST_BACKEND=postgres`; the last test retries across two API nodes of a real
//! deployment, and one kills the process mid-storm.

mod common;

use common::deployment::Deployment;
use common::proc::{Client, start_with};
use common::{TestApp, assert_error};
use hyper::{Method, StatusCode};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Barrier;

const POST: u64 = 42;
const AUTHOR: u64 = 7;

/// `POST /v1/posts/{POST}/comments` as `user` with `body` and, when given, the key.
async fn comment(app: &TestApp, user: u64, body: &str, key: Option<&str>) -> (StatusCode, Value) {
    let auth = format!("Bearer {}", app.user(user));
    let mut headers = vec![("authorization", auth.as_str()), ("content-type", "application/json")];
    if let Some(k) = key {
        headers.push(("idempotency-key", k));
    }
    let (st, _, v) = app.raw("POST", &format!("/v1/posts/{POST}/comments"), &headers, body).await;
    (st, v)
}

/// Every top-level comment of the post, as a moderator (service role) sees them.
async fn all_comments(app: &TestApp) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let q = cursor.as_ref().map(|c| format!("&cursor={c}")).unwrap_or_default();
        let path = format!("/v1/posts/{POST}/comments?order=newest&limit=100{q}");
        let (st, v) = app.call(Method::GET, &path, Some(&app.service()), None).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        out.extend(v["items"].as_array().expect("items").iter().cloned());
        match v["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return out,
        }
    }
}

async fn comment_count(app: &TestApp) -> i64 {
    let (_, v) = app.call(Method::GET, &format!("/v1/posts/{POST}"), Some(&app.user(AUTHOR)), None).await;
    v["comment_count"].as_i64().unwrap_or(-1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeat_answers_the_first_call_and_creates_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(POST, AUTHOR, false).await;
    let body = r#"{"text": "What a view!"}"#;
    let (st, first) = comment(&app, 1001, body, Some("retry-1")).await;
    assert_eq!(st, StatusCode::CREATED, "{first}");
    for _ in 0..3 {
        let (st, again) = comment(&app, 1001, body, Some("retry-1")).await;
        assert_eq!(st, StatusCode::CREATED, "{again}");
        assert_eq!(again, first, "a repeat answers the first call's body");
    }
    // Another body under the same key is refused; nothing is created.
    let (st, v) = comment(&app, 1001, r#"{"text": "Something else"}"#, Some("retry-1")).await;
    assert_error(st, &v, 422, "invalid");
    // Another caller's equal key is their own.
    let (st, other) = comment(&app, 1002, body, Some("retry-1")).await;
    assert_eq!(st, StatusCode::CREATED, "{other}");
    assert_ne!(other["comment_id"], first["comment_id"]);
    // A reply is a request of its own under its own key.
    let reply = format!(r#"{{"text": "Agreed", "parent_id": {}}}"#, first["comment_id"]);
    let (st, r) = comment(&app, 1003, &reply, Some("reply-1")).await;
    assert_eq!(st, StatusCode::CREATED, "{r}");
    let (st, r2) = comment(&app, 1003, &reply, Some("reply-1")).await;
    assert_eq!((st, &r2), (StatusCode::CREATED, &r));
    assert_eq!(all_comments(&app).await.len(), 2);
    app.wait_until(|| async { comment_count(&app).await == 3 }).await;
    // Without a key every call creates a comment, as before.
    for _ in 0..2 {
        assert_eq!(comment(&app, 1004, r#"{"text": "no key"}"#, None).await.0, StatusCode::CREATED);
    }
    assert_eq!(all_comments(&app).await.len(), 4);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_that_are_empty_too_long_or_not_visible_ascii_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(POST, AUTHOR, false).await;
    let body = r#"{"text": "hello"}"#;
    let long = "k".repeat(256);
    for bad in ["", long.as_str(), "has space", "tab\there"] {
        let (st, v) = comment(&app, 1001, body, Some(bad)).await;
        assert_error(st, &v, 400, "invalid");
    }
    let ok = "k".repeat(255);
    assert_eq!(comment(&app, 1001, body, Some(&ok)).await.0, StatusCode::CREATED);
    let auth = format!("Bearer {}", app.user(1001));
    let two = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
        ("idempotency-key", "a"),
        ("idempotency-key", "b"),
    ];
    let (st, _, v) = app.raw("POST", &format!("/v1/posts/{POST}/comments"), &two, body).await;
    assert_error(st, &v, 400, "invalid");
    assert_eq!(all_comments(&app).await.len(), 1, "no refused call created a comment");
    app.stop().await;
}

/// `users` users each send the same comment `retries` times at once (a barrier releases
/// them), under one key per user when `keyed` (then each sender retries until it gets a 201).
/// Returns each user's answers.
async fn storm(
    app: &Arc<TestApp>,
    users: u64,
    retries: usize,
    keyed: bool,
) -> HashMap<u64, Vec<(StatusCode, Value)>> {
    let barrier = Arc::new(Barrier::new(users as usize * retries));
    let mut tasks = Vec::new();
    for user in 2_000..2_000 + users {
        for _ in 0..retries {
            let (app, barrier) = (app.clone(), barrier.clone());
            tasks.push(tokio::spawn(async move {
                let body = format!(r#"{{"text": "hello from {user}"}}"#);
                let key = format!("key-of-{user}");
                barrier.wait().await;
                if !keyed {
                    return (user, vec![comment(&app, user, &body, None).await]);
                }
                // A client that got no 201 tries again after a moment, as a phone does: a 409
                // (the first call still runs) or a 503 (it timed out) may well have created it.
                let mut answers = Vec::new();
                let deadline = Instant::now() + Duration::from_secs(60);
                loop {
                    let (st, v) = comment(&app, user, &body, Some(&key)).await;
                    answers.push((st, v));
                    if st == StatusCode::CREATED || Instant::now() > deadline {
                        return (user, answers);
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }));
        }
    }
    let mut out: HashMap<u64, Vec<(StatusCode, Value)>> = HashMap::new();
    for t in tasks {
        let (user, answers) = t.await.expect("task");
        out.entry(user).or_default().extend(answers);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_storm_makes_one_comment_per_key_and_one_notification_per_commenter() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = Arc::new(TestApp::start(dir.path()).await);
    app.post(POST, AUTHOR, false).await;
    let answers = storm(&app, 100, 5, true).await;
    for (user, got) in &answers {
        let created: HashSet<&Value> =
            got.iter().filter(|(st, _)| *st == StatusCode::CREATED).map(|(_, v)| &v["comment_id"]).collect();
        assert_eq!(created.len(), 1, "user {user}: every 201 names one comment: {got:?}");
        for (st, v) in got {
            // A repeat while the first call runs is a 409; a loaded machine may time a call
            // out (503, nothing written) or answer one still committing at its deadline as
            // 504 outcome_unknown; nothing else.
            let expected = [
                StatusCode::CREATED,
                StatusCode::CONFLICT,
                StatusCode::SERVICE_UNAVAILABLE,
                StatusCode::GATEWAY_TIMEOUT,
            ];
            assert!(expected.contains(st), "user {user}: {st} {v}");
            if *st == StatusCode::CONFLICT {
                assert_error(*st, v, 409, "conflict");
            }
            if *st == StatusCode::GATEWAY_TIMEOUT {
                assert_error(*st, v, 504, "outcome_unknown");
            }
        }
    }
    assert_eq!(all_comments(&app).await.len(), 100);
    app.wait_until(|| async { comment_count(&app).await == 100 }).await;
    // One `commented` item for the post author, naming each commenter once.
    let author = app.user(AUTHOR);
    app.wait_until(|| async {
        let (_, v) = app.call(Method::GET, "/v1/me/notifications?limit=100", Some(&author), None).await;
        let items = v["items"].as_array().cloned().unwrap_or_default();
        let commented: Vec<&Value> = items.iter().filter(|i| i["kind"] == "commented").collect();
        commented.iter().map(|i| i["actor_count"].as_i64().unwrap_or(0)).sum::<i64>() == 100
    })
    .await;
    // The same storm without keys creates duplicates: what the keys prevent.
    let unkeyed = storm(&app, 20, 5, false).await;
    let created = unkeyed.values().flatten().filter(|(st, _)| *st == StatusCode::CREATED).count();
    assert_eq!(created, 100, "every unkeyed call creates a comment");
    assert_eq!(all_comments(&app).await.len(), 200);
    Arc::try_unwrap(app).ok().expect("no other owner").stop().await;
}

/// Comments created under keys by a storm against `base`, killed when `kill_after` answers
/// are in: every key is then retried against the restarted server, and must answer with the
/// comment its first 201 named (or create it, if none was acknowledged), one per key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_storm_leaves_exactly_one_comment_per_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().display().to_string();
    let args = ["serve", "--listen", "127.0.0.1:0", "--data-dir", data.as_str()];
    let c = Client::new();
    let mut s = start_with(&args, &[]);
    let (st, v) = c
        .call(&s.base, Method::PUT, &format!("/v1/posts/{POST}"), 1, true, r#"{"author_id":"7"}"#)
        .await
        .expect("post");
    assert_eq!(st, 200, "{v}");
    const KEYS: u64 = 300;
    let acked = Arc::new(std::sync::Mutex::new(HashMap::<u64, String>::new()));
    let mut tasks = Vec::new();
    for k in 0..KEYS {
        let (c, base, acked) = (c.clone(), s.base.clone(), acked.clone());
        tasks.push(tokio::spawn(async move {
            let key = format!("crash-{k}");
            let body = format!(r#"{{"text": "comment number {k}"}}"#);
            let path = format!("/v1/posts/{POST}/comments");
            if let Ok((201, v)) = c
                .call_with(&base, Method::POST, &path, 3_000 + k, false, &body, &[("idempotency-key", &key)])
                .await
            {
                acked.lock().expect("lock").insert(k, v["comment_id"].as_str().unwrap_or("").to_string());
            }
        }));
    }
    // Kill once part of the storm is acknowledged, with the rest in flight.
    let deadline = Instant::now() + Duration::from_secs(30);
    while acked.lock().expect("lock").len() < (KEYS / 3) as usize {
        assert!(Instant::now() < deadline, "the storm made no progress");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    s.child.kill().expect("SIGKILL");
    let _ = s.child.wait();
    for t in tasks {
        let _ = t.await;
    }
    let before = acked.lock().expect("lock").clone();
    assert!(!before.is_empty() && before.len() < KEYS as usize || before.len() == KEYS as usize);
    s = start_with(&args, &[]);
    let mut ids = HashSet::new();
    for k in 0..KEYS {
        let key = format!("crash-{k}");
        let body = format!(r#"{{"text": "comment number {k}"}}"#);
        let path = format!("/v1/posts/{POST}/comments");
        let (st, v) = c
            .call_with(&s.base, Method::POST, &path, 3_000 + k, false, &body, &[("idempotency-key", &key)])
            .await
            .expect("retry");
        assert_eq!(st, 201, "key {k}: {v}");
        let id = v["comment_id"].as_str().expect("id").to_string();
        if let Some(first) = before.get(&k) {
            assert_eq!(&id, first, "key {k}: an acknowledged comment is answered after the crash");
        }
        assert!(ids.insert(id), "key {k}: two keys answered one comment");
    }
    // Exactly one comment per key is stored.
    let mut stored = 0;
    let mut cursor = String::new();
    loop {
        let path = format!("/v1/posts/{POST}/comments?order=newest&limit=100{cursor}");
        let (_, v) = c.call(&s.base, Method::GET, &path, 1, true, "").await.expect("page");
        stored += v["items"].as_array().map_or(0, |a| a.len());
        match v["next_cursor"].as_str() {
            Some(n) => cursor = format!("&cursor={n}"),
            None => break,
        }
    }
    assert_eq!(stored, KEYS as usize);
    s.child.kill().expect("SIGKILL");
    let _ = s.child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_reaching_another_api_node_finds_the_key() {
    let d = Deployment::new().await;
    let _worker = d.start("worker");
    let (a, b) = (d.start("api"), d.start("api"));
    let bases = [a.base.clone(), b.base.clone()];
    let c = Client::new();
    let (st, v) = c
        .call(&a.base, Method::PUT, &format!("/v1/posts/{POST}"), 1, true, r#"{"author_id":"7"}"#)
        .await
        .expect("post");
    assert_eq!(st, 200, "{v}");
    const USERS: u64 = 100;
    const RETRIES: usize = 5;
    let barrier = Arc::new(Barrier::new(USERS as usize * RETRIES));
    let mut tasks = Vec::new();
    for user in 4_000..4_000 + USERS {
        for r in 0..RETRIES {
            let (c, base, barrier) = (c.clone(), bases[r % 2].clone(), barrier.clone());
            tasks.push(tokio::spawn(async move {
                let key = format!("two-nodes-{user}");
                let body = format!(r#"{{"text": "hello from {user} over two nodes"}}"#);
                let path = format!("/v1/posts/{POST}/comments");
                barrier.wait().await;
                let got = c
                    .call_with(&base, Method::POST, &path, user, false, &body, &[("idempotency-key", &key)])
                    .await;
                (user, got.expect("call"))
            }));
        }
    }
    let mut per_user: HashMap<u64, HashSet<String>> = HashMap::new();
    for t in tasks {
        let (user, (st, v)) = t.await.expect("task");
        assert!(st == 201 || st == 409, "user {user}: {st} {v}");
        if st == 201 {
            per_user.entry(user).or_default().insert(v["comment_id"].as_str().expect("id").to_string());
        }
    }
    assert_eq!(per_user.len(), USERS as usize, "every user got a 201");
    assert!(per_user.values().all(|ids| ids.len() == 1), "one comment per key: {per_user:?}");
    // Both nodes page through exactly one comment per user, and count them.
    for base in &bases {
        let mut seen = HashSet::new();
        let mut cursor = String::new();
        loop {
            let path = format!("/v1/posts/{POST}/comments?order=newest&limit=100{cursor}");
            let (_, v) = c.call(base, Method::GET, &path, 1, true, "").await.expect("page");
            for item in v["items"].as_array().expect("items") {
                assert!(seen.insert(item["comment_id"].to_string()), "{base}: a comment twice");
            }
            match v["next_cursor"].as_str() {
                Some(n) => cursor = format!("&cursor={n}"),
                None => break,
            }
        }
        assert_eq!(seen.len(), USERS as usize, "{base}");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let (_, v) = c
                .call(base, Method::GET, &format!("/v1/posts/{POST}"), AUTHOR, false, "")
                .await
                .expect("post");
            if v["comment_count"].as_i64() == Some(USERS as i64) {
                break;
            }
            assert!(Instant::now() < deadline, "{base}: comment_count {v}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    d.cleanup().await;
}

/// A thread that keeps one core busy until dropped (a CPU hog beside the service).
struct Hog(Arc<std::sync::atomic::AtomicBool>, Option<std::thread::JoinHandle<u64>>);

impl Hog {
    fn start() -> Hog {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let spin = std::thread::spawn(move || {
            let mut n = 0u64;
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                n = std::hint::black_box(n.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            n
        });
        Hog(stop, Some(spin))
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.1.take() {
            let _ = t.join();
        }
    }
}

/// 100 users each send their keyed comment 5 times at once over `bases` (a barrier releases
/// all 500 senders), with a CPU hog beside the service; a sender that gets no 201 sends again
/// after a moment (a 409 while the first call runs; a 503 or 504 under load). Every sender
/// ends with a 201 naming its user's one comment, and each node pages through exactly one
/// comment per user. Prints how long the storm took and what else was answered.
async fn keyed_retry_storm_beside_a_hog(engine: &str, bases: &[String]) {
    const USERS: u64 = 100;
    const RETRIES: usize = 5;
    let c = Client::new();
    let (st, v) = c
        .call(&bases[0], Method::PUT, &format!("/v1/posts/{POST}"), 1, true, r#"{"author_id":"7"}"#)
        .await
        .expect("post");
    assert_eq!(st, 200, "{v}");
    let hog = Hog::start();
    let barrier = Arc::new(Barrier::new(USERS as usize * RETRIES + 1));
    let mut tasks = Vec::new();
    for user in 5_000..5_000 + USERS {
        for r in 0..RETRIES {
            let (c, base, barrier) = (c.clone(), bases[r % bases.len()].clone(), barrier.clone());
            tasks.push(tokio::spawn(async move {
                let key = format!("hog-{user}");
                let body = format!(r#"{{"text": "hello from {user} beside a hog"}}"#);
                let path = format!("/v1/posts/{POST}/comments");
                barrier.wait().await;
                let mut others = Vec::new();
                let deadline = Instant::now() + Duration::from_secs(60);
                loop {
                    let (st, v) = c
                        .call_with(
                            &base,
                            Method::POST,
                            &path,
                            user,
                            false,
                            &body,
                            &[("idempotency-key", &key)],
                        )
                        .await
                        .expect("call");
                    match st {
                        201 => return (user, v["comment_id"].as_str().expect("id").to_string(), others),
                        409 => assert_error(StatusCode::CONFLICT, &v, 409, "conflict"),
                        503 => assert_error(StatusCode::SERVICE_UNAVAILABLE, &v, 503, "unavailable"),
                        504 => assert_error(StatusCode::GATEWAY_TIMEOUT, &v, 504, "outcome_unknown"),
                        _ => panic!("user {user}: {st} {v}"),
                    }
                    others.push((st, v["message"].as_str().unwrap_or_default().to_string()));
                    assert!(Instant::now() < deadline, "user {user}: no 201 in 60 s: {others:?}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }));
        }
    }
    barrier.wait().await;
    let started = Instant::now();
    let mut per_user: HashMap<u64, HashSet<String>> = HashMap::new();
    let mut others: HashMap<(u16, String), usize> = HashMap::new();
    for t in tasks {
        let (user, id, got) = t.await.expect("task");
        per_user.entry(user).or_default().insert(id);
        for answer in got {
            *others.entry(answer).or_default() += 1;
        }
    }
    let took = started.elapsed();
    drop(hog);
    eprintln!(
        "{engine}: keyed retry storm of {USERS} users x {RETRIES} beside a CPU hog: every sender's 201 \
         after {took:.2?}; other answers on the way: {others:?}"
    );
    assert_eq!(per_user.len(), USERS as usize);
    for (user, ids) in &per_user {
        assert_eq!(ids.len(), 1, "user {user}: every 201 names one comment: {ids:?}");
    }
    for base in bases {
        let mut authors: HashMap<String, usize> = HashMap::new();
        let mut cursor = String::new();
        loop {
            let path = format!("/v1/posts/{POST}/comments?order=newest&limit=100{cursor}");
            let (_, v) = c.call(base, Method::GET, &path, 1, true, "").await.expect("page");
            for item in v["items"].as_array().expect("items") {
                *authors.entry(item["author_id"].to_string()).or_default() += 1;
            }
            match v["next_cursor"].as_str() {
                Some(n) => cursor = format!("&cursor={n}"),
                None => break,
            }
        }
        assert_eq!(authors.len(), USERS as usize, "{base}: {authors:?}");
        assert!(authors.values().all(|n| *n == 1), "{base}: one comment per user: {authors:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_retry_storm_beside_a_cpu_hog_ends_with_one_comment_per_user_embedded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().display().to_string();
    let s = start_with(&["serve", "--listen", "127.0.0.1:0", "--data-dir", data.as_str()], &[]);
    keyed_retry_storm_beside_a_hog("embedded", std::slice::from_ref(&s.base)).await;
    common::proc::stop(s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_retry_storm_beside_a_cpu_hog_ends_with_one_comment_per_user_on_two_postgres_nodes() {
    let d = Deployment::new().await;
    let (a, b) = (d.start("api"), d.start("api"));
    keyed_retry_storm_beside_a_hog("postgres", &[a.base.clone(), b.base.clone()]).await;
    for s in [a, b] {
        common::proc::stop(s);
    }
    d.cleanup().await;
}
