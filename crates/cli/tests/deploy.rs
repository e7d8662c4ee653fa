//! The monitoring files in `deploy/` stay true to the service: every metric the alerting
//! rules (`deploy/prometheus/rules.yml`) and the Grafana dashboard (`deploy/grafana/
//! likewise.json`) read is one the code registers, a `_bucket` series belongs to a histogram,
//! every alert has a unit test in `rules_test.yml`, and the dependency gauge the "down"
//! alerts read is on `/metrics`. Renaming a metric without updating them fails here.
//! (`promtool check rules` and `promtool test rules` run in `.ci/alerts`.)

mod common;

use common::TestApp;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read_dir") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The metrics the service registers (`metrics::counter!`, `gauge!`, `histogram!` with a
/// literal name, in any crate's `src`), each with its kind.
fn registered() -> BTreeMap<String, &'static str> {
    let mut files = Vec::new();
    for krate in std::fs::read_dir(root().join("crates")).expect("crates") {
        let src = krate.expect("crate").path().join("src");
        if src.is_dir() {
            sources(&src, &mut files);
        }
    }
    let mut out = BTreeMap::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("source");
        for kind in ["counter", "gauge", "histogram"] {
            for (i, _) in text.match_indices(&format!("{kind}!(")) {
                let rest = text[i + kind.len() + 2..].trim_start();
                if let Some(name) = rest.strip_prefix('"').and_then(|r| r.split('"').next()) {
                    out.insert(name.to_string(), kind);
                }
            }
        }
    }
    out
}

/// The `likewise_*` names in `text`.
fn names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("likewise_") {
        let name: String = text[i..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        out.insert(name);
    }
    out
}

/// Why a referenced name is not an exported series, if it is not.
fn unexported(name: &str, metrics: &BTreeMap<String, &'static str>) -> Option<String> {
    if metrics.contains_key(name) {
        return None;
    }
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            return match metrics.get(base) {
                Some(&"histogram") => None,
                Some(kind) => Some(format!("{name}: {base} is a {kind}, not a histogram")),
                None => Some(format!("{name}: no metric {base}")),
            };
        }
    }
    Some(format!("{name}: not registered by the service"))
}

#[test]
fn every_metric_the_alerting_rules_read_is_exported() {
    let metrics = registered();
    // The scan itself: without it finding these, the check below would prove nothing.
    assert_eq!(metrics.get("likewise_http_requests_total"), Some(&"counter"));
    assert_eq!(metrics.get("likewise_http_request_duration_seconds"), Some(&"histogram"));
    assert_eq!(metrics.get("likewise_aggregator_lag_events"), Some(&"gauge"));
    assert!(unexported("likewise_http_requests_total_bucket", &metrics).is_some());
    assert!(unexported("likewise_renamed_total", &metrics).is_some());
    let rules = read("deploy/prometheus/rules.yml");
    let used = names(&rules);
    assert!(used.len() >= 10, "{used:?}");
    let missing: Vec<String> = used.iter().filter_map(|n| unexported(n, &metrics)).collect();
    assert!(missing.is_empty(), "rules.yml reads metrics the service does not export: {missing:#?}");
}

#[test]
fn every_alert_has_a_unit_test() {
    let rules = read("deploy/prometheus/rules.yml");
    let tests = read("deploy/prometheus/rules_test.yml");
    let alerts: Vec<&str> = rules.lines().filter_map(|l| l.trim().strip_prefix("- alert: ")).collect();
    assert!(alerts.len() >= 10, "{alerts:?}");
    for a in alerts {
        assert!(tests.contains(&format!("alertname: {a}\n")), "{a} has no test in rules_test.yml");
    }
}

#[test]
fn every_metric_the_dashboard_reads_is_exported() {
    let metrics = registered();
    let text = read("deploy/grafana/likewise.json");
    let dash: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let panels = dash["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10);
    let mut used = BTreeSet::new();
    for p in panels {
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{} has no query", p["title"]);
        for t in targets {
            let expr = t["expr"].as_str().expect("expr");
            let n = names(expr);
            assert!(!n.is_empty(), "{}: {expr} reads no likewise metric", p["title"]);
            used.extend(n);
        }
    }
    for v in dash["templating"]["list"].as_array().expect("variables") {
        used.extend(names(v["query"].as_str().unwrap_or_default()));
    }
    let missing: Vec<String> = used.iter().filter_map(|n| unexported(n, &metrics)).collect();
    assert!(missing.is_empty(), "the dashboard reads metrics the service does not export: {missing:#?}");
    // The signals the alerts watch each have a panel.
    for m in names(&read("deploy/prometheus/rules.yml")) {
        assert!(used.contains(&m), "no dashboard panel shows {m}, which an alert reads");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_report_each_dependency_up_at_scrape_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    // Nothing probed /healthz: the scrape itself probes.
    let (st, _, _) = app.raw("GET", "/metrics", &[], "").await;
    assert_eq!(st, 200);
    let resp = app.client.get(format!("{}/metrics", app.base).parse().expect("uri")).await.expect("metrics");
    let body = http_body_util::BodyExt::collect(resp.into_body()).await.expect("body").to_bytes();
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("likewise_dependency_up{dependency=\"storage\"} 1"), "{text}");
    app.stop().await;
}
