//! Abuse limits: per-user like and comment rates, the hidden-words list size and its own body
//! limit, slow clients (header read timeout), the connection cap, bounded metric labels under
//! made-up methods and paths, and notification streams (per user, in total, and ending with
//! their token). Each limit is set small through the same configuration keys an operator uses.

mod common;

use common::{TestApp, allow_open_files, assert_error, test_config};
use hyper::{Method, StatusCode};
use serde_json::json;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_like_farm_burst_is_cut_off_with_429_and_retry_after() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = test_config(dir.path());
    cfg.limits.like_burst = 5;
    cfg.limits.likes_per_minute = 1; // refills far slower than the test runs
    let app = TestApp::start_with(cfg).await;
    for p in 1..=8 {
        app.post(p, 100, false).await;
    }
    let farm = app.user(7);
    // Likes and unlikes share the allowance: 4 likes + 1 unlike use up the burst of 5.
    for p in 1..=4 {
        app.like(7, p, true).await;
    }
    app.like(7, 4, false).await;
    let (st, headers, v) = app.call_full(Method::PUT, "/v1/posts/5/like", Some(&farm), None).await;
    assert_error(st, &v, 429, "rate_limited");
    let wait: u64 = headers
        .get("retry-after")
        .and_then(|h| h.to_str().ok())
        .and_then(|s| s.parse().ok())
        .expect("Retry-After seconds");
    assert!(wait >= 1, "Retry-After {wait}");
    // The refused like did not happen; comment likes are limited too; others are unaffected.
    assert_eq!(app.view(100, 5).await["viewer_has_liked"], false);
    let (st, v) = app.call(Method::GET, "/v1/posts/5", Some(&farm), None).await;
    assert_eq!((st, &v["viewer_has_liked"]), (StatusCode::OK, &json!(false)), "{v}");
    let (st, c) =
        app.call(Method::POST, "/v1/posts/1/comments", Some(&app.user(8)), Some(r#"{"text":"nice"}"#)).await;
    assert_eq!(st, StatusCode::CREATED, "{c}");
    let cid = c["comment_id"].as_str().expect("id");
    let (st, v) = app.call(Method::PUT, &format!("/v1/comments/{cid}/like"), Some(&farm), None).await;
    assert_error(st, &v, 429, "rate_limited");
    assert_eq!(app.like(8, 5, true).await, (true, true), "another user is not limited");
    app.wait_count(100, 5, 1).await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_comment_rate_is_configurable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = test_config(dir.path());
    cfg.limits.comment_burst = 2;
    cfg.limits.comments_per_minute = 1;
    let app = TestApp::start_with(cfg).await;
    app.post(1, 100, false).await;
    let u = app.user(9);
    for text in ["one thing", "another thought"] {
        let body = json!({ "text": text }).to_string();
        let (st, v) = app.call(Method::POST, "/v1/posts/1/comments", Some(&u), Some(&body)).await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
    }
    let (st, v) =
        app.call(Method::POST, "/v1/posts/1/comments", Some(&u), Some(r#"{"text":"a third one"}"#)).await;
    assert_error(st, &v, 429, "rate_limited");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hidden_word_lists_are_bounded_and_a_full_list_fits_its_body_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    let u = app.user(5);
    let put = |words: Vec<String>| {
        let body = json!({ "words": words }).to_string();
        let token = u.clone();
        let app = &app;
        async move { app.call(Method::PUT, "/v1/me/hidden-words", Some(&token), Some(&body)).await }
    };
    // The longest valid list: 1,000 entries of 64 non-ASCII characters, ~190 KB of JSON, far
    // over the 64 KiB default body limit of other routes.
    let full: Vec<String> = (0..1000).map(|i| format!("{i:04}{}", "é".repeat(60))).collect();
    let (st, v) = put(full).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let (st, v) = put(vec!["w".to_string(); 1001]).await;
    assert_error(st, &v, 400, "invalid");
    let (st, v) = put(vec!["x".repeat(65)]).await;
    assert_error(st, &v, 400, "invalid");
    // Past even this route's limit: 413.
    let (st, v) = put(vec!["y".repeat(60); 20_000]).await;
    assert_error(st, &v, 413, "too_large");
    app.stop().await;
}

/// Read from `s` until EOF or `within`; true when the server closed the connection.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue, // a 408 or similar before closing is fine
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_disconnected_after_the_header_read_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = test_config(dir.path());
    cfg.server.header_read_timeout_ms = 300;
    let app = TestApp::start_with(cfg).await;
    let addr = app.base.trim_start_matches("http://").to_string();
    // Slowloris: headers begun, never finished.
    let mut slow = TcpStream::connect(&addr).await.expect("connect");
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await.expect("write");
    assert!(closed_within(&mut slow, Duration::from_secs(10)).await, "a slowloris client was not cut off");
    // An idle connection that never sends a request is closed too.
    let mut idle = TcpStream::connect(&addr).await.expect("connect");
    assert!(closed_within(&mut idle, Duration::from_secs(10)).await, "an idle connection was kept");
    // A prompt client is served.
    let mut ok = TcpStream::connect(&addr).await.expect("connect");
    ok.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.expect("write");
    let mut resp = String::new();
    ok.read_to_string(&mut resp).await.expect("read");
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_beyond_the_cap_is_answered_503_until_a_slot_frees() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = test_config(dir.path());
    cfg.server.max_connections = 1;
    cfg.server.header_read_timeout_ms = 60_000;
    let app = TestApp::start_with(cfg).await;
    let addr = app.base.trim_start_matches("http://").to_string();
    let mut holder = TcpStream::connect(&addr).await.expect("connect");
    holder.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await.expect("write");
    tokio::time::sleep(Duration::from_millis(100)).await; // let the server take it
    // An API route (`/healthz` and `/metrics` are served even past the cap).
    let ask = |addr: String| async move {
        let mut s = TcpStream::connect(&addr).await.expect("connect");
        s.write_all(b"GET /v1/trending HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.expect("w");
        let mut resp = String::new();
        s.read_to_string(&mut resp).await.expect("read");
        resp
    };
    // The only slot is taken: answered at once, 503 with Retry-After and the error body.
    let resp = ask(addr.clone()).await;
    assert!(resp.starts_with("HTTP/1.1 503"), "{resp}");
    assert!(resp.to_ascii_lowercase().contains("\r\nretry-after: 1\r\n"), "{resp}");
    assert!(
        resp.ends_with(r#"{"error":"unavailable","message":"too many connections open; retry later"}"#),
        "{resp}"
    );
    // Once the slot is free, a connection is served.
    drop(holder);
    let served = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let resp = ask(addr.clone()).await;
            if !resp.starts_with("HTTP/1.1 503") {
                return resp;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    served.await.expect("served once the slot was free");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_never_finishes_is_answered_503_at_the_request_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = test_config(dir.path());
    cfg.server.request_timeout_ms = 300;
    let app = TestApp::start_with(cfg).await;
    let addr = app.base.trim_start_matches("http://").to_string();
    let mut s = TcpStream::connect(&addr).await.expect("connect");
    let head = format!(
        "PUT /v1/me/settings HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"hide_",
        app.user(5)
    );
    s.write_all(head.as_bytes()).await.expect("write");
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
        .await
        .expect("answered before the test gave up")
        .expect("read");
    let resp = String::from_utf8_lossy(&buf[..n]);
    assert!(resp.starts_with("HTTP/1.1 503"), "{resp}");
    assert!(resp.contains(r#""error":"unavailable""#), "{resp}");
    // Like every other 503, it says when to come back.
    assert!(resp.to_ascii_lowercase().contains("\r\nretry-after: 1\r\n"), "{resp}");
    // The connection closes with the rest of the body unread, and the answer says so.
    assert!(resp.to_ascii_lowercase().contains("\r\nconnection: close\r\n"), "{resp}");
    app.stop().await;
}

/// Open the notification stream with `token`: the status, and the body to read or hold.
async fn open_stream(app: &TestApp, token: &str) -> (StatusCode, hyper::HeaderMap, hyper::body::Incoming) {
    let req = hyper::Request::get(format!("{}/v1/me/notifications/stream", app.base))
        .header("authorization", format!("Bearer {token}"))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .expect("req");
    let resp = app.client.request(req).await.expect("stream");
    let (parts, body) = resp.into_parts();
    (parts.status, parts.headers, body)
}

async fn error_of(body: hyper::body::Incoming) -> serde_json::Value {
    use http_body_util::BodyExt;
    let b = body.collect().await.expect("body").to_bytes();
    serde_json::from_slice(&b).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notification_streams_are_capped_per_user_and_in_total() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = test_config(dir.path());
    cfg.notifications.max_streams_per_user = 2;
    cfg.notifications.max_streams = 3;
    let app = TestApp::start_with(cfg).await;
    let seven = app.user(7);
    let (st1, _, a) = open_stream(&app, &seven).await;
    let (st2, _, b) = open_stream(&app, &seven).await;
    assert_eq!((st1, st2), (StatusCode::OK, StatusCode::OK));
    let (st, h, body) = open_stream(&app, &seven).await;
    assert_error(st, &error_of(body).await, 429, "rate_limited");
    assert!(h.get("retry-after").is_some(), "{h:?}");
    // Another user still may, up to the total cap, which leaves the rest to other requests.
    let (st, _, c) = open_stream(&app, &app.user(8)).await;
    assert_eq!(st, StatusCode::OK);
    let (st, _, body) = open_stream(&app, &app.user(9)).await;
    assert_error(st, &error_of(body).await, 503, "unavailable");
    let (st, v) = app.call(Method::GET, "/v1/me/notifications", Some(&app.user(9)), None).await;
    assert_eq!(st, StatusCode::OK, "ordinary requests are served: {v}");
    drop((a, b, c));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_ends_when_its_token_expires_and_frees_its_slot() {
    use http_body_util::BodyExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = test_config(dir.path());
    cfg.notifications.max_streams_per_user = 1;
    let app = TestApp::start_with(cfg).await;
    let short = app.keys.mint(likewise_core::ids::UserId(7), false, Duration::from_secs(2)).expect("mint");
    let (st, _, mut body) = open_stream(&app, &short).await;
    assert_eq!(st, StatusCode::OK);
    // Read until the server ends the stream (the guard only stops a hang).
    let ended = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match body.frame().await {
                None => return true,
                Some(Err(_)) => return false,
                Some(Ok(_)) => continue,
            }
        }
    })
    .await;
    assert_eq!(ended.ok(), Some(true), "the stream ended cleanly at the token's expiry");
    // Its slot is free again: with a cap of one, a fresh token opens a stream at once.
    let (st, _, body) = open_stream(&app, &app.user(7)).await;
    assert_eq!(st, StatusCode::OK);
    drop(body);
    app.stop().await;
}

/// A sample's value from Prometheus text.
fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn made_up_methods_and_paths_leave_metrics_and_memory_bounded() {
    use rand::{Rng, SeedableRng};
    // The real binary: it counts its live heap (likewise_heap_allocated_bytes).
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().display().to_string();
    let mut server =
        common::proc::start_with(&["serve", "--listen", "127.0.0.1:0", "--data-dir", &data], &[]);
    let base = server.base.clone();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let get = |path: &str| {
        let req = hyper::Request::get(format!("{base}{path}")).body(Default::default()).expect("req");
        let client = client.clone();
        async move {
            use http_body_util::BodyExt;
            let resp = client.request(req).await.expect("send");
            String::from_utf8(resp.into_body().collect().await.expect("body").to_bytes().to_vec())
                .expect("utf-8")
        }
    };
    // Random method names (some 60 KB long) on random paths, matched and not.
    let flood = |n: usize, seed: u64| {
        let (client, base) = (client.clone(), base.clone());
        async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            for i in 0..n {
                let len = if i % 500 == 499 { 60_000 } else { rng.random_range(1..40) };
                let method: String = (0..len)
                    .map(|_| char::from(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ-_"[rng.random_range(0..28)]))
                    .collect();
                let method = format!("X{method}");
                let path = match rng.random_range(0..3) {
                    0 => format!("/{:x}/{:x}", rng.random::<u64>(), rng.random::<u32>()),
                    1 => format!("/v1/posts/{}/like", rng.random_range(1..u64::MAX)),
                    _ => format!("/v1/nothing/{:x}", rng.random::<u64>()),
                };
                let req = hyper::Request::builder()
                    .method(hyper::Method::from_bytes(method.as_bytes()).expect("method"))
                    .uri(format!("{base}{path}"))
                    .body(Default::default())
                    .expect("req");
                let resp = client.request(req).await.expect("send");
                assert!(resp.status().is_client_error(), "{}", resp.status());
                use http_body_util::BodyExt;
                let _ = resp.into_body().collect().await;
            }
        }
    };
    // Every kind of label the flood can produce exists after a first round; then measure.
    flood(200, 1).await;
    let _ = get("/metrics").await;
    tokio::time::sleep(Duration::from_millis(1_500)).await; // the heap gauge refreshes every second
    let before = get("/metrics").await;
    let mut tasks = Vec::new();
    for t in 0..4 {
        tasks.push(tokio::spawn(flood(2_500, 100 + t)));
    }
    for t in tasks {
        t.await.expect("flood");
    }
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let after = get("/metrics").await;
    let grew = after.len() as i64 - before.len() as i64;
    assert!(grew < 1024, "/metrics grew by {grew} bytes after 10,000 made-up requests");
    assert!(!after.contains("method=\"X"), "a made-up method became a label");
    let heap = |m: &str| sample(m, "likewise_heap_allocated_bytes").expect("heap gauge");
    let (h0, h1) = (heap(&before), heap(&after));
    assert!(h1 - h0 < 1024.0 * 1024.0, "live heap grew by {} bytes", h1 - h0);
    common::proc::signal(&server.child, "-TERM");
    let _ = server.child.wait();
}

/// A fresh node's first burst: the door's rate is still being measured (the first windows see
/// few answers, so it reads low), and it must not refuse while answers come back quickly. A
/// refusal is only right when the answers themselves are slow: half the wait bound
/// (`admission::SLOW_SHARE`), here 2.5 s of a 5 s bound (half the 10 s timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_node_refuses_its_first_burst_only_when_its_answers_are_slow() {
    const BURST: u64 = 1_500;
    allow_open_files(2 * BURST);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = test_config(dir.path());
    cfg.server.request_timeout_ms = 10_000;
    let app = std::sync::Arc::new(TestApp::start_with(cfg).await);
    app.post(1, 7, false).await;
    let tokens: Vec<String> = (0..BURST).map(|u| app.user(1_000 + u)).collect();
    let start = tokio::sync::Barrier::new(BURST as usize + 1);
    let start = std::sync::Arc::new(start);
    let calls: Vec<_> = tokens
        .into_iter()
        .map(|t| {
            let (app, start) = (app.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                let t0 = std::time::Instant::now();
                let (st, h, v) = app.call_full(Method::PUT, "/v1/posts/1/like", Some(&t), None).await;
                (st, h, v, t0.elapsed())
            })
        })
        .collect();
    start.wait().await;
    let (mut liked, mut refused, mut slowest) = (0u64, 0u64, Duration::ZERO);
    for c in calls {
        let (st, h, v, took) = c.await.expect("join");
        match st {
            StatusCode::OK => {
                liked += 1;
                slowest = slowest.max(took);
            }
            StatusCode::SERVICE_UNAVAILABLE => {
                refused += 1;
                assert_eq!(v["error"], "unavailable", "{v}");
                let after: u64 = h["retry-after"].to_str().expect("ascii").parse().expect("seconds");
                assert!((1..=30).contains(&after), "{after}");
            }
            other => panic!("{other}: {v}"),
        }
    }
    println!("liked {liked}, refused {refused}, slowest answer {slowest:?}");
    assert!(
        refused == 0 || slowest >= Duration::from_millis(2_500),
        "{refused} of {BURST} refused though no answer took 2.5 s (slowest {slowest:?})"
    );
    // Nothing refused was stored, nothing acknowledged lost.
    let v = app.wait_count(7, 1, liked as i64).await;
    assert_eq!(v["like_count"], liked, "{v}");
    std::sync::Arc::into_inner(app).expect("one owner").stop().await;
}
