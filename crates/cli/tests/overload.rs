//! `likewise bench overload`, run briefly through the binary on both engines: the embedded
//! service it starts itself, and a scale-out node (`serve` on PostgreSQL shards, Redis and
//! NATS, which must be running: the test fails, never skips, without them). Only correctness
//! is asserted (no acknowledged write lost, no shed write stored, the summary lines parse);
//! the rates of a debug build on a busy machine say nothing.

mod common;

use common::SECRET;
use common::deployment::Deployment;
use common::proc::stop;

/// Run `bench overload` with short phases and `args`; its standard output.
fn bench(args: &[&str]) -> String {
    let short = [
        "bench",
        "overload",
        "--probe-seconds",
        "1",
        "--seconds",
        "1",
        "--concurrency",
        "16",
        "--max-concurrency",
        "64",
        "--posts",
        "4",
        "--max-in-flight",
        "512",
    ];
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_likewise"))
        .args(short.iter().chain(args))
        .env("LIKEWISE__AUTH__SECRET", SECRET)
        .output()
        .expect("run likewise bench overload");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    println!("{stdout}");
    assert!(
        out.status.success(),
        "bench overload failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The number after `label` in `line`.
fn number_after(line: &str, label: &str) -> f64 {
    let rest = line.split(label).nth(1).unwrap_or_else(|| panic!("no {label:?} in {line:?}"));
    let n: String = rest.trim_start().chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    n.parse().unwrap_or_else(|_| panic!("no number after {label:?} in {line:?}"))
}

/// Each workload's summary line is there, parses, and reports nothing lost or wrongly stored.
fn assert_correct(out: &str) {
    for w in ["likes", "mix"] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("summary {w}: ")))
            .unwrap_or_else(|| panic!("no summary of {w}:\n{out}"));
        assert!(number_after(line, "capacity") > 0.0, "nothing acknowledged at capacity: {line}");
        let ratio = number_after(line, "= ");
        assert!(ratio.is_finite(), "{line}");
        assert_eq!(number_after(line, "acknowledged writes lost"), 0.0, "{out}");
        assert_eq!(number_after(line, "shed writes stored"), 0.0, "{out}");
        let check = out.lines().find(|l| l.starts_with(&format!("{w:<5} check"))).expect("check line");
        assert!(check.contains("OK:"), "{out}");
    }
}

#[test]
fn overload_on_the_embedded_engine_loses_no_acknowledged_write() {
    assert_correct(&bench(&[]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_on_a_scale_out_node_loses_no_acknowledged_write() {
    let d = Deployment::with_config("[server]\nrequest_timeout_ms = 1000\n").await;
    let node = d.start("all");
    let base = node.base.clone();
    let out = tokio::task::spawn_blocking(move || bench(&["--url", &base])).await.expect("join");
    stop(node);
    assert_correct(&out);
}
