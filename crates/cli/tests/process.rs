//! Process-level tests of the real binary: SIGTERM then restart, and kill -9 during a storm
//! of likes then restart. Every like that got a 200 must survive, and the count must equal
//! the like rows.

mod common;

use common::SECRET;
use common::proc::{Client, signal, start_with};
use hyper::Method;
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The embedded service on `data_dir`, with a short aggregation window.
fn start(data_dir: &Path) -> common::proc::Server {
    let dir = data_dir.display().to_string();
    start_with(
        &["serve", "--listen", "127.0.0.1:0", "--data-dir", &dir],
        &[("LIKEWISE__AGGREGATOR__WINDOW_MS", "20"), ("LIKEWISE__STORE__CACHE_MB", "16")],
    )
}

/// Run the binary with the test secret and return its stdout (it must succeed).
fn likewise(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_likewise"))
        .args(args)
        .env("LIKEWISE__AUTH__SECRET", SECRET)
        .output()
        .expect("run likewise");
    assert!(out.status.success(), "likewise {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn bearer(c: &Client, base: &str, path: &str, token: &str) -> (u16, Value) {
    use http_body_util::BodyExt;
    let req = hyper::Request::put(format!("{base}{path}"))
        .header("authorization", format!("Bearer {token}"))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .expect("request");
    let resp = c.http.request(req).await.expect("send");
    let st = resp.status().as_u16();
    let b = resp.into_body().collect().await.expect("body").to_bytes();
    (st, serde_json::from_slice(&b).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_then_restart_keeps_every_like_and_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = Client::new();
    let s = start(dir.path());
    let (st, _) =
        c.call(&s.base, Method::PUT, "/v1/posts/5", 1, true, r#"{"author_id":"7"}"#).await.expect("post");
    assert_eq!(st, 200);
    for u in 100..160u64 {
        let (st, v) = c.call(&s.base, Method::PUT, "/v1/posts/5/like", u, false, "").await.expect("like");
        assert_eq!((st, v["changed"].as_bool()), (200, Some(true)));
    }
    signal(&s.child, "-TERM");
    let mut child = s.child;
    let status = child.wait().expect("wait");
    assert!(status.success(), "graceful stop exits 0, got {status}");

    // The offline tools work on the stopped server's data directory.
    let out = likewise(&["reconcile", "--all", "--data-dir", &dir.path().display().to_string()]);
    assert!(out.contains("reconciled 1 posts: 0 drifted"), "{out}");

    let s = start(dir.path());
    c.wait_count(&s.base, 5, 60).await;
    assert_eq!(c.likers(&s.base, 5).await.len(), 60);
    // `likewise token` signs with the same secret the server uses.
    let token = likewise(&["token", "161"]);
    let (st, v) = bearer(&c, &s.base, "/v1/posts/5/like", token.trim()).await;
    assert_eq!((st, v["changed"].as_bool()), (200, Some(true)), "{v}");
    let expired = likewise(&["token", "162", "--ttl", "1s"]);
    tokio::time::sleep(Duration::from_millis(7_000)).await;
    let (st, v) = bearer(&c, &s.base, "/v1/posts/5/like", expired.trim()).await;
    assert_eq!((st, v["error"].as_str()), (401, Some("unauthenticated")), "{v}");
    let (_, v) = c.call(&s.base, Method::PUT, "/v1/posts/5/like", 100, false, "").await.expect("retry");
    assert_eq!(v["changed"], false, "a retry after restart still counts once");
    signal(&s.child, "-TERM");
    let mut child = s.child;
    child.wait().expect("wait");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_a_like_storm_loses_no_acknowledged_like() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = Client::new();
    let mut s = start(dir.path());
    let (st, _) =
        c.call(&s.base, Method::PUT, "/v1/posts/9", 1, true, r#"{"author_id":"7"}"#).await.expect("post");
    assert_eq!(st, 200);
    let acked = Arc::new(Mutex::new(Vec::<u64>::new()));
    let mut tasks = Vec::new();
    for w in 0..32u64 {
        let (c, base, acked) = (c.clone(), s.base.clone(), acked.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..100_000u64 {
                let user = 1_000 + w * 100_000 + i;
                match c.call(&base, Method::PUT, "/v1/posts/9/like", user, false, "").await {
                    Ok((200, _)) => acked.lock().expect("lock").push(user),
                    _ => return,
                }
            }
        }));
    }
    // Let the storm run, then pull the plug mid-flight.
    let t0 = Instant::now();
    while acked.lock().expect("lock").len() < 2_000 && t0.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    s.child.kill().expect("SIGKILL");
    s.child.wait().expect("wait");
    for t in tasks {
        t.await.expect("join");
    }
    let acked: Vec<u64> = acked.lock().expect("lock").clone();
    assert!(acked.len() >= 2_000, "the storm produced too few likes to test anything: {}", acked.len());

    let s = start(dir.path());
    let rows = c.likers(&s.base, 9).await;
    let lost: Vec<&u64> = acked.iter().filter(|u| !rows.contains(u)).collect();
    assert!(lost.is_empty(), "{} acknowledged likes lost, e.g. {:?}", lost.len(), &lost[..lost.len().min(5)]);
    // Rows may include likes whose 200 never arrived (in flight at the kill): the count must
    // equal the rows, not the acknowledgements.
    c.wait_count(&s.base, 9, rows.len() as i64).await;
    signal(&s.child, "-TERM");
    let mut child = s.child;
    child.wait().expect("wait");
}

/// `likewise serve` on `data_dir` that must fail: its stderr.
fn serve_fails(data_dir: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_likewise"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir", data_dir])
        .env("LIKEWISE__AUTH__SECRET", SECRET)
        .output()
        .expect("run likewise");
    assert!(!out.status.success(), "serve on {data_dir} started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A second `serve` on a data directory in use says who holds it, not the library's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_serve_on_the_same_data_dir_names_the_holder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut first = start(dir.path());
    let err = serve_fails(&dir.path().display().to_string());
    let want = format!("another likewise process holds {}", dir.path().display());
    assert!(err.contains(&want), "{err}");
    assert!(!err.contains("FjallError"), "{err}");
    first.child.kill().expect("kill");
    first.child.wait().expect("wait");
}

/// A data directory this process cannot write is named, with the reason. (sysfs refuses new
/// files even to root, so the test holds whoever runs it.)
#[test]
fn an_unwritable_data_dir_is_named_with_the_reason() {
    let dir = "/sys/kernel/likewise-data";
    let err = serve_fails(dir);
    assert!(err.contains(&format!("cannot write {dir}: permission denied")), "{err}");
    assert!(!err.contains("Os {"), "{err}");
}

/// SIGTERM in the middle of a storm of kept-alive connections: every request a client sent is
/// answered (the answers from then on say `connection: close`), none is met by a closed or
/// reset connection; a client that reconnects is refused (nothing sent, so nothing lost).
/// Closing idle kept-alive connections at once lost one request on nearly every connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_storm_answers_every_request_sent_on_a_kept_alive_connection() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = start(dir.path());
    let addr = s.base.trim_start_matches("http://").to_string();
    let (answered, lost, closing) =
        (Arc::new(AtomicU64::new(0)), Arc::new(Mutex::new(Vec::new())), Arc::new(AtomicU64::new(0)));
    let stop = Arc::new(AtomicBool::new(false));
    // One storming connection: requests one after another until an answer says close (then a
    // new connection), or the server refuses a connection.
    let storm = |k: usize| {
        let (addr, answered, lost, closing, stop) =
            (addr.clone(), answered.clone(), lost.clone(), closing.clone(), stop.clone());
        async move {
            while !stop.load(Ordering::Relaxed) {
                let Ok(stream) = tokio::net::TcpStream::connect(&addr).await else { return };
                let mut stream = tokio::io::BufReader::new(stream);
                loop {
                    let sent = stream.get_mut().write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
                    let mut head = String::new();
                    let mut ok = sent.is_ok();
                    while ok {
                        let mut line = String::new();
                        match stream.read_line(&mut line).await {
                            Ok(n) if n > 0 => {}
                            _ => ok = false,
                        }
                        head.push_str(&line);
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let len = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>())
                        })
                        .and_then(Result::ok);
                    let body_read = match len {
                        Some(n) if ok => stream.read_exact(&mut vec![0u8; n]).await.is_ok(),
                        _ => false,
                    };
                    if !(ok && body_read && head.starts_with("HTTP/1.1 ")) {
                        lost.lock().expect("lock").push(format!("connection {k}: {head:?}"));
                        return;
                    }
                    answered.fetch_add(1, Ordering::Relaxed);
                    if head.to_ascii_lowercase().contains("\r\nconnection: close\r\n") {
                        closing.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                }
            }
        }
    };
    let tasks: Vec<_> = (0..200).map(|k| tokio::spawn(storm(k))).collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = answered.load(Ordering::Relaxed);
    signal(&s.child, "-TERM");
    let status = tokio::task::spawn_blocking(move || s.child.wait()).await.expect("join").expect("wait");
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(10), t)
            .await
            .expect("a storming connection hung")
            .expect("task");
    }
    assert!(status.success(), "{status:?}");
    assert!(before > 200, "the storm barely ran: {before} answers");
    let lost = lost.lock().expect("lock");
    assert!(lost.is_empty(), "{} requests sent got no answer: {:?}", lost.len(), &lost[..lost.len().min(5)]);
    assert!(closing.load(Ordering::Relaxed) > 0, "no answer said connection: close");
}

/// SIGTERM while one client trickles a request head and another has not read a large answer
/// yet: the process exits without waiting out the trickler's header-read timeout (10 s; its
/// request was never received), and the unread answer still arrives whole (a request counts
/// as in flight until its answer is written; how much of it the kernel's buffers had taken by
/// the SIGTERM is up to the kernel).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_waits_for_answers_being_written_not_for_a_request_head_being_trickled() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = start(dir.path());
    let addr = s.base.trim_start_matches("http://").to_string();
    // The whole answer, read by a client with nothing pending.
    let read_all = |mut stream: tokio::net::TcpStream| async move {
        let mut all = Vec::new();
        stream.read_to_end(&mut all).await.expect("read");
        all
    };
    let mut first = tokio::net::TcpStream::connect(&addr).await.expect("connect");
    first
        .write_all(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .expect("send");
    let whole = read_all(first).await;
    assert!(whole.len() > 100_000, "the document is large: {} bytes", whole.len());
    // A trickler: half a head, then a byte a second.
    let trickler = tokio::net::TcpStream::connect(&addr).await.expect("connect");
    let trickle = tokio::spawn(async move {
        let mut t = trickler;
        let _ = t.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await;
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if t.write_all(b"X").await.is_err() {
                break;
            }
        }
    });
    // A reader that sends its request and reads the answer only later.
    // Its small receive window keeps most of the answer in the server's hands until it reads.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4_096).expect("recv buffer");
    let mut late = socket.connect(addr.parse().expect("addr")).await.expect("connect");
    late.write_all(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n").await.expect("send");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t0 = Instant::now();
    signal(&s.child, "-TERM");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got = read_all(late).await;
    let status = tokio::task::spawn_blocking(move || s.child.wait()).await.expect("join").expect("wait");
    let took = t0.elapsed();
    trickle.abort();
    assert!(status.success(), "{status:?}");
    // The same document: the head differs only in its connection header.
    let body = |r: &[u8]| r.windows(4).position(|w| w == b"\r\n\r\n").map(|i| r[i + 4..].to_vec());
    assert_eq!(body(&got), body(&whole), "the answer being written at the SIGTERM came whole");
    assert!(took < Duration::from_secs(5), "exit waited {took:?} for a trickled request head");
}
