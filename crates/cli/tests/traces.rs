//! Traces, end to end through the binary: `telemetry.otlp_endpoint` points at a small OTLP/HTTP
//! receiver written with the official protobuf classes (`tests/support/otlp_receiver.py`,
//! PyPI `opentelemetry-proto`), and one like is followed from its request to its notification
//! and its Kafka export (tansu broker, as in `export.rs`): the request's span, the group
//! commit that wrote it, the notifier's batch and the export's batch all belong to one trace,
//! the last three children of the request, whose parent is the caller's `traceparent`. The
//! trace context crosses the event log, so on the scale-out engine it crosses processes: the
//! API node writes, a worker node notifies and exports.

mod common;

use common::proc::{Client, Server, put_post, signal, start_with};
use common::tansu::{Broker, free_port};
use hyper::Method;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The receiver process and the file it appends spans to.
struct Receiver {
    child: Child,
    out: PathBuf,
    port: u16,
}

impl Receiver {
    fn start(dir: &Path) -> Receiver {
        common::python::ensure_packages();
        let (out, port_file) = (dir.join("spans.jsonl"), dir.join("receiver.port"));
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/otlp_receiver.py");
        let child = Command::new("python3")
            .arg(script)
            .arg("--out")
            .arg(&out)
            .arg("--port-file")
            .arg(&port_file)
            .stdout(Stdio::null())
            .spawn()
            .expect("start the OTLP receiver (python3 with opentelemetry-proto)");
        let deadline = Instant::now() + Duration::from_secs(20);
        let port = loop {
            if let Some(p) = std::fs::read_to_string(&port_file).ok().and_then(|s| s.trim().parse().ok()) {
                break p;
            }
            assert!(Instant::now() < deadline, "the OTLP receiver did not start");
            std::thread::sleep(Duration::from_millis(50));
        };
        Receiver { child, out, port }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn spans(&self) -> Vec<Value> {
        let spans: Vec<Value> = std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("receiver line"))
            .collect();
        for s in &spans {
            assert!(s.get("invalid").is_none(), "the receiver could not read a request: {s}");
        }
        spans
    }

    /// The spans of `trace`, once `done` holds for them.
    async fn wait_for(&self, trace: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let spans: Vec<Value> = self.spans().into_iter().filter(|s| s["trace_id"] == trace).collect();
            if done(&spans) {
                return spans;
            }
            assert!(Instant::now() < deadline, "trace {trace} never completed; its spans: {spans:#?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The span of `trace` called `name` (a consumer's batch: `name` is its consumer).
fn named<'a>(spans: &'a [Value], name: &str) -> Option<&'a Value> {
    spans.iter().find(|s| s["name"] == name)
}

const LIKE_ROUTE: &str = "PUT /v1/posts/{post_id}/like";

/// Whether `spans` hold a like's whole chain: request, group commit, notifier, export.
fn complete(spans: &[Value]) -> bool {
    [LIKE_ROUTE, "group_commit", "notifier", "export"].iter().all(|n| named(spans, n).is_some())
}

/// The chain's links: the request span continues `caller` (when given) and is the parent of
/// the group commit and of both consumers' batches. Returns the request span.
fn assert_chain(spans: &[Value], caller: Option<&str>, engine: &str) -> Value {
    let request = named(spans, LIKE_ROUTE).expect("request span").clone();
    assert_eq!(request["kind"], 2, "a server span: {request}");
    assert_eq!(request["attributes"]["http.route"], "/v1/posts/{post_id}/like", "{request}");
    assert_eq!(request["attributes"]["http.request.method"], "PUT", "{request}");
    assert_eq!(request["attributes"]["http.response.status_code"], 200, "{request}");
    assert_eq!(request["service"], "likewise", "{request}");
    match caller {
        Some(parent) => {
            assert_eq!(request["parent_span_id"], parent, "the request continues the caller's trace")
        }
        None => assert_eq!(request["parent_span_id"], "", "a request without traceparent starts a trace"),
    }
    let id = request["span_id"].as_str().expect("span id");
    let commit = named(spans, "group_commit").expect("group commit span");
    assert_eq!(commit["parent_span_id"], id, "the group commit is the request's child: {commit}");
    assert_eq!(commit["attributes"]["engine"], engine, "{commit}");
    assert!(commit["attributes"]["batch_size"].as_i64() >= Some(1), "{commit}");
    assert!(commit["attributes"].get("lane").is_some(), "{commit}");
    for consumer in ["notifier", "export"] {
        let s = named(spans, consumer).expect("consumer span");
        assert_eq!(s["parent_span_id"], id, "the {consumer}'s batch is the request's child: {s}");
        assert!(s["attributes"]["events"].as_i64() >= Some(1), "{s}");
    }
    request
}

/// A like of `post` by `user` through `base`, continuing `traceparent` when given.
async fn like(c: &Client, base: &str, post: u64, user: u64, traceparent: Option<&str>) {
    let headers: Vec<(&str, &str)> = traceparent.map(|t| ("traceparent", t)).into_iter().collect();
    let path = format!("/v1/posts/{post}/like");
    let (st, v) = c.call_with(base, Method::PUT, &path, user, false, "", &headers).await.expect("like");
    assert_eq!((st, &v["changed"]), (200, &Value::Bool(true)), "{v}");
}

fn random_hex(bytes: usize) -> String {
    (0..bytes).map(|_| format!("{:02x}", rand::random::<u8>())).collect()
}

/// Two likes: one under the caller's sampled `traceparent`, one without (sampled by the
/// ratio of 1); each is one trace from request to notification and export.
async fn follow_two_likes(c: &Client, base: &str, receiver: &Receiver, engine: &str) {
    put_post(c, base, 1, 1_001).await;
    put_post(c, base, 2, 1_002).await;
    let (trace, caller) = (random_hex(16), random_hex(8));
    like(c, base, 1, 7, Some(&format!("00-{trace}-{caller}-01"))).await;
    let spans = receiver.wait_for(&trace, complete).await;
    assert_chain(&spans, Some(&caller), engine);

    like(c, base, 2, 8, None).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let own = loop {
        let own: Vec<String> = receiver
            .spans()
            .iter()
            .filter(|s| s["name"] == LIKE_ROUTE && s["trace_id"] != trace.as_str())
            .filter_map(|s| s["trace_id"].as_str().map(String::from))
            .collect();
        if let Some(t) = own.first() {
            assert_eq!(own.len(), 1, "one like, one trace: {own:?}");
            break t.clone();
        }
        assert!(Instant::now() < deadline, "the second like's request span never arrived");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let spans = receiver.wait_for(&own, complete).await;
    assert_chain(&spans, None, engine);
}

/// `likewise serve` on the embedded engine, exporting traces to `receiver` and events to
/// the broker on `kafka_port`.
fn serve_embedded(dir: &Path, receiver: &Receiver, kafka_port: u16) -> Server {
    let data = dir.join("data").display().to_string();
    let (brokers, endpoint) = (format!("127.0.0.1:{kafka_port}"), receiver.endpoint());
    let topic = format!("likewise.events.tr{:x}", rand::random::<u64>());
    let envs = [
        ("LIKEWISE__TELEMETRY__OTLP_ENDPOINT", endpoint.as_str()),
        ("LIKEWISE__EXPORT__KAFKA_BROKERS", brokers.as_str()),
        ("LIKEWISE__EXPORT__KAFKA_TOPIC", topic.as_str()),
    ];
    start_with(&["serve", "--listen", "127.0.0.1:0", "--data-dir", data.as_str()], &envs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_like_is_one_trace_from_request_to_notification_and_export() {
    let dir = tempfile::tempdir().expect("tmp");
    let receiver = Receiver::start(dir.path());
    let port = free_port();
    let _broker = Broker::start(port);
    let s = serve_embedded(dir.path(), &receiver, port);
    let c = Client::new();
    follow_two_likes(&c, &s.base, &receiver, "embedded").await;

    // A clean stop sends what is still queued: a like just before SIGTERM has its request
    // and group commit spans at the receiver once the process is gone.
    put_post(&c, &s.base, 3, 1_003).await;
    let (trace, caller) = (random_hex(16), random_hex(8));
    like(&c, &s.base, 3, 9, Some(&format!("00-{trace}-{caller}-01"))).await;
    signal(&s.child, "-TERM");
    let mut child = s.child;
    assert!(child.wait().expect("wait").success(), "a clean stop");
    let spans: Vec<Value> =
        receiver.spans().into_iter().filter(|s| s["trace_id"] == trace.as_str()).collect();
    let request = named(&spans, LIKE_ROUTE).expect("the last request's span was flushed at stop");
    let commit = named(&spans, "group_commit").expect("its group commit's span too");
    assert_eq!(commit["parent_span_id"], request["span_id"]);
}

/// The same on the scale-out engine, across processes: an API node takes the like, a worker
/// node notifies and exports it; both export their spans to the receiver.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_like_is_one_trace_across_the_api_and_worker_nodes() {
    let dir = tempfile::tempdir().expect("tmp");
    let receiver = Receiver::start(dir.path());
    let port = free_port();
    let _broker = Broker::start(port);
    let topic = format!("likewise.events.ts{:x}", rand::random::<u64>());
    let extra = format!(
        "[telemetry]\notlp_endpoint = \"{}\"\n[export]\nkafka_brokers = \"127.0.0.1:{port}\"\nkafka_topic = \"{topic}\"\n",
        receiver.endpoint()
    );
    let d = common::deployment::Deployment::with_config(&extra).await;
    let _worker = d.start("worker");
    let api = d.start("api");
    let c = Client::new();
    follow_two_likes(&c, &api.base, &receiver, "postgres").await;
    d.cleanup().await;
}

/// A value of `/metrics` at `base` (the first series of `name`, whatever its labels).
async fn metric(c: &Client, base: &str, name: &str) -> Option<f64> {
    use http_body_util::BodyExt;
    let req = hyper::Request::get(format!("{base}/metrics"))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .expect("req");
    let resp = c.http.request(req).await.ok()?;
    let body = resp.into_body().collect().await.ok()?.to_bytes();
    String::from_utf8_lossy(&body)
        .lines()
        .find(|l| l.split(['{', ' ']).next() == Some(name))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// With the collector unreachable, requests go on as before: their spans are dropped and
/// counted (`likewise_trace_spans_dropped_total`), and the log warns once, not per batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unreachable_collector_drops_spans_counted_and_warned_once() {
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("data").display().to_string();
    let endpoint = format!("http://127.0.0.1:{}", free_port());
    let log = dir.path().join("node.log");
    let s = common::proc::start_logged(
        &["serve", "--listen", "127.0.0.1:0", "--data-dir", data.as_str()],
        &[
            ("LIKEWISE__TELEMETRY__OTLP_ENDPOINT", endpoint.as_str()),
            ("LIKEWISE__LIMITS__LIKES_PER_MINUTE", "0"),
        ],
        &log,
    );
    let c = Client::new();
    put_post(&c, &s.base, 1, 1_001).await;
    // Batches leave at least once a second: likes over a few seconds make several failed ones.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut user = 10;
    loop {
        like(&c, &s.base, 1, user, None).await;
        user += 1;
        let dropped = metric(&c, &s.base, "likewise_trace_spans_dropped_total").await.unwrap_or(0.0);
        let warned = std::fs::read_to_string(&log).unwrap_or_default();
        if dropped >= 10.0 && user > 40 {
            let warnings = warned.matches("trace export failed").count();
            assert_eq!(warnings, 1, "one warning for the outage, not one per batch:\n{warned}");
            break;
        }
        assert!(Instant::now() < deadline, "no spans counted as dropped ({dropped})");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    common::proc::stop(s);
}
