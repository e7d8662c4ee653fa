//! The long offline jobs show their progress where an operator runs them: `reconcile --all`
//! and `export analytics` print plain progress lines on stderr when it is not a terminal (a
//! log, a pipe, as here), from `0/N` to `N/N ... done`, with a rate. `shards rebalance` is
//! checked in `rebalance.rs` (it needs a running scale-out deployment). And `shards add` /
//! `shards rebalance --help` say what the README says: no restart needed.

mod common;

use common::SECRET;
use common::proc::{Client, put_post, start_with, stop};
use hyper::Method;
use std::path::Path;
use std::process::{Command, Output};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Run the binary with `envs`; it must succeed.
fn likewise(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_likewise"))
        .args(args)
        .env("LIKEWISE__AUTH__SECRET", SECRET)
        .envs(envs.iter().copied())
        .output()
        .expect("run likewise");
    assert!(out.status.success(), "likewise {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// The help text as one line (clap wraps it to the terminal's width).
fn help(args: &[&str]) -> String {
    let out = likewise(args, &[]);
    String::from_utf8_lossy(&out.stdout).split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The progress lines of `job` on stderr: (done, total, the line), in order.
fn progress_lines(out: &Output, job: &str) -> Vec<(u64, u64, String)> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    stderr
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(&format!("{job}: "))?;
            let (done, rest) = rest.split_once('/')?;
            let total = rest.split_whitespace().next()?;
            Some((done.parse().ok()?, total.parse().ok()?, l.to_string()))
        })
        .collect()
}

/// The lines run from 0 of the total to all of it, never backwards, and the last says it is
/// done with its rate in `unit` per second.
fn assert_progress(out: &Output, job: &str, unit: &str, total: u64) {
    let lines = progress_lines(out, job);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(lines.len() >= 2, "a first and a last progress line on stderr:\n{stderr}");
    let (first, last) = (&lines[0], &lines[lines.len() - 1]);
    assert_eq!((first.0, first.1), (0, total), "{stderr}");
    assert!(first.2.contains(&format!(" {unit}")), "{stderr}");
    assert_eq!((last.0, last.1), (total, total), "{stderr}");
    assert!(last.2.contains(&format!("{unit} done in ")) && last.2.ends_with("/s"), "{stderr}");
    assert!(lines.windows(2).all(|w| w[0].0 <= w[1].0), "never backwards:\n{stderr}");
}

#[test]
fn shards_add_and_rebalance_help_say_no_restart_is_needed() {
    let add = help(&["shards", "add", "--help"]);
    assert!(add.contains("No restart needed: running nodes and workers open it within a second"), "{add}");
    assert!(add.contains("likewise shards rebalance"), "{add}");
    assert!(!add.contains("restart them"), "{add}");
    let rebalance = help(&["shards", "rebalance", "--help"]);
    assert!(rebalance.contains("while the service runs and takes writes (no restart needed)"), "{rebalance}");
    assert!(rebalance.contains("The workers must run"), "{rebalance}");
    assert!(!rebalance.contains("restarted"), "{rebalance}");
    assert!(rebalance.contains("--progress-interval"), "{rebalance}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_and_analytics_export_print_progress_lines_off_a_terminal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().display().to_string();
    let s = start_with(
        &["serve", "--listen", "127.0.0.1:0", "--data-dir", &data],
        &[("LIKEWISE__AGGREGATOR__WINDOW_MS", "20"), ("LIKEWISE__STORE__CACHE_MB", "16")],
    );
    let c = Client::new();
    let posts = 150u64;
    for p in 1..=posts {
        put_post(&c, &s.base, p, 7).await;
        for u in 0..2 {
            let (st, v) = c
                .call(&s.base, Method::PUT, &format!("/v1/posts/{p}/like"), 100 + u, false, "")
                .await
                .expect("like");
            assert_eq!(st, 200, "{v}");
        }
    }
    stop(s);

    // The environment sets the interval.
    let out_dir = dir.path().join("exports");
    let hour =
        |h: i64| (OffsetDateTime::now_utc() + time::Duration::hours(h)).format(&Rfc3339).expect("time");
    let (since, until) = (hour(-1), hour(2));
    let out = likewise(
        &[
            "export",
            "analytics",
            "--since",
            &since,
            "--until",
            &until,
            "--out",
            &out_dir.display().to_string(),
            "--data-dir",
            &data,
        ],
        &[("LIKEWISE_PROGRESS_INTERVAL", "0.01")],
    );
    let lines = progress_lines(&out, "export analytics");
    let events = lines.first().map(|l| l.1).unwrap_or_default();
    assert!(events >= 2 * posts, "every like is an event: {lines:?}");
    assert_progress(&out, "export analytics", "events", events);
    assert!(Path::new(&out_dir).read_dir().expect("out dir").count() == 1);

    // So does the flag.
    let out = likewise(&["reconcile", "--all", "--data-dir", &data, "--progress-interval", "0.01"], &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&format!("reconciled {posts} posts: 0 drifted")), "{stdout}");
    assert_progress(&out, "reconcile", "posts", posts);
}
