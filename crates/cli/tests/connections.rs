//! A burst of new connections past the connection cap, against the real binary: every
//! connection gets an HTTP answer (served, or 503 `unavailable` with `Retry-After`), none is
//! left in the kernel's queue to be dropped or reset without one.

mod common;

use common::proc::{start_with, stop};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Connections opened at once.
const CLIENTS: usize = 2_000;
/// The node's connection cap, far below them.
const CAP: usize = 16;

/// Raise this process's open-file limit to fit `n` more sockets (up to the hard limit).
fn allow_open_files(n: u64) {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut lim = getrlimit(Resource::Nofile);
    let want = n + 256;
    if lim.current.is_some_and(|c| c < want) {
        lim.current = Some(lim.maximum.map_or(want, |m| m.min(want)));
        setrlimit(Resource::Nofile, lim).expect("raise RLIMIT_NOFILE");
    }
    let now = getrlimit(Resource::Nofile).current;
    assert!(now.is_none_or(|c| c >= want), "the open-file limit {now:?} is too low for {n} sockets");
}

/// One answer: its status line and head, and its body.
struct Answer {
    head: String,
    body: String,
}

/// Send `GET /healthz` on `s` (keep-alive, as a browser or pooled client does) and read one
/// answer (up to its `content-length`); `None` when the connection ends without one.
async fn ask(s: &mut TcpStream) -> Option<Answer> {
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.ok()?;
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
                    let answer = ask(&mut s).await?;
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
                serde_json::from_str::<serde_json::Value>(&body).expect("the health JSON");
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
