//! Start-up against engines that are not what the configuration says: each of PostgreSQL,
//! Redis and NATS pointed (one at a time) at a TCP listener that accepts and never speaks.
//! `likewise serve` must give up within its connect timeout (under 10 s) and exit non-zero
//! with one line naming the setting, never hang. A shard PostgreSQL refuses is named with the
//! cause and without its password; a replica that cannot be used is warned about once, and
//! `likewise shards status` says why.

mod common;

use common::deployment::Deployment;
use likewise_scaleout::postgres::testing::TestShards;
use std::io::{BufRead, BufReader, Read};
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
    config_with(shards, redis, nats, prefix, "")
}

/// [`config`] with more lines in `[store]`.
fn config_with(shards: &[String], redis: &str, nats: &str, prefix: &str, store: &str) -> String {
    let shards: Vec<String> = shards.iter().map(|u| format!("{u:?}")).collect();
    format!(
        "[store]\nbackend = \"postgres\"\npostgres_shards = [{}]\n{store}\
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
    let silent_redis = format!("redis://{addr}/0");
    let silent_nats = format!("nats://{addr}");
    let cases = [
        (config(&[pg], redis, nats, &prefix), "store.postgres_shards"),
        (config(&shards.urls, &silent_redis, nats, &prefix), "cache.redis_url"),
        (config(&shards.urls, redis, &silent_nats, &prefix), "stream.nats_url"),
        // PostgreSQL's own port speaks, but not NATS: it waits for the client to begin.
        (config(&shards.urls, redis, "nats://127.0.0.1:5432", &prefix), "stream.nats_url"),
    ];
    // Each case waits out its engine's connect timeout: side by side, not one after another.
    std::thread::scope(|s| {
        for (cfg, setting) in &cases {
            s.spawn(move || assert_fails_naming(cfg, setting));
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_postgres_refuses_is_named_with_the_cause_and_without_its_password() {
    let prefix = format!("t{:016x}", rand::random::<u64>());
    let shard = "postgres://postgres:s3cret-pw@127.0.0.1:5432/likewise_no_such_database";
    let cfg = config(&[shard.to_string()], "redis://127.0.0.1:6379/0", "nats://127.0.0.1:4222", &prefix);
    let dir = tempfile::tempdir().expect("tempdir");
    let (status, stderr, _) = serve(&cfg, dir.path());
    assert!(!status.success(), "{stderr}");
    let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
    for want in ["store.postgres_shards", "shard 0", "postgres:***@127.0.0.1:5432", "does not exist"] {
        assert!(last.contains(want), "{want:?} missing: {last}");
    }
    assert!(!stderr.contains("s3cret-pw"), "the password is shown: {stderr}");
    assert!(!last.contains("db error: db error"), "{last}");
}

/// Start `likewise serve` on `config`: the process and its standard error, line by line
/// (the channel closes when the process exits).
fn serve_lines(
    config: &std::path::Path,
    data: &std::path::Path,
) -> (std::process::Child, mpsc::Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_likewise"))
        .args([
            "serve",
            "--config",
            &config.display().to_string(),
            "--role",
            "all",
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--data-dir", &data.display().to_string()])
        .env("LIKEWISE__AUTH__SECRET", common::SECRET)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn likewise serve");
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (child, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_replica_is_warned_about_once_and_shards_status_gives_the_cause() {
    let d = Deployment::new().await;
    // A port nothing listens on: connections are refused.
    let dead = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let replica = format!("postgres://postgres:s3cret-pw@127.0.0.1:{dead}/likewise");
    let text = config_with(
        &d.shards.urls,
        &d.redis_url,
        "nats://127.0.0.1:4222",
        &d.prefix,
        &format!("postgres_replicas = [{replica:?}]\n"),
    );
    let path = d.dir.path().join("with-replica.toml");
    std::fs::write(&path, &text).expect("write config");

    let (mut child, rx) = serve_lines(&path, &d.dir.path().join("data"));
    let is_warning = |l: &str| l.contains("store.postgres_replicas") && l.contains("unusable");
    let mut seen = Vec::new();
    // Until the process listens and has warned (the tracker probes from the start).
    while !(seen.iter().any(|l: &String| l.contains("listening")) && seen.iter().any(|l| is_warning(l))) {
        match rx.recv_timeout(BOUND) {
            Ok(line) => seen.push(line),
            Err(_) => {
                let _ = child.kill();
                panic!("no warning about the replica: {seen:#?}");
            }
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_likewise"))
        .args(["shards", "status", "--config", &path.display().to_string()])
        .env("LIKEWISE__AUTH__SECRET", common::SECRET)
        .output()
        .expect("shards status");
    let _ = child.kill();
    let _ = child.wait();
    seen.extend(rx.iter());
    let warnings: Vec<&String> = seen.iter().filter(|l| is_warning(l)).collect();
    assert_eq!(warnings.len(), 1, "one warning per outage: {seen:#?}");
    assert!(warnings[0].contains("refused") && warnings[0].contains("shard 0"), "{}", warnings[0]);
    assert!(!seen.iter().any(|l| l.contains("s3cret-pw")), "the password is shown");
    let status = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let line = status.lines().find(|l| l.contains("replica: UNREACHABLE")).unwrap_or_default();
    assert!(line.contains("refused"), "no cause in shards status: {status}");
}
