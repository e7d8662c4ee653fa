//! Power cuts: the embedded store on a filesystem that forgets what was never
//! fsynced.
//!
//! `likewise serve` runs with its data directory on the power-cut filesystem
//! (`common/powercut_fs`) under a storm of likes, unlikes, re-likes and comments, with a
//! ballast writer pushing fjall's journal past its 64 MB rotation point and the 1 MiB
//! memtables through frequent flushes. At a random moment the process is SIGKILLed and the
//! power is cut: the unsynced layer is dropped whole, kept as a random prefix, kept with its
//! last write torn, or kept as a random per-file subset (the variants take turns). The image
//! is mounted again and the binary restarted on it. After every cut (`workload::verify`):
//! the store opens; every acknowledged like, unlike and comment is there; an unanswered like
//! is in the likers list exactly when the user's own view says so, and an unanswered comment
//! is there with its exact text or not at all; counts converge to the rows.
//!
//! `LIKEWISE_POWERCUT_CUTS` (default 12, 3 of each variant; docs/reliability.md has the
//! 1,000-cut run) sets the number of cuts and `LIKEWISE_POWERCUT_SEED`
//! the seed (printed at the start and in every failure). The seed fixes each cycle's choices
//! (storm length, crash or cut, the variant and its draws, each client's operations); what the
//! storm had written when the kill came depends on thread timing, as on a real machine.
//!
//! `a_slow_disk_batches_likes_and_keeps_reads_fast` makes every fsync take 50 ms and prints
//! the like latency, the read latency and the group commit's batch sizes (no timed assert).

mod common;
#[path = "common/powercut_fs/mod.rs"]
mod powercut_fs;
#[path = "powercut/slow_disk.rs"]
mod slow_disk;
#[path = "powercut/workload.rs"]
mod workload;

use common::proc::Client;
use hyper::Method;
use powercut_fs::PowercutFs;
use powercut_fs::model::{Cut, State};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use workload::{AUTHOR, POSTS, Task};

/// The tests want the 2 cores to themselves: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial<F: std::future::Future<Output = ()>>(body: F) {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(body);
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

/// A running server, SIGKILLed if the test panics with it still running; its log lines are
/// kept so a start-up failure shows the store's error.
struct Proc {
    child: Child,
    base: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Proc {
    fn log(&self) -> String {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).join("\n")
    }

    /// SIGTERM: a graceful stop must exit 0.
    fn stop(mut self) {
        common::proc::signal(&self.child, "-TERM");
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "graceful stop exits 0, got {status}");
    }

    /// SIGKILL, and wait until the process is gone.
    fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("wait");
    }
}

/// `likewise serve` on `data_dir` with small memtables (frequent flushes) and no like limit.
fn start(data_dir: &Path, ctx: &str) -> Proc {
    let mut child = Command::new(env!("CARGO_BIN_EXE_likewise"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir", &data_dir.display().to_string()])
        .env("LIKEWISE__AUTH__SECRET", common::SECRET)
        .env("LIKEWISE__AGGREGATOR__WINDOW_MS", "20")
        .env("LIKEWISE__STORE__CACHE_MB", "16")
        .env("LIKEWISE__STORE__MEMTABLE_MB", "1")
        .env("LIKEWISE__STORE__WRITE_BUFFER_MB", "1")
        .env("LIKEWISE__STORE__MAX_JOURNAL_MB", "64")
        .env("LIKEWISE__LIMITS__LIKES_PER_MINUTE", "0")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn likewise serve");
    let stderr = child.stderr.take().expect("stderr");
    let log = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let keep = log.clone();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(i) = line.find("addr=")
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(line[i + 5..].split_whitespace().next().unwrap_or_default().to_string());
            }
            keep.lock().unwrap_or_else(|e| e.into_inner()).push(line);
        }
    });
    let addr = rx.recv_timeout(Duration::from_secs(60));
    let mut p = Proc { child, base: String::new(), log };
    match addr {
        Ok(addr) => p.base = format!("http://{addr}"),
        Err(_) => {
            std::thread::sleep(Duration::from_millis(200));
            panic!("{ctx}: the server did not start:\n{}", p.log());
        }
    }
    p
}

/// Writes fat enough to push fjall's journal past its 64 MB rotation point within a few cuts:
/// hidden-word lists of 1,000 entries of 64 CJK characters of 4 bytes (256 KB each), replaced over and
/// over. Nothing checks them; they only drive rotations and flushes.
async fn ballast(c: Arc<Client>, base: String, stop: Arc<AtomicBool>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    while !stop.load(Ordering::Relaxed) {
        let words: Vec<String> = (0..1000)
            .map(|_| {
                (0..64)
                    .map(|_| char::from_u32(rng.random_range(0x20000..0x2a6d0)).unwrap_or('\u{20000}'))
                    .collect()
            })
            .collect();
        let body = serde_json::json!({ "words": words }).to_string();
        let user = rng.random_range(900_000..900_100);
        match c.call(&base, Method::PUT, "/v1/me/hidden-words", user, false, &body).await {
            Ok((200 | 503 | 504, _)) => {}
            Ok((st, v)) => panic!("hidden words answered {st}: {v}"),
            Err(_) => return,
        }
    }
}

#[test]
fn acknowledged_writes_survive_power_cuts() {
    let cuts = env_u64("LIKEWISE_POWERCUT_CUTS").unwrap_or(12) as usize;
    serial(power_cut_loop(Mode { cuts, ballast: 1, at_rotation: false }));
}

#[test]
fn acknowledged_writes_survive_power_cuts_around_journal_rotations() {
    let cuts = env_u64("LIKEWISE_POWERCUT_ROTATIONS").unwrap_or(2) as usize;
    serial(power_cut_loop(Mode { cuts, ballast: 3, at_rotation: true }));
}

#[test]
fn a_slow_disk_batches_likes_and_keeps_reads_fast() {
    serial(slow_disk::slow_disk());
}

/// How a power-cut run goes.
struct Mode {
    /// Power cuts (process crashes without power loss come on top).
    cuts: usize,
    /// Ballast writers.
    ballast: usize,
    /// Each storm runs until fjall starts a new journal, and the cut comes 0-300 ms later.
    at_rotation: bool,
}

async fn power_cut_loop(mode: Mode) {
    let seed = env_u64("LIKEWISE_POWERCUT_SEED").unwrap_or_else(rand::random);
    let name = if mode.at_rotation { "powercut(rotation)" } else { "powercut" };
    eprintln!(
        "{name}: {} cuts, seed {seed:#x} (LIKEWISE_POWERCUT_SEED={seed:#x} repeats the choices)",
        mode.cuts
    );
    let began = Instant::now();
    let mnt = tempfile::tempdir().expect("tempdir");
    let data = mnt.path().join("data");
    let c = Client::new();
    let mut tasks: Vec<Task> = (0..4).map(|t| Task::new(t, seed)).collect();
    let mut fs = PowercutFs::mount(State::new(), mnt.path(), Duration::ZERO);
    let (mut by_kind, mut crashes, mut lost_ops, mut tables) = ([0usize; 4], 0usize, 0usize, 0usize);
    let mut cycle = 0;
    let mut cuts = 0;
    loop {
        let ctx = format!("cycle {cycle}, after {cuts} cuts and {crashes} crashes (seed {seed:#x})");
        let s = start(&data, &ctx);
        if cycle == 0 {
            for p in POSTS {
                let body = format!(r#"{{"author_id":"{AUTHOR}"}}"#);
                let (st, v) = c
                    .call(&s.base, Method::PUT, &format!("/v1/posts/{p}"), 1, true, &body)
                    .await
                    .expect("post");
                assert_eq!(st, 200, "{v}");
            }
        } else {
            workload::verify(&c, &s.base, &mut tasks, &ctx).await;
        }
        if cuts == mode.cuts {
            s.stop();
            break;
        }
        cycle += 1;
        // Each cycle's choices come from the seed and the cycle alone, so they repeat even
        // where the storm's timing made an earlier cycle draw more or fewer numbers.
        let mut rng = StdRng::seed_from_u64(seed ^ (cycle as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        // The storm, then a SIGKILL at a random moment after the first acknowledged write.
        let stop = Arc::new(AtomicBool::new(false));
        let total = Arc::new(AtomicU64::new(0));
        let running: Vec<_> = tasks
            .drain(..)
            .map(|t| tokio::spawn(t.run(c.clone(), s.base.clone(), stop.clone(), total.clone())))
            .collect();
        let fat: Vec<_> = (0..mode.ballast)
            .map(|_| tokio::spawn(ballast(c.clone(), s.base.clone(), stop.clone(), rng.random())))
            .collect();
        if mode.at_rotation {
            let first = fs.state().journals_and_tables().0;
            let deadline = Instant::now() + Duration::from_secs(300);
            while fs.state().journals_and_tables().0 == first {
                assert!(Instant::now() < deadline, "{ctx}: fjall started no new journal within 300 s");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..300))).await;
        } else {
            tokio::time::sleep(Duration::from_millis(rng.random_range(200..1200))).await;
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while total.load(Ordering::Relaxed) == 0 {
            assert!(Instant::now() < deadline, "{ctx}: no write acknowledged within 20 s\n{}", s.log());
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        s.kill();
        for r in running {
            tasks.push(r.await.expect("a storm task failed"));
        }
        for f in fat {
            f.await.expect("ballast");
        }
        tables = tables.max(fs.state().journals_and_tables().1);
        // One cycle in five, the process dies and the machine does not: the next start reads
        // writes that were never fsynced, and a later cut must not lose what it acknowledges
        // on top of them.
        if !mode.at_rotation && rng.random_bool(0.2) {
            crashes += 1;
            continue;
        }
        let kind = Cut::ALL[cuts % Cut::ALL.len()];
        by_kind[cuts % Cut::ALL.len()] += 1;
        cuts += 1;
        lost_ops += fs.state().pending_len();
        if cuts % 50 == 0 {
            eprintln!("{name}: {cuts} cuts, {crashes} crashes, {:.0} s", began.elapsed().as_secs_f64());
        }
        let image = fs.cut(kind, &mut rng);
        fs = PowercutFs::mount(image, mnt.path(), Duration::ZERO);
    }
    let journals = fs.state().journals_and_tables().0;
    drop(fs);
    let acked: u64 = tasks.iter().map(|t| t.acked).sum();
    let comments: usize = tasks.iter().map(|t| t.comments.len()).sum();
    eprintln!(
        "{name}: {cuts} power cuts (drop-all/prefix/torn/reorder: {by_kind:?}) and {crashes} process crashes \
         in {:.1} s; {acked} acknowledged writes, {comments} comments standing; {lost_ops} unsynced \
         operations at the cuts; newest journal {journals}.jnl, up to {tables} tables",
        began.elapsed().as_secs_f64()
    );
}
