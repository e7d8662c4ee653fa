//! The embedded store's journal, damaged between two runs of the real binary: a
//! store holding 2,000 likes and 100 comments either starts with every acknowledged write or
//! refuses to start, naming the journal file and the offset and the repair command; never
//! starts healthy with writes gone.
//!
//! - After a crash (SIGKILL), 8 bytes overwritten at offsets across `store/0.jnl` (30 KB
//!   among them), and the journal truncated: refused. `likewise store repair` says what it
//!   would drop and changes nothing; with `--yes` it drops it and the store starts.
//! - After a clean stop (SIGTERM), the journal deleted or damaged: the store starts with
//!   every like and comment (a clean stop leaves everything in the tables).
//!
//! Embedded engine only: the scaled-out engines keep no journal of ours.

mod common;

use common::SECRET;
use common::proc::{Client, Server, signal, start_with, stop};
use hyper::Method;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

const POST: u64 = 1;
const AUTHOR: u64 = 7;
const LIKES: u64 = 2_000;
const COMMENTS: usize = 100;

fn serve(dir: &Path) -> Server {
    let dir = dir.display().to_string();
    start_with(&["serve", "--listen", "127.0.0.1:0", "--data-dir", &dir], &[])
}

/// Start `likewise serve` on `dir`: the server once it listens, or everything it logged
/// when it exits first.
fn try_serve(dir: &Path) -> Result<Server, String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_likewise"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir", &dir.display().to_string()])
        .env("LIKEWISE__AUTH__SECRET", SECRET)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut log = String::new();
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(i) = line.find("addr=")
                && let Some(tx) = tx.take()
            {
                let addr = line[i + 5..].split_whitespace().next().unwrap_or_default().to_string();
                let _ = tx.send(Ok(format!("http://{addr}")));
            }
            log.push_str(&line);
            log.push('\n');
        }
        if let Some(tx) = tx {
            let _ = tx.send(Err(log));
        }
    });
    match rx.recv_timeout(Duration::from_secs(60)).expect("serve neither listened nor exited") {
        Ok(base) => Ok(Server { child, base }),
        Err(log) => {
            let status = child.wait().expect("wait");
            assert!(!status.success(), "a refused start exits non-zero");
            Err(log)
        }
    }
}

fn likewise(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_likewise")).args(args).output().expect("run likewise");
    (
        out.status.success(),
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
    )
}

/// 2,000 likes and 100 comments on one post, every one acknowledged.
async fn fill(c: &Arc<Client>, base: &str) {
    common::proc::put_post(c, base, POST, AUTHOR).await;
    let mut tasks = Vec::new();
    for t in 0..8u64 {
        let (c, base) = (c.clone(), base.to_string());
        tasks.push(tokio::spawn(async move {
            for user in (1..=LIKES).filter(|u| u % 8 == t) {
                let (st, v) = c
                    .call(&base, Method::PUT, &format!("/v1/posts/{POST}/like"), 1000 + user, false, "")
                    .await
                    .expect("like");
                assert_eq!(st, 200, "{v}");
            }
        }));
    }
    for t in tasks {
        t.await.expect("likes");
    }
    for i in 0..COMMENTS {
        let body = format!(r#"{{"text":"comment number {i}"}}"#);
        let (st, v) = c
            .call(base, Method::POST, &format!("/v1/posts/{POST}/comments"), 5000 + i as u64, false, &body)
            .await
            .expect("comment");
        assert_eq!(st, 201, "{v}");
    }
}

/// Every like and comment is there.
async fn assert_whole(c: &Client, base: &str, what: &str) {
    let likers = c.likers(base, POST).await;
    assert_eq!(likers.len() as u64, LIKES, "{what}: likes lost");
    let mut comments = 0;
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/v1/posts/{POST}/comments?order=newest&limit=100");
        if let Some(cur) = &cursor {
            path.push_str(&format!("&cursor={cur}"));
        }
        let (st, v) = c.call(base, Method::GET, &path, 1, true, "").await.expect("comments");
        assert_eq!(st, 200, "{v}");
        comments += v["items"].as_array().expect("items").len();
        match v["next_cursor"].as_str() {
            Some(cur) => cursor = Some(cur.to_string()),
            None => break,
        }
    }
    assert_eq!(comments, COMMENTS, "{what}: comments lost");
}

fn copy(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().expect("tempdir");
    let ok = Command::new("cp").arg("-a").arg(format!("{}/.", from.display())).arg(to.path()).status();
    assert!(ok.expect("cp").success());
    to
}

fn journals(data: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(data.join("store"))
        .expect("store dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "jnl"))
        .collect();
    out.sort();
    out
}

/// Where the journal's data ends (fjall preallocates it with zeros).
fn data_end(path: &Path) -> u64 {
    let bytes = std::fs::read(path).expect("read");
    bytes.iter().rposition(|b| *b != 0).map_or(0, |i| i as u64 + 1)
}

fn overwrite(path: &Path, at: u64) {
    let f = std::fs::File::options().read(true).write(true).open(path).expect("open");
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, at).expect("read");
    f.write_all_at(&b.map(|x| x ^ 0x5a), at).expect("write");
}

fn assert_refused(log: &str, file: &str, what: &str) {
    assert!(
        log.contains(file) && log.contains("offset"),
        "{what}: the refusal names no file and offset:\n{log}"
    );
    assert!(log.contains("likewise store repair --data-dir"), "{what}: no repair command:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_crash_a_damaged_journal_refuses_to_start_and_repair_drops_only_when_confirmed() {
    if common::scaled_out() {
        return;
    }
    let c = Client::new();
    let template = tempfile::tempdir().expect("tempdir");
    let s = serve(template.path());
    fill(&c, &s.base).await;
    signal(&s.child, "-KILL");
    let mut child = s.child;
    child.wait().expect("wait");
    let jnl = journals(template.path());
    assert_eq!(jnl.len(), 1, "{jnl:?}");
    let end = data_end(&jnl[0]);
    assert!(end > 60_000, "the journal holds {end} bytes");
    let name = jnl[0].file_name().expect("name").to_string_lossy().to_string();
    // Damage anywhere in the acknowledged writes: refused, never started with writes gone.
    for at in [0, 4_096, 30_720, end / 3, end / 2, end * 3 / 4, end - 200] {
        let dir = copy(template.path());
        overwrite(&journals(dir.path())[0], at);
        match try_serve(dir.path()) {
            Ok(s) => {
                assert_whole(&c, &s.base, &format!("8 bytes at {at}")).await;
                stop(s);
            }
            Err(log) => assert_refused(&log, &name, &format!("8 bytes at {at}")),
        }
    }
    // Truncated, or deleted, while the keyspaces remain.
    for len in [0, 30_720, end / 2, end - 100] {
        let dir = copy(template.path());
        std::fs::File::options()
            .write(true)
            .open(&journals(dir.path())[0])
            .expect("open")
            .set_len(len)
            .expect("cut");
        match try_serve(dir.path()) {
            // The last bytes may hold only unacknowledged consumer writes.
            Ok(s) if len > end / 2 => {
                assert_whole(&c, &s.base, &format!("cut to {len}")).await;
                stop(s);
            }
            Ok(_) => panic!("cut to {len} of {end}: started"),
            Err(log) => assert_refused(&log, &name, &format!("cut to {len}")),
        }
    }
    let dir = copy(template.path());
    std::fs::remove_file(&journals(dir.path())[0]).expect("rm");
    let log = try_serve(dir.path()).err().expect("a deleted journal starts");
    assert!(log.contains("journal is missing") && log.contains("likewise store repair"), "{log}");

    // The issue's case, 8 bytes at 30 KB: the repair command says what it drops, and drops
    // it only when confirmed.
    let dir = copy(template.path());
    let data = dir.path().display().to_string();
    overwrite(&journals(dir.path())[0], 30_720);
    let log = try_serve(dir.path()).err().expect("refused");
    assert_refused(&log, &name, "8 bytes at 30 KB");
    let (ok, out) = likewise(&["store", "repair", "--data-dir", &data]);
    assert!(ok, "{out}");
    assert!(out.contains(&name) && out.contains("offset") && out.contains("--yes"), "{out}");
    assert!(try_serve(dir.path()).is_err(), "a dry run changes nothing");
    let (ok, out) = likewise(&["store", "repair", "--yes", "--data-dir", &data]);
    assert!(ok && out.contains("Dropped"), "{out}");
    let s = try_serve(dir.path()).expect("starts after the repair");
    let (st, _) = c.call(&s.base, Method::GET, "/healthz", 1, false, "").await.expect("healthz");
    assert_eq!(st, 200);
    stop(s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_clean_stop_a_lost_or_damaged_journal_loses_nothing() {
    if common::scaled_out() {
        return;
    }
    let c = Client::new();
    let template = tempfile::tempdir().expect("tempdir");
    let s = serve(template.path());
    fill(&c, &s.base).await;
    stop(s);
    let end = data_end(&journals(template.path())[0]);
    let deleted = copy(template.path());
    for j in journals(deleted.path()) {
        std::fs::remove_file(j).expect("rm");
    }
    let damaged = copy(template.path());
    overwrite(&journals(damaged.path())[0], 30_720.min(end / 2));
    let truncated = copy(template.path());
    std::fs::File::options()
        .write(true)
        .open(&journals(truncated.path())[0])
        .expect("open")
        .set_len(0)
        .expect("cut");
    for (dir, what) in [(&deleted, "deleted"), (&damaged, "damaged"), (&truncated, "truncated")] {
        let s = try_serve(dir.path())
            .unwrap_or_else(|log| panic!("journal {what} after a clean stop: refused:\n{log}"));
        assert_whole(&c, &s.base, &format!("journal {what} after a clean stop")).await;
        stop(s);
    }
}
