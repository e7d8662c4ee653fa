//! A Prometheus server of a test's own (Debian's `prometheus` package): a temporary
//! configuration scraping the given nodes and evaluating the given rules, a free port and a
//! temporary storage directory, and a small client of its HTTP API. Killed, and its directory
//! removed, when it drops. A missing binary fails the test (with how to install it): it never
//! skips.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const INSTALL: &str = "the `prometheus` binary is missing: install Debian's package with \
    `apt-get install --no-install-recommends prometheus` (.ci/run installs it before the tests)";

/// Panic, saying how to install it, unless the `prometheus` binary runs.
pub fn require_installed() {
    match Command::new("prometheus").arg("--version").output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!("{INSTALL}\n`prometheus --version`: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => panic!("{INSTALL} ({e})"),
    }
}

/// A running Prometheus.
pub struct Prometheus {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    child: Option<Child>,
    dir: tempfile::TempDir,
    http: Client<HttpConnector, Full<Bytes>>,
}

impl Prometheus {
    /// Start one that scrapes `targets` (`host:port` of each node's `/metrics`) as job
    /// `likewise` and evaluates the rules file `rules` (its text), both every `interval`;
    /// returns once it is ready.
    pub async fn start(rules: &str, targets: &[String], interval: Duration) -> Prometheus {
        let dir = tempfile::tempdir().expect("tempdir");
        let rules_path = dir.path().join("rules.yml");
        std::fs::write(&rules_path, rules).expect("write rules");
        let every = format!("{}ms", interval.as_millis());
        let targets: Vec<String> = targets.iter().map(|t| format!("{t:?}")).collect();
        let config = format!(
            "global:\n  scrape_interval: {every}\n  scrape_timeout: {every}\n  evaluation_interval: {every}\n\
             rule_files:\n  - {:?}\n\
             scrape_configs:\n  - job_name: likewise\n    static_configs:\n      - targets: [{}]\n",
            rules_path.display().to_string(),
            targets.join(", ")
        );
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config).expect("write prometheus.yml");
        let port =
            std::net::TcpListener::bind("127.0.0.1:0").expect("free port").local_addr().expect("addr").port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log file");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{INSTALL} ({e})"));
        let p = Prometheus {
            base: format!("http://127.0.0.1:{port}"),
            child: Some(child),
            dir,
            http: Client::builder(hyper_util::rt::TokioExecutor::new()).build_http(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while p.status("/-/ready").await != Some(200) {
            assert!(Instant::now() < deadline, "prometheus did not become ready:\n{}", p.log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        p
    }

    async fn status(&self, path: &str) -> Option<u16> {
        let req = hyper::Request::get(format!("{}{path}", self.base)).body(Full::default()).ok()?;
        Some(self.http.request(req).await.ok()?.status().as_u16())
    }

    /// The `data` of a successful answer of the HTTP API at `path` (with its query string).
    pub async fn api(&self, path: &str) -> Value {
        let req = hyper::Request::get(format!("{}{path}", self.base)).body(Full::default()).expect("request");
        let resp = self.http.request(req).await.unwrap_or_else(|e| panic!("GET {path}: {e}\n{}", self.log()));
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        let v: Value = serde_json::from_slice(&body).expect("JSON answer");
        assert_eq!(v["status"], "success", "GET {path}: {v}");
        v["data"].clone()
    }

    /// The instant vector `promql` evaluates to now.
    pub async fn query(&self, promql: &str) -> Vec<Value> {
        let data = self.api(&format!("/api/v1/query?query={}", encode(promql))).await;
        data["result"].as_array().cloned().unwrap_or_default()
    }

    /// The alerting rule named `alert`, as `/api/v1/rules` reports it (state, health, its
    /// active alerts, duration, last evaluation).
    pub async fn alerting_rule(&self, alert: &str) -> Value {
        let data = self.api("/api/v1/rules?type=alert").await;
        let rules =
            data["groups"].as_array().into_iter().flatten().flat_map(|g| g["rules"].as_array()).flatten();
        let found = rules.filter(|r| r["name"] == alert).cloned().collect::<Vec<_>>();
        assert_eq!(found.len(), 1, "alerting rule {alert} loaded once: {data}");
        found[0].clone()
    }

    /// Each scrape target's last scrape (health, error, duration) and the dependency gauges
    /// Prometheus holds, for a failure message.
    pub async fn targets(&self) -> String {
        let data = self.api("/api/v1/targets?state=active").await;
        let mut out = String::new();
        for t in data["activeTargets"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "target {}: {} (last scrape {}, {} s) {}\n",
                t["scrapeUrl"], t["health"], t["lastScrape"], t["lastScrapeDuration"], t["lastError"]
            ));
        }
        for s in self.query("likewise_dependency_up").await {
            out.push_str(&format!("{} {}\n", s["metric"], s["value"]));
        }
        out
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `s` percent-encoded for a query string.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
