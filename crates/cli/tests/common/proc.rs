//! Driving the real binary as a separate process: start it, signal it, talk JSON to it.

use super::SECRET;
use hyper::Method;
use likewise_core::ids::UserId;
use likewise_http::auth::TokenKeys;
use serde_json::Value;
use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A running `likewise` process.
pub struct Server {
    /// The process.
    pub child: Child,
    /// `http://addr`.
    pub base: String,
}

/// Start `likewise <args>` with the test secret and `envs`; returns once it listens.
pub fn start_with(args: &[&str], envs: &[(&str, &str)]) -> Server {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_likewise"));
    cmd.args(args).env("LIKEWISE__AUTH__SECRET", SECRET).envs(envs.iter().copied());
    start_command(cmd)
}

/// Start `cmd` (a `likewise serve` or `demo` command line); returns once it listens.
pub fn start_command(cmd: Command) -> Server {
    // With `LIKEWISE_TEST_LOG_DIR` set, the log goes to `<dir>/<pid>.log` (to debug a failed
    // process test).
    let dir = std::env::var_os("LIKEWISE_TEST_LOG_DIR");
    start_command_logging(cmd, |pid| dir.map(|d| std::path::Path::new(&d).join(format!("{pid}.log"))))
}

/// Like [`start_with`], with every line the process logs appended to `log` as it comes (for a
/// test that reads the node's log).
pub fn start_logged(args: &[&str], envs: &[(&str, &str)], log: &std::path::Path) -> Server {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_likewise"));
    cmd.args(args).env("LIKEWISE__AUTH__SECRET", SECRET).envs(envs.iter().copied());
    let log = log.to_path_buf();
    start_command_logging(cmd, move |_| Some(log))
}

/// Start `cmd`, copying its log to the file `log_file(pid)` names, if any.
fn start_command_logging(
    mut cmd: Command,
    log_file: impl FnOnce(u32) -> Option<std::path::PathBuf>,
) -> Server {
    let mut child = cmd
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn likewise serve");
    let log = log_file(child.id()).map(|path| {
        let f = std::fs::OpenOptions::new().create(true).append(true).open(path);
        std::io::BufWriter::new(f.expect("open the server's log file"))
    });
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    // Keep draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || {
        use std::io::Write;
        let mut log = log;
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(f) = log.as_mut() {
                let _ = writeln!(f, "{line}");
                let _ = f.flush();
            }
            if let Some(i) = line.find("addr=")
                && let Some(tx) = tx.take()
            {
                let addr = line[i + 5..].split_whitespace().next().unwrap_or_default().to_string();
                let _ = tx.send(format!("http://{addr}"));
            }
        }
    });
    let base =
        rx.recv_timeout(Duration::from_secs(30)).expect("server did not start (or exited before listening)");
    Server { child, base }
}

/// Send `kill <sig>` to the process.
pub fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill").args([sig, &child.id().to_string()]).status().expect("kill").success();
    assert!(ok, "kill {sig} failed");
}

/// A JSON client minting test tokens.
pub struct Client {
    /// The HTTP client.
    pub http: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        http_body_util::Full<bytes::Bytes>,
    >,
    /// Token keys.
    pub keys: TokenKeys,
}

impl Client {
    pub fn new() -> Arc<Self> {
        Arc::new(Client {
            // Idle connections are dropped before the server's keep-alive limit (10 s) closes
            // them: reusing one the server is closing gets a reset mid-send.
            http: hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .pool_idle_timeout(std::time::Duration::from_secs(5))
                .pool_timer(hyper_util::rt::TokioTimer::new())
                .build_http(),
            keys: TokenKeys::new(SECRET.as_bytes()),
        })
    }
    pub async fn call(
        &self,
        base: &str,
        m: Method,
        path: &str,
        user: u64,
        service: bool,
        body: &str,
    ) -> Result<(u16, Value), String> {
        self.call_with(base, m, path, user, service, body, &[]).await
    }

    /// [`Client::call`] with further request headers.
    #[allow(clippy::too_many_arguments)]
    pub async fn call_with(
        &self,
        base: &str,
        m: Method,
        path: &str,
        user: u64,
        service: bool,
        body: &str,
        headers: &[(&str, &str)],
    ) -> Result<(u16, Value), String> {
        use http_body_util::BodyExt;
        let token =
            self.keys.mint(UserId(user), service, Duration::from_secs(600)).map_err(|e| e.to_string())?;
        let mut req = hyper::Request::builder()
            .method(m)
            .uri(format!("{base}{path}"))
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req
            .body(http_body_util::Full::new(bytes::Bytes::from(body.to_string())))
            .map_err(|e| e.to_string())?;
        let resp = self.http.request(req).await.map_err(|e| e.to_string())?;
        let st = resp.status().as_u16();
        let b = resp.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok((st, serde_json::from_slice(&b).unwrap_or(Value::Null)))
    }

    /// Every liker of `post`, through the paged likers list.
    pub async fn likers(&self, base: &str, post: u64) -> HashSet<u64> {
        let mut out = HashSet::new();
        let mut cursor: Option<String> = None;
        loop {
            let path = match &cursor {
                Some(c) => format!("/v1/posts/{post}/likers?limit=100&cursor={c}"),
                None => format!("/v1/posts/{post}/likers?limit=100"),
            };
            let (st, v) = self.call(base, Method::GET, &path, 7, false, "").await.expect("likers");
            assert_eq!(st, 200, "{v}");
            for i in v["items"].as_array().expect("items") {
                assert!(
                    out.insert(i["user_id"].as_str().and_then(|s| s.parse().ok()).expect("id")),
                    "repeated liker"
                );
            }
            match v["next_cursor"].as_str() {
                Some(c) => cursor = Some(c.to_string()),
                None => return out,
            }
        }
    }

    pub async fn count(&self, base: &str, post: u64) -> Option<i64> {
        // As a viewer who authors nothing: the aggregated count everyone sees, not an
        // author's fresh one.
        let (st, v) = self
            .call(base, Method::GET, &format!("/v1/posts/{post}"), super::OBSERVER, false, "")
            .await
            .ok()?;
        assert_eq!(st, 200, "{v}");
        v["like_count"].as_i64()
    }

    pub async fn wait_count(&self, base: &str, post: u64, want: i64) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let got = self.count(base, post).await;
            if got == Some(want) {
                return;
            }
            assert!(Instant::now() < deadline, "count {got:?} did not converge to {want}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Stop a server with SIGTERM and require a clean exit (its buffered writes made durable).
pub fn stop(s: Server) {
    signal(&s.child, "-TERM");
    let mut child = s.child;
    let status = child.wait().expect("wait");
    assert!(status.success(), "graceful stop exits 0, got {status}");
}

/// Create (or update) `post`, written by `author`, as the platform's service token.
pub async fn put_post(c: &Client, base: &str, post: u64, author: u64) {
    let body = format!(r#"{{"author_id":"{author}"}}"#);
    let (st, v) =
        c.call(base, Method::PUT, &format!("/v1/posts/{post}"), 1, true, &body).await.expect("post");
    assert_eq!(st, 200, "{v}");
}

/// `GET /v1/posts/{post}` as `viewer`.
pub async fn get_post(c: &Client, base: &str, post: u64, viewer: u64) -> Value {
    let (st, v) =
        c.call(base, Method::GET, &format!("/v1/posts/{post}"), viewer, false, "").await.expect("get");
    assert_eq!(st, 200, "{v}");
    v
}

/// Like `post` as `user` twice (the second a retry): through `bases[i]`, then the next node.
/// Whether both answered 200 (each answer must say liked).
pub async fn like_with_retry(c: &Client, bases: &[String], i: usize, post: u64, user: u64) -> bool {
    let path = format!("/v1/posts/{post}/like");
    let mut ok = true;
    for attempt in 0..2 {
        let base = &bases[(i + attempt) % bases.len()];
        match c.call(base, Method::PUT, &path, user, false, "").await {
            Ok((200, v)) => assert_eq!(v["liked"], true, "{v}"),
            _ => ok = false,
        }
    }
    ok
}
