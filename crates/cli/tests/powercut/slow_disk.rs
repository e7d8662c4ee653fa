//! A slow disk: every fsync of the power-cut filesystem takes 50 ms longer. The group commit
//! must then gather more likes per fsync, and reads, which never wait for an fsync, must keep
//! answering. Latencies are printed, not asserted (they depend on the machine).

use crate::common::proc::Client;
use crate::powercut_fs::PowercutFs;
use crate::powercut_fs::model::State;
use crate::workload::{AUTHOR, POSTS};
use hyper::Method;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Concurrent likers.
const LIKERS: u64 = 32;
/// How long each phase lasts.
const PHASE: Duration = Duration::from_secs(5);

/// What one phase measured.
struct Phase {
    likes: Vec<Duration>,
    reads: Vec<Duration>,
    /// Group-commit batches and the operations in them (`/metrics`).
    batches: f64,
    ops: f64,
}

/// p50 / p99 / max in milliseconds.
fn pct(xs: &mut [Duration]) -> String {
    xs.sort();
    if xs.is_empty() {
        return "n/a".into();
    }
    let at = |q: f64| xs[((xs.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e3;
    format!("p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (n = {})", at(0.5), at(0.99), at(1.0), xs.len())
}

/// A metric's value in a Prometheus text page.
fn metric(page: &str, name: &str) -> f64 {
    page.lines()
        .find_map(|l| {
            l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')).and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0.0)
}

async fn metrics_page(c: &Client, base: &str) -> String {
    use http_body_util::BodyExt;
    let req = hyper::Request::get(format!("{base}/metrics"))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .expect("request");
    let resp = c.http.request(req).await.expect("metrics");
    assert_eq!(resp.status(), 200);
    String::from_utf8_lossy(&resp.into_body().collect().await.expect("body").to_bytes()).into_owned()
}

async fn phase(c: &Arc<Client>, fsync_delay: Duration) -> Phase {
    let mnt = tempfile::tempdir().expect("tempdir");
    let fs = PowercutFs::mount(State::new(), mnt.path(), fsync_delay);
    let s = crate::start(&mnt.path().join("data"), &format!("slow disk, fsync +{fsync_delay:?}"));
    for p in POSTS {
        let body = format!(r#"{{"author_id":"{AUTHOR}"}}"#);
        let (st, v) =
            c.call(&s.base, Method::PUT, &format!("/v1/posts/{p}"), 1, true, &body).await.expect("post");
        assert_eq!(st, 200, "{v}");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let next_user = Arc::new(AtomicU64::new(100_000));
    let likers: Vec<_> = (0..LIKERS)
        .map(|t| {
            let (c, base, stop, next_user) = (c.clone(), s.base.clone(), stop.clone(), next_user.clone());
            tokio::spawn(async move {
                let mut took = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let user = next_user.fetch_add(1, Ordering::Relaxed);
                    let post = POSTS[(t as usize) % POSTS.len()];
                    let began = Instant::now();
                    let (st, v) = c
                        .call(&base, Method::PUT, &format!("/v1/posts/{post}/like"), user, false, "")
                        .await
                        .expect("like");
                    assert_eq!(st, 200, "{v}");
                    took.push(began.elapsed());
                }
                took
            })
        })
        .collect();
    let reader = {
        let (c, base, stop) = (c.clone(), s.base.clone(), stop.clone());
        tokio::spawn(async move {
            let mut took = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let began = Instant::now();
                let (st, v) = c.call(&base, Method::GET, "/v1/posts/1", 3, false, "").await.expect("read");
                assert_eq!(st, 200, "{v}");
                took.push(began.elapsed());
            }
            took
        })
    };
    tokio::time::sleep(PHASE).await;
    stop.store(true, Ordering::Relaxed);
    let mut likes = Vec::new();
    for l in likers {
        likes.extend(l.await.expect("liker"));
    }
    let reads = reader.await.expect("reader");
    let page = metrics_page(c, &s.base).await;
    let batches = metric(&page, "likewise_group_commit_batch_size_count");
    let ops = metric(&page, "likewise_group_commit_batch_size_sum");
    s.stop();
    drop(fs);
    Phase { likes, reads, batches, ops }
}

pub async fn slow_disk() {
    let c = Client::new();
    let mut fast = phase(&c, Duration::ZERO).await;
    let mut slow = phase(&c, Duration::from_millis(50)).await;
    for (name, p) in [("fsync as is", &mut fast), ("fsync +50 ms", &mut slow)] {
        eprintln!(
            "slow disk, {name}: {} likes by {LIKERS} clients in {PHASE:?}; likes {}; reads {}; {} batches, \
             {:.1} operations per batch",
            p.likes.len(),
            pct(&mut p.likes),
            pct(&mut p.reads),
            p.batches,
            p.ops / p.batches.max(1.0)
        );
    }
    assert!(slow.batches > 0.0 && fast.batches > 0.0, "the group commit reported no batches");
    // Behaviour, not timing: a slower fsync gathers more likes into each batch.
    assert!(
        slow.ops / slow.batches > fast.ops / fast.batches,
        "batches did not grow with a slow fsync: {:.1} vs {:.1} per batch",
        slow.ops / slow.batches,
        fast.ops / fast.batches
    );
}
