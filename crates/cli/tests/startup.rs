//! Start-up against engines that are not what the configuration says: each of PostgreSQL,
//! Redis and NATS pointed (one at a time) at a TCP listener that accepts and never speaks.
//! `likewise serve` must give up within its connect timeout (under 10 s) and exit non-zero
//! with one line naming the setting, never hang.

mod common;

use likewise_scaleout::postgres::testing::TestShards;
use std::io::Read;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The longest a start-up against a silent engine may take here: the connect timeouts are
/// under 10 s; the rest is margin for a loaded machine.
const BOUND: Duration = Duration::from_secs(20);

/// Run `likewise serve` on `config` until it exits (at most [`BOUND`]): its exit status and
/// standard error.
fn serve(config: &str, dir: &std::path::Path) -> (std::process::ExitStatus, String, Duration) {
    let path = dir.join("likewise.toml");
    std::fs::write(&path, config).expect("write config");
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_likewise"))
        .args(["serve", "--config", &path.display().to_string(), "--role", "all", "--listen", "127.0.0.1:0"])
        .args(["--data-dir", &dir.join("data").display().to_string()])
        .env("LIKEWISE__AUTH__SECRET", common::SECRET)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn likewise serve");
    let mut stderr = child.stderr.take().expect("stderr");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        let _ = tx.send((child.wait(), text));
    });
    match rx.recv_timeout(BOUND) {
        Ok((status, text)) => (status.expect("wait"), text, started.elapsed()),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("likewise serve still starting after {BOUND:?}: {config}");
        }
    }
}

/// A listener that completes TCP handshakes (the kernel does, from its backlog) and never
/// sends a byte.
fn silent() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr").to_string();
    (l, addr)
}

fn config(shards: &[String], redis: &str, nats: &str, prefix: &str) -> String {
    let shards: Vec<String> = shards.iter().map(|u| format!("{u:?}")).collect();
    format!(
        "[store]\nbackend = \"postgres\"\npostgres_shards = [{}]\n\
         [cache]\nredis_url = \"{redis}\"\nredis_prefix = \"{prefix}\"\n\
         [stream]\nnats_url = \"{nats}\"\nprefix = \"{prefix}\"\n",
        shards.join(", ")
    )
}

fn assert_fails_naming(config: &str, setting: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (status, stderr, took) = serve(config, dir.path());
    assert!(!status.success(), "started against a silent engine: {stderr}");
    let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
    assert!(last.contains(setting), "the error does not name {setting}: {stderr}");
    assert!(!last.contains("db error: db error"), "{last}");
    eprintln!("{setting}: failed after {took:?}: {last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_engine_pointed_at_a_silent_listener_fails_start_up_naming_its_setting() {
    let shards = TestShards::create(1).await;
    let prefix = format!("t{:016x}", rand::random::<u64>());
    let (_l, addr) = silent();
    let redis = "redis://127.0.0.1:6379/0";
    let nats = "nats://127.0.0.1:4222";

    let pg = format!("postgres://postgres@{addr}/likewise");
    assert_fails_naming(&config(&[pg], redis, nats, &prefix), "store.postgres_shards");
    let silent_redis = format!("redis://{addr}/0");
    assert_fails_naming(&config(&shards.urls, &silent_redis, nats, &prefix), "cache.redis_url");
    let silent_nats = format!("nats://{addr}");
    assert_fails_naming(&config(&shards.urls, redis, &silent_nats, &prefix), "stream.nats_url");
    // PostgreSQL's own port speaks, but not NATS: it waits for the client to begin.
    assert_fails_naming(&config(&shards.urls, redis, "nats://127.0.0.1:5432", &prefix), "stream.nats_url");
}
