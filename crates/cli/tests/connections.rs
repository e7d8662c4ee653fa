//! A burst of new connections past the connection cap, against the real binary: every
//! connection gets an HTTP answer (served, or 503 `unavailable` with `Retry-After`), none is
//! left in the kernel's queue to be dropped or reset without one. And at the cap, operators'
//! `/healthz` and `/metrics` are still served.

mod common;

use common::allow_open_files;
use common::proc::{start_with, stop};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Connections opened at once.
const CLIENTS: usize = 2_000;
/// The node's connection cap, far below them.
const CAP: usize = 16;

/// One answer: its status line and head, and its body.
struct Answer {
    head: String,
    body: String,
}

/// Send `GET path` on `s` (keep-alive, as a browser or pooled client does) and read one
/// answer (up to its `content-length`); `None` when the connection ends without one.
async fn ask(s: &mut TcpStream, path: &str) -> Option<Answer> {
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body = String::from_utf8_lossy(&buf[head_end..head_end + len]).to_string();
    Some(Answer { head, body })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_connections_past_the_cap_is_answered_every_one() {
    allow_open_files(CLIENTS as u64);
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().display().to_string();
    let cap = CAP.to_string();
    // Served clients keep their connection (keep-alive) and hold their slot for the whole
    // test: the node stays at its cap while the others arrive.
    let server = start_with(
        &["serve", "--listen", "127.0.0.1:0", "--data-dir", &data],
        &[("LIKEWISE__SERVER__MAX_CONNECTIONS", &cap), ("LIKEWISE__SERVER__HEADER_READ_TIMEOUT_MS", "60000")],
    );
    let addr = server.base.trim_start_matches("http://").to_string();
    // All connect at once; each sends its request as soon as it is connected.
    let asks: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let addr = addr.clone();
            tokio::spawn(async move {
                // The bound only ends a test that would otherwise wait forever.
                tokio::time::timeout(Duration::from_secs(30), async {
                    let mut s = TcpStream::connect(&addr).await.ok()?;
                    let answer = ask(&mut s, "/openapi.json").await?;
                    Some((answer, s))
                })
                .await
                .ok()
                .flatten()
            })
        })
        .collect();
    let (mut served, mut refused, mut unanswered) = (0, 0, 0);
    let mut held = Vec::new();
    for a in asks {
        match a.await.expect("join") {
            None => unanswered += 1,
            Some((Answer { head, body }, s)) if head.starts_with("http/1.1 200") => {
                served += 1;
                held.push(s);
                serde_json::from_str::<serde_json::Value>(&body).expect("the OpenAPI JSON");
            }
            Some((Answer { head, body }, _)) => {
                refused += 1;
                assert!(head.starts_with("http/1.1 503"), "{head}{body}");
                assert!(head.contains("\r\nretry-after: "), "{head}");
                assert!(head.contains("\r\ncontent-type: application/json"), "{head}");
                let v: serde_json::Value = serde_json::from_str(&body).expect("a JSON error body");
                assert_eq!(v["error"], "unavailable", "{body}");
            }
        }
    }
    println!("served {served}, refused {refused}, unanswered {unanswered}");
    assert_eq!(
        unanswered, 0,
        "connections closed or left without an answer (served {served}, refused {refused})"
    );
    assert!((1..=CAP).contains(&served), "served {served} at a cap of {CAP}");
    drop(held);
    stop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_health_and_metrics_are_still_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().display().to_string();
    let server = start_with(
        &["serve", "--listen", "127.0.0.1:0", "--data-dir", &data],
        &[("LIKEWISE__SERVER__MAX_CONNECTIONS", "4"), ("LIKEWISE__SERVER__HEADER_READ_TIMEOUT_MS", "60000")],
    );
    let addr = server.base.trim_start_matches("http://").to_string();
    // Four keep-alive clients hold every slot.
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(&addr).await.expect("connect");
        let a = ask(&mut s, "/healthz").await.expect("an answer");
        assert!(a.head.starts_with("http/1.1 200"), "{}", a.head);
        held.push(s);
    }
    let past = |path: &'static str| {
        let addr = addr.clone();
        async move {
            let mut s = TcpStream::connect(&addr).await.expect("connect");
            tokio::time::timeout(Duration::from_secs(10), ask(&mut s, path))
                .await
                .expect("in time")
                .expect("an answer")
        }
    };
    // An API request past the cap is refused...
    let api = past("/openapi.json").await;
    assert!(api.head.starts_with("http/1.1 503"), "{}{}", api.head, api.body);
    assert!(api.head.contains("\r\nretry-after: "), "{}", api.head);
    // ... a probe and a scrape are served, and the scrape counts the refusal.
    let health = past("/healthz").await;
    assert!(health.head.starts_with("http/1.1 200"), "{}{}", health.head, health.body);
    let metrics = past("/metrics").await;
    assert!(metrics.head.starts_with("http/1.1 200"), "{}", metrics.head);
    let refused = metrics
        .body
        .lines()
        .find_map(|l| l.strip_prefix("likewise_http_connections_refused_total "))
        .unwrap_or_else(|| panic!("no refusal counter in {}", metrics.body));
    assert_eq!(refused.trim(), "1", "one refusal so far");
    // Served past the cap, they did not take a slot: the next API request is refused too.
    let again = past("/openapi.json").await;
    assert!(again.head.starts_with("http/1.1 503"), "{}", again.head);
    // A flood of scrapes past the cap: a few are served at once, the rest refused at once;
    // every one is answered, and an API request among them is still refused.
    let flood: Vec<_> = (0..64).map(|_| tokio::spawn(past("/metrics"))).collect();
    let api = past("/openapi.json").await;
    assert!(api.head.starts_with("http/1.1 503"), "{}", api.head);
    let (mut served, mut refused) = (0, 0);
    for f in flood {
        let a = f.await.expect("join");
        if a.head.starts_with("http/1.1 200") {
            served += 1;
        } else {
            assert!(a.head.starts_with("http/1.1 503") && a.head.contains("\r\nretry-after: "), "{}", a.head);
            refused += 1;
        }
    }
    println!("scrapes past the cap: {served} served, {refused} refused");
    assert!(served >= 1, "no scrape served");
    drop(held);
    stop(server);
}
