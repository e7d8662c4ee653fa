//! The alerting rules against the live service: a real Prometheus scrapes a two-node
//! scale-out deployment (two API nodes on isolated PostgreSQL shards, a Redis prefix of their
//! own and a NATS JetStream server of the test's own) and evaluates
//! `deploy/prometheus/rules.yml`; the stream alert stays quiet while NATS runs and fires once
//! NATS is killed. The promtool unit tests (`.ci/alerts`) check each rule on made-up series;
//! this checks that the service's own `/metrics` and the rules meet.
//!
//! Needs the `prometheus` binary (Debian's `prometheus` package) and `nats-server`, besides
//! the servers every scale-out test uses; without them it fails, never skips.

mod common;

use common::deployment::Deployment;
use common::nats_server::NatsServer;
use common::prometheus::{self, Prometheus};
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const RULES: &str = "deploy/prometheus/rules.yml";
const ALERT: &str = "LikewiseStreamDown";
/// How often Prometheus scrapes the nodes and evaluates the rules.
const EVERY: Duration = Duration::from_secs(1);
/// The alert's `for:` in the test's copy of the rules (see [`rules_with_short_for`]).
const SHORT_FOR: Duration = Duration::from_secs(5);

/// The rules file with only the stream alert's `for:` shortened to [`SHORT_FOR`]: the file's
/// own (a minute) would keep the test waiting that long for no more certainty; the expression,
/// labels and every other rule are the file's, unchanged.
fn rules_with_short_for() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(RULES);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{RULES}: {e}"));
    let mut out = Vec::new();
    let (mut in_alert, mut rewritten) = (false, 0);
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(name) = trimmed.strip_prefix("- alert:") {
            in_alert = name.trim() == ALERT;
        } else if trimmed.starts_with("- record:") || trimmed.starts_with("- name:") {
            in_alert = false;
        }
        if in_alert && trimmed.starts_with("for:") {
            let indent = &line[..line.len() - trimmed.len()];
            out.push(format!("{indent}for: {}s", SHORT_FOR.as_secs()));
            rewritten += 1;
            continue;
        }
        out.push(line.to_string());
    }
    assert_eq!(rewritten, 1, "{RULES}: {ALERT} has one `for:` line");
    out.join("\n") + "\n"
}

/// The `instance` labels of `alerts` in state `state`.
fn instances(alerts: &Value, state: &str) -> BTreeSet<String> {
    let all = alerts.as_array().into_iter().flatten();
    all.filter(|a| a["state"] == state)
        .filter_map(|a| a["labels"]["instance"].as_str())
        .map(String::from)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_nats_fires_the_stream_alert_on_every_node() {
    prometheus::require_installed();
    let mut nats = NatsServer::start().await;
    let d = Deployment::with_nats(&nats.url, "").await;
    let nodes = [d.start("api"), d.start("api")];
    let targets: BTreeSet<String> =
        nodes.iter().map(|n| n.base.trim_start_matches("http://").to_string()).collect();
    let prom = Prometheus::start(&rules_with_short_for(), &Vec::from_iter(targets.clone()), EVERY).await;

    // NATS runs: both nodes' scrapes say the stream is up ...
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let up = prom.query(r#"likewise_dependency_up{job="likewise",dependency="stream"} == 1"#).await;
        let up: BTreeSet<String> =
            up.iter().filter_map(|s| s["metric"]["instance"].as_str()).map(String::from).collect();
        if up == targets {
            break;
        }
        if Instant::now() > deadline {
            panic!(
                "the nodes never reported the stream up: {up:?}\n{}\n{}",
                prom.targets().await,
                prom.log()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // ... and the alert stays inactive over several evaluations of the rule on that data.
    let rule = prom.alerting_rule(ALERT).await;
    assert_eq!(rule["health"], "ok", "{rule}");
    assert_eq!(rule["duration"], SHORT_FOR.as_secs(), "the test's copy of the rules is loaded: {rule}");
    let (mut evaluations, mut last) = (0, rule["lastEvaluation"].clone());
    let quiet_until = Instant::now() + 3 * EVERY;
    while Instant::now() < quiet_until {
        let rule = prom.alerting_rule(ALERT).await;
        assert_eq!(rule["state"], "inactive", "{ALERT} is not firing or pending while NATS runs: {rule}");
        if rule["lastEvaluation"] != last {
            evaluations += 1;
            last = rule["lastEvaluation"].clone();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(evaluations >= 2, "the rule was evaluated {evaluations} times in {:?}", 3 * EVERY);

    // NATS dies: the alert goes pending on both nodes, then fires once `for:` has passed.
    nats.kill();
    let killed = Instant::now();
    let (mut pending_seen, mut pending_after) = (BTreeSet::new(), Duration::ZERO);
    loop {
        let rule = prom.alerting_rule(ALERT).await;
        assert_eq!(rule["health"], "ok", "{rule}");
        pending_seen.extend(instances(&rule["alerts"], "pending"));
        if pending_after.is_zero() && pending_seen == targets {
            pending_after = killed.elapsed();
        }
        let firing = instances(&rule["alerts"], "firing");
        if firing == targets {
            println!(
                "{ALERT}: pending on both nodes {pending_after:?} after the kill, firing {:?}",
                killed.elapsed()
            );
            assert_eq!(pending_seen, targets, "each alert was pending before it fired: {rule}");
            for a in rule["alerts"].as_array().into_iter().flatten() {
                assert_eq!(a["labels"]["severity"], "page", "{a}");
                assert_eq!(a["labels"]["job"], "likewise", "{a}");
            }
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "{ALERT} did not fire on both nodes within 30 s of NATS being killed: {rule}\n{}",
            prom.targets().await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Firing no sooner than `for:` after the kill: the alert is the rule's, not a stale one.
    assert!(killed.elapsed() >= SHORT_FOR, "fired {:?} after the kill", killed.elapsed());
}
