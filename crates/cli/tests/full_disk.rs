//! A full disk under `likewise serve` on the embedded store: the store's file system (a small
//! tmpfs) is filled by the service's own likes and comments until writes are refused. While
//! it is full, every write answers 503 `unavailable` with `Retry-After` (never a 500), reads
//! go on and `/healthz` says the storage is down. Once space is freed, writes are taken again
//! without a restart, `/healthz` is 200, SIGTERM exits 0, and every acknowledged like and
//! comment is there after a restart.
//!
//! Mounting needs root (CI runs as root); without it the test fails, it is never skipped.

mod common;

use bytes::Bytes;
use common::proc::{self, Client, Server};
use http_body_util::{BodyExt, Full};
use hyper::Method;
use likewise_core::ids::UserId;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The tmpfs: small, so a few thousand writes fill it.
const TMPFS_MB: u64 = 32;
/// `store.min_free_mb` of the service under test.
const RESERVE_MB: u64 = 8;
/// Free space left above the reserve once the filler is in place: what the writes fill.
const HEADROOM: u64 = 1 << 20;
const POST: u64 = 1;
const AUTHOR: u64 = 7;

/// A tmpfs mounted on a fresh directory, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(mb: u64) -> Tmpfs {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mb}m"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "this test mounts a {mb} MB tmpfs and must run as root: `mount -t tmpfs` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Bytes free for an unprivileged writer (`stat -f`).
    fn free(&self) -> u64 {
        let out =
            Command::new("stat").args(["-f", "-c", "%a %S"]).arg(self.path()).output().expect("run stat");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut it = text.split_whitespace().map(|n| n.parse::<u64>().expect("stat's numbers"));
        it.next().expect("free blocks") * it.next().expect("block size")
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

/// Fill the file system with `filler` until `keep` bytes are free.
fn fill_until(fs: &Tmpfs, filler: &Path, keep: u64) {
    let take = fs.free().checked_sub(keep).expect("the tmpfs has less free space than the test needs");
    std::fs::write(filler, vec![0xA5u8; take as usize]).expect("write the filler file");
    let left = fs.free();
    assert!(
        left >= keep.saturating_sub(1 << 16) && left <= keep + (1 << 16),
        "{left} bytes free, wanted {keep}"
    );
}

/// An answer: status, `Retry-After`, JSON body.
type Answer = (u16, Option<String>, serde_json::Value);

async fn request(c: &Client, base: &str, m: Method, path: &str, user: u64, body: &str) -> Answer {
    let token = c.keys.mint(UserId(user), false, Duration::from_secs(600)).expect("token");
    let req = hyper::Request::builder()
        .method(m)
        .uri(format!("{base}{path}"))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("request");
    let resp = c.http.request(req).await.expect("the service answers");
    let status = resp.status().as_u16();
    let retry = resp.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_string);
    let b = resp.into_body().collect().await.expect("body").to_bytes();
    (status, retry, serde_json::from_slice(&b).unwrap_or(serde_json::Value::Null))
}

/// A like (even `n`) or a comment (odd `n`) by user `1000 + n`.
async fn write(c: &Client, base: &str, n: u64) -> Answer {
    let user = 1000 + n;
    if n.is_multiple_of(2) {
        request(c, base, Method::PUT, &format!("/v1/posts/{POST}/like"), user, "").await
    } else {
        // Different text every time (the store compresses), 300 characters.
        let mut x = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let text: String = (0..300)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (b'a' + (x % 26) as u8) as char
            })
            .collect();
        let body = serde_json::json!({ "text": text }).to_string();
        request(c, base, Method::POST, &format!("/v1/posts/{POST}/comments"), user, &body).await
    }
}

/// A write refused for want of space: 503 `unavailable` with `Retry-After`.
fn assert_refused((status, retry, body): &Answer) {
    assert_eq!(*status, 503, "{body}");
    assert_eq!(body["error"], "unavailable", "{body}");
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    let secs: u64 = retry.as_deref().and_then(|r| r.parse().ok()).expect("a Retry-After in seconds");
    assert!(secs >= 1, "Retry-After {secs}");
}

/// What the service acknowledged: the likers and the comment IDs.
#[derive(Default)]
struct Acked {
    likers: HashSet<u64>,
    comments: HashSet<String>,
}

fn record(acked: &Mutex<Acked>, n: u64, (status, _, body): &Answer) {
    let mut a = acked.lock().expect("lock");
    match *status {
        200 => {
            assert_eq!(body["liked"], true, "{body}");
            a.likers.insert(1000 + n);
        }
        201 => {
            a.comments.insert(body["comment_id"].as_str().expect("comment_id").to_string());
        }
        _ => {}
    }
}

fn serve(data: &Path) -> Server {
    let dir = data.display().to_string();
    proc::start_with(
        &["serve", "--listen", "127.0.0.1:0", "--data-dir", &dir],
        &[("LIKEWISE__STORE__MIN_FREE_MB", &RESERVE_MB.to_string())],
    )
}

async fn health(c: &Client, base: &str) -> Answer {
    request(c, base, Method::GET, "/healthz", 1, "").await
}

/// Every comment ID on the post, through the paged list.
async fn comment_ids(c: &Client, base: &str) -> HashSet<String> {
    let mut out = HashSet::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/v1/posts/{POST}/comments?order=oldest&limit=100");
        if let Some(cur) = &cursor {
            path.push_str(&format!("&cursor={cur}"));
        }
        let (st, _, v) = request(c, base, Method::GET, &path, AUTHOR, "").await;
        assert_eq!(st, 200, "{v}");
        for item in v["items"].as_array().expect("items") {
            out.insert(item["comment_id"].as_str().expect("comment_id").to_string());
        }
        match v["next_cursor"].as_str() {
            Some(cur) => cursor = Some(cur.to_string()),
            None => return out,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_disk_refuses_writes_with_503_and_they_resume_once_space_is_freed() {
    let fs = Tmpfs::mount(TMPFS_MB);
    let data: PathBuf = fs.path().join("data");
    let filler = fs.path().join("filler");
    let c = Client::new();
    let server = serve(&data);
    let base = server.base.clone();
    proc::put_post(&c, &base, POST, AUTHOR).await;
    fill_until(&fs, &filler, (RESERVE_MB << 20) + HEADROOM);

    // Writers until the disk is full: every answer is a success or the refusal, never a 500.
    let acked = Arc::new(Mutex::new(Acked::default()));
    let full = Arc::new(AtomicBool::new(false));
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(60);
    let writers: Vec<_> = (0..16)
        .map(|_| {
            let (c, base, acked, full, next) =
                (c.clone(), base.clone(), acked.clone(), full.clone(), next.clone());
            tokio::spawn(async move {
                while !full.load(Ordering::SeqCst) && Instant::now() < until {
                    let n = next.fetch_add(1, Ordering::SeqCst);
                    let answer = write(&c, &base, n).await;
                    match answer.0 {
                        200 | 201 => record(&acked, n, &answer),
                        _ => {
                            assert_refused(&answer);
                            full.store(true, Ordering::SeqCst);
                        }
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.await.expect("a writer failed");
    }
    assert!(full.load(Ordering::SeqCst), "the disk never filled up");
    let written = next.load(Ordering::SeqCst);

    // While it is full: writes refused, reads served, the storage reported down.
    for n in written..written + 4 {
        assert_refused(&write(&c, &base, n).await);
    }
    let (st, _, v) = request(&c, &base, Method::GET, &format!("/v1/posts/{POST}"), AUTHOR, "").await;
    assert_eq!(st, 200, "reads go on while the disk is full: {v}");
    let down_by = Instant::now() + Duration::from_secs(3);
    loop {
        let (st, _, v) = health(&c, &base).await;
        if (st, &v["checks"]["storage"]) == (503, &serde_json::json!("down")) {
            break;
        }
        assert!(Instant::now() < down_by, "/healthz while the disk is full: {st} {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Space is freed: writes are taken again, without a restart.
    std::fs::remove_file(&filler).expect("remove the filler");
    let mut n = written + 4;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let answer = write(&c, &base, n).await;
        if matches!(answer.0, 200 | 201) {
            record(&acked, n, &answer);
            break;
        }
        assert_refused(&answer);
        assert!(Instant::now() < deadline, "writes still refused 15 s after space was freed");
        tokio::time::sleep(Duration::from_millis(100)).await;
        n += 1;
    }
    for k in n + 1..n + 20 {
        let answer = write(&c, &base, k).await;
        assert!(matches!(answer.0, 200 | 201), "a write after recovery: {answer:?}");
        record(&acked, k, &answer);
    }
    // /healthz reuses its engine checks for one second (docs/api.md): it turns within that.
    let healthy_by = Instant::now() + Duration::from_secs(3);
    loop {
        let (st, _, v) = health(&c, &base).await;
        if st == 200 {
            break;
        }
        assert!(Instant::now() < healthy_by, "/healthz once writes work again: {st} {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    proc::stop(server);

    // Nothing acknowledged was lost.
    let server = serve(&data);
    let base = server.base.clone();
    let acked = std::mem::take(&mut *acked.lock().expect("lock"));
    assert!(!acked.likers.is_empty() && !acked.comments.is_empty());
    let likers = c.likers(&base, POST).await;
    let lost: Vec<_> = acked.likers.difference(&likers).collect();
    assert!(lost.is_empty(), "{} acknowledged likes lost, e.g. {:?}", lost.len(), lost.first());
    let comments = comment_ids(&c, &base).await;
    let lost: Vec<_> = acked.comments.difference(&comments).collect();
    assert!(lost.is_empty(), "{} acknowledged comments lost, e.g. {:?}", lost.len(), lost.first());
    proc::stop(server);
}
