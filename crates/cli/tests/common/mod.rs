//! Test helpers: start the real service on port 0 with a fresh data directory, and a small
//! JSON HTTP client.
#![allow(dead_code)]

pub mod deployment;
pub mod fault_proxy;
pub mod nats_server;
pub mod proc;
pub mod prometheus;
pub mod python;
pub mod tansu;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use likewise_app::Application;
use likewise_app::config::{Config, Overrides};
use likewise_core::ids::UserId;
use likewise_http::auth::TokenKeys;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const SECRET: &str = "test-secret-0123456789abcdef";

/// A running service.
pub struct TestApp {
    pub base: String,
    pub keys: TokenKeys,
    pub data_dir: PathBuf,
    pub client: Client<HttpConnector, Full<Bytes>>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<anyhow::Result<()>>>,
    /// The PostgreSQL shards when the suite runs on the scale-out engines.
    shards: Option<Shards>,
    /// Their Redis and stream prefix.
    prefix: String,
}

/// `LIKEWISE_TEST_BACKEND=postgres` runs the in-process suites on the scale-out engines
/// (PostgreSQL shards, Redis, NATS; role `all`) instead of the embedded store, to show the
/// API behaves the same on both.
pub fn scaled_out() -> bool {
    std::env::var("LIKEWISE_TEST_BACKEND").is_ok_and(|v| v == "postgres")
}

/// A scale-out test deployment's resources: its databases (dropped with them) and its stream
/// (deleted on drop). Redis keys all carry TTLs.
pub struct ScaleOut {
    shards: likewise_scaleout::postgres::testing::TestShards,
    prefix: String,
}

impl Drop for ScaleOut {
    fn drop(&mut self) {
        delete_stream(&self.prefix);
        delete_redis_keys(&self.prefix);
    }
}

/// Delete every Redis key of deployment `prefix` (from any context, like [`delete_stream`]).
pub fn delete_redis_keys(prefix: &str) {
    let pattern = format!("{prefix}:*");
    let _ = std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        let _ = rt.block_on(async move {
            let client = redis::Client::open("redis://127.0.0.1:6379/0")?;
            let mut c = client.get_multiplexed_async_connection().await?;
            let keys: Vec<String> = redis::cmd("KEYS").arg(&pattern).query_async(&mut c).await?;
            if !keys.is_empty() {
                let _: () = redis::cmd("DEL").arg(&keys).query_async(&mut c).await?;
            }
            redis::RedisResult::Ok(())
        });
    })
    .join();
}

/// Delete the event stream of deployment `prefix` (from any context: its own thread and
/// runtime, so it works in `Drop` inside or outside a runtime).
pub fn delete_stream(prefix: &str) {
    delete_stream_at("nats://127.0.0.1:4222", prefix);
}

/// [`delete_stream`] on the NATS server at `url` (a test's own; nothing when it is down).
pub fn delete_stream_at(url: &str, prefix: &str) {
    let name = format!("{}_EVENTS", prefix.to_uppercase());
    let url = url.to_string();
    let _ = std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        rt.block_on(async move {
            if let Ok(client) = async_nats::connect(url).await {
                let _ = async_nats::jetstream::new(client).delete_stream(name).await;
            }
        });
    })
    .join();
}

type Shards = std::sync::Arc<ScaleOut>;

/// Resources of apps stopped for a restart, by data directory: the restart on the same
/// directory takes them back (and drops them when it stops).
static PARKED: std::sync::Mutex<Vec<(PathBuf, Shards, String)>> = std::sync::Mutex::new(Vec::new());

/// Turn an embedded test configuration into a scale-out one with isolated shards, Redis
/// prefix and stream prefix (those of a previous run on the same data directory, if any).
async fn to_scale_out(cfg: &mut Config) -> Shards {
    let parked = {
        let mut p = PARKED.lock().expect("lock");
        p.iter().position(|(d, _, _)| *d == cfg.store.data_dir).map(|i| p.remove(i))
    };
    let shards = match parked {
        Some((_, s, _)) => s,
        None => std::sync::Arc::new(ScaleOut {
            shards: likewise_scaleout::postgres::testing::TestShards::create(2).await,
            prefix: format!("t{:016x}", rand::random::<u64>()),
        }),
    };
    let prefix = shards.prefix.clone();
    cfg.store.backend = "postgres".into();
    cfg.store.postgres_shards = shards.shards.urls.clone();
    cfg.store.postgres_pool_size = 8;
    cfg.cache.redis_url = Some("redis://127.0.0.1:6379/0".into());
    cfg.cache.redis_prefix = prefix.clone();
    cfg.stream.nats_url = Some("nats://127.0.0.1:4222".into());
    cfg.stream.prefix = prefix;
    shards
}

/// A viewer who authors no post in any test: sees the count everyone else sees.
pub const OBSERVER: u64 = 4_000_000_001;

/// Configuration for a test: port 0, the given data directory, a short aggregator window.
pub fn test_config(data_dir: &Path) -> Config {
    let mut cfg = Config::load(
        None,
        &Overrides { listen: Some("127.0.0.1:0".into()), role: None, data_dir: Some(data_dir.into()) },
    )
    .expect("config");
    cfg.auth.secret = Some(SECRET.into());
    cfg.aggregator.window_ms = 20;
    cfg.store.cache_mb = 16;
    cfg.store.memtable_mb = 4;
    cfg.store.max_journal_mb = 64;
    cfg.notifications.hold_ms = 300;
    cfg
}

impl TestApp {
    /// Start on `data_dir` with `cfg`.
    pub async fn start_with(mut cfg: Config) -> TestApp {
        let shards = if scaled_out() && cfg.store.backend == "embedded" {
            Some(to_scale_out(&mut cfg).await)
        } else {
            None
        };
        let app = Application::build(&cfg).await.expect("build");
        let base = format!("http://{}", app.local_addr());
        let keys = app.keys();
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(app.run_until_stopped(async {
            let _ = rx.await;
        }));
        TestApp {
            base,
            keys,
            data_dir: cfg.store.data_dir.clone(),
            // Idle connections are dropped before the server's keep-alive limit (10 s) closes
            // them: reusing one the server is closing gets a reset mid-send.
            client: Client::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(5))
                .pool_timer(hyper_util::rt::TokioTimer::new())
                .build_http(),
            stop: Some(tx),
            task: Some(task),
            shards,
            prefix: cfg.stream.prefix.clone(),
        }
    }

    /// Start on `data_dir` with the test configuration.
    pub async fn start(data_dir: &Path) -> TestApp {
        Self::start_with(test_config(data_dir)).await
    }

    /// Graceful stop (like SIGTERM): drains and persists.
    pub async fn stop(self) {
        self.stop_inner(false).await;
    }

    /// Graceful stop before a restart on the same data directory: on the scale-out engines
    /// the databases and stream are kept for the next `start` on that directory.
    pub async fn stop_for_restart(self) {
        self.stop_inner(true).await;
    }

    async fn stop_inner(mut self, restart: bool) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.expect("join").expect("clean stop");
        }
        if let Some(s) = self.shards.take()
            && restart
        {
            PARKED.lock().expect("lock").push((self.data_dir.clone(), s, self.prefix.clone()));
        }
    }

    pub fn user(&self, id: u64) -> String {
        self.keys.mint(UserId(id), false, Duration::from_secs(600)).expect("mint")
    }

    pub fn service(&self) -> String {
        self.keys.mint(UserId(1), true, Duration::from_secs(600)).expect("mint")
    }

    /// Send a request; returns status and parsed JSON (Null when empty or not JSON).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> (StatusCode, Value) {
        let (st, _, v) = self.call_full(method, path, token, body).await;
        (st, v)
    }

    /// Like `call`, with the response headers.
    pub async fn call_full(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> (StatusCode, hyper::HeaderMap, Value) {
        let mut req = Request::builder().method(method).uri(format!("{}{}", self.base, path));
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        let body = Full::new(Bytes::from(body.unwrap_or("").to_string()));
        let resp = self.client.request(req.body(body).expect("request")).await.expect("send");
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (status, headers, v)
    }

    /// Send a request with exactly these headers (none added) and body; returns status,
    /// headers and parsed JSON (Null when empty or not JSON).
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (StatusCode, hyper::HeaderMap, Value) {
        let mut req = Request::builder()
            .method(hyper::Method::from_bytes(method.as_bytes()).expect("method"))
            .uri(format!("{}{}", self.base, path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = self
            .client
            .request(req.body(Full::new(Bytes::from(body.to_string()))).expect("request"))
            .await
            .expect("send");
        let (status, headers) = (resp.status(), resp.headers().clone());
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        (status, headers, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    /// Register a post by `author` (service role).
    pub async fn post(&self, id: u64, author: u64, hide: bool) {
        let body = format!(r#"{{"author_id":"{author}","hide_like_count":{hide}}}"#);
        let (st, v) =
            self.call(Method::PUT, &format!("/v1/posts/{id}"), Some(&self.service()), Some(&body)).await;
        assert_eq!(st, StatusCode::OK, "{v}");
    }

    /// Like (true) or unlike (false) as `user`; returns (liked, changed).
    pub async fn like(&self, user: u64, post: u64, like: bool) -> (bool, bool) {
        let m = if like { Method::PUT } else { Method::DELETE };
        let (st, v) = self.call(m, &format!("/v1/posts/{post}/like"), Some(&self.user(user)), None).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        (v["liked"].as_bool().expect("liked"), v["changed"].as_bool().expect("changed"))
    }

    /// The post as `viewer` sees it.
    pub async fn view(&self, viewer: u64, post: u64) -> Value {
        let (st, v) =
            self.call(Method::GET, &format!("/v1/posts/{post}"), Some(&self.user(viewer)), None).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        v
    }

    /// Wait until the post's like count equals `want` as its author sees it (which includes
    /// likes not aggregated yet) and as everyone else does (the aggregated, cached count),
    /// unless the post hides it from others.
    pub async fn wait_count(&self, author: u64, post: u64, want: i64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let v = self.view(author, post).await;
            let others = self.view(OBSERVER, post).await["like_count"].as_i64();
            if v["like_count"].as_i64() == Some(want) && others.is_none_or(|n| n == want) {
                return v;
            }
            assert!(Instant::now() < deadline, "count did not converge to {want}: {v}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl TestApp {
    /// Poll `cond` until it holds (counts are eventually consistent), at most 10 s.
    pub async fn wait_until<F, Fut>(&self, cond: F)
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond().await {
            assert!(Instant::now() < deadline, "condition not reached within 10 s");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Assert an error response: status and JSON `error` kind with a message.
pub fn assert_error(st: StatusCode, v: &Value, want: u16, kind: &str) {
    assert_eq!(st.as_u16(), want, "{v}");
    assert_eq!(v["error"].as_str(), Some(kind), "{v}");
    assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
}

/// Raise this process's open-file limit to fit `n` more sockets (up to the hard limit).
pub fn allow_open_files(n: u64) {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut lim = getrlimit(Resource::Nofile);
    let want = n + 256;
    if lim.current.is_some_and(|c| c < want) {
        lim.current = Some(lim.maximum.map_or(want, |m| m.min(want)));
        setrlimit(Resource::Nofile, lim).expect("raise RLIMIT_NOFILE");
    }
    let now = getrlimit(Resource::Nofile).current;
    assert!(now.is_none_or(|c| c >= want), "the open-file limit {now:?} is too low for {n} sockets");
}
