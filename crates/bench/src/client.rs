//! The one HTTP client of the benchmarks that drive a running server (`hot-post --url`,
//! `soak` and `overload`): requests with a bearer token, JSON answers decoded, the reads every benchmark
//! checks its counts with, and the token keys that server accepts.

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
pub use hyper::{Method, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use likewise_app::config::{Config, Overrides};
use likewise_http::auth::TokenKeys;
use serde::de::DeserializeOwned;
use std::path::Path;
use std::sync::Arc;

/// A pooled HTTP/1 client for one server. Cheap to clone: clones share the pool.
#[derive(Clone)]
pub struct HttpClient {
    hyper: Client<HttpConnector, Full<Bytes>>,
    base: Arc<str>,
}

/// One page of a likers list, as much of it as the benchmarks read.
#[derive(serde::Deserialize)]
struct LikersPage {
    items: Vec<serde_json::Value>,
    next_cursor: Option<String>,
}

impl HttpClient {
    /// A client for the server at `base` (e.g. `http://127.0.0.1:8080`; a trailing `/` is
    /// dropped) that keeps up to `idle` idle connections.
    pub fn new(base: &str, idle: usize) -> Self {
        let hyper = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(idle).build_http();
        HttpClient { hyper, base: base.trim_end_matches('/').into() }
    }

    /// The server's base URL, without a trailing `/`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The absolute URL of `path` (which starts with `/`) on the server.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// One request to an absolute URL (built once by callers that repeat it); the status and
    /// the body. A body is sent as JSON.
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        token: Option<&str>,
        body: Option<String>,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        let (status, _, body) = self.send_full(method, url, token, body).await?;
        Ok((status, body))
    }

    /// [`HttpClient::send`] with the answer's headers (a 503's `Retry-After`, ...).
    pub async fn send_full(
        &self,
        method: Method,
        url: &str,
        token: Option<&str>,
        body: Option<String>,
    ) -> anyhow::Result<(StatusCode, hyper::HeaderMap, Bytes)> {
        let mut req = Request::builder().method(method).uri(url);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let body = match body {
            Some(b) => {
                req = req.header("content-type", "application/json");
                Full::new(Bytes::from(b))
            }
            None => Full::new(Bytes::new()),
        };
        let resp = self.hyper.request(req.body(body)?).await?;
        let (parts, body) = resp.into_parts();
        let bytes = body.collect().await?.to_bytes();
        Ok((parts.status, parts.headers, bytes))
    }

    /// One request to `path` on the server; the status and the body.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<String>,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        self.send(method, &self.url(path), token, body).await
    }

    /// `GET path`, its JSON answer decoded; an answer other than 2xx is an error naming `what`.
    pub async fn get_json<T: DeserializeOwned>(
        &self,
        path: &str,
        token: &str,
        what: &str,
    ) -> anyhow::Result<T> {
        let (st, b) = self.call(Method::GET, path, Some(token), None).await?;
        anyhow::ensure!(st.is_success(), "{what}: {st} {}", String::from_utf8_lossy(&b));
        serde_json::from_slice(&b).with_context(|| what.to_string())
    }

    /// The post's `like_count` as `token`'s holder reads it (None when hidden from them).
    pub async fn like_count(&self, post: u64, token: &str) -> anyhow::Result<Option<u64>> {
        let v: serde_json::Value = self.get_json(&format!("/v1/posts/{post}"), token, "read post").await?;
        Ok(v["like_count"].as_u64())
    }

    /// The user ID of every row of `post`'s likers list, read 100 a page.
    pub async fn likers(&self, post: u64, token: &str) -> anyhow::Result<Vec<String>> {
        let mut likers = Vec::new();
        let mut path = format!("/v1/posts/{post}/likers?limit=100");
        loop {
            let page: LikersPage = self.get_json(&path, token, "likers page").await?;
            let last = page.items.is_empty();
            likers.extend(page.items.iter().map(|i| i["user_id"].as_str().unwrap_or_default().to_string()));
            match page.next_cursor {
                Some(c) if !last => path = format!("/v1/posts/{post}/likers?limit=100&cursor={c}"),
                _ => return Ok(likers),
            }
        }
    }

    /// `GET /metrics`: the body of a 2xx answer, `None` on any failure.
    pub async fn metrics(&self) -> Option<Bytes> {
        let (st, body) = self.call(Method::GET, "/metrics", None, None).await.ok()?;
        st.is_success().then_some(body)
    }
}

/// The token keys of a running server: from `--secret`, else the secret its config or data
/// directory holds (the same lookup `likewise token` does).
pub fn server_keys(
    secret: Option<&str>,
    config: Option<&Path>,
    data_dir: Option<&Path>,
) -> anyhow::Result<TokenKeys> {
    if let Some(s) = secret {
        return Ok(TokenKeys::new(s.as_bytes()));
    }
    let overrides = Overrides { listen: None, role: None, data_dir: data_dir.map(Into::into) };
    let cfg = Config::load(config, &overrides)?;
    let secret = likewise_app::secret::load_or_create(cfg.auth.secret.as_deref(), &cfg.store.data_dir, false)
        .context("pass --secret or the server's --data-dir")?;
    Ok(TokenKeys::new(&secret))
}
