//! Notifications through the API: hold-and-aggregate, cancellation, comment and reply
//! notifications, and the live SSE stream.

mod common;

use common::TestApp;
use http_body_util::BodyExt;
use hyper::{Method, StatusCode};
use serde_json::{Value, json};
use std::time::Duration;

async fn inbox(app: &TestApp, user: u64) -> Vec<Value> {
    let (st, v) = app.call(Method::GET, "/v1/me/notifications?limit=100", Some(&app.user(user)), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["items"].as_array().expect("items").clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_likes_become_one_aggregated_item() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let svc = app.service();
    for (id, name) in [(100u64, "alice"), (101, "bob")] {
        app.call(
            Method::PUT,
            &format!("/v1/users/{id}"),
            Some(&svc),
            Some(&json!({"username": name}).to_string()),
        )
        .await;
    }
    // The author follows alice and bob, so they are named.
    for id in [100u64, 101] {
        app.call(Method::PUT, &format!("/v1/users/7/follows/{id}"), Some(&svc), None).await;
    }
    for u in 100..130u64 {
        app.like(u, 1, true).await;
        app.like(u, 1, true).await;
    }
    app.like(7, 1, true).await; // the author's own like notifies nobody
    app.wait_until(|| async { inbox(&app, 7).await.first().is_some_and(|i| i["actor_count"] == 30) }).await;
    let items = inbox(&app, 7).await;
    assert_eq!(items.len(), 1, "{items:?}");
    let it = &items[0];
    assert_eq!((it["kind"].as_str(), it["post_id"].as_str()), (Some("post_liked"), Some("1")));
    assert!(it["text"].as_str().is_some_and(|t| t.ends_with("and 28 others liked your post")), "{it}");
    let actors: Vec<&str> =
        it["actors"].as_array().expect("actors").iter().filter_map(Value::as_str).collect();
    assert_eq!(actors.len(), 2);
    assert!(actors.iter().all(|a| ["alice", "bob"].contains(a)), "followed likers are named: {actors:?}");
    // An unlike after delivery removes that actor.
    app.like(129, 1, false).await;
    app.wait_until(|| async { inbox(&app, 7).await.first().is_some_and(|i| i["actor_count"] == 29) }).await;
    assert!(inbox(&app, 100).await.is_empty(), "likers get nothing");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_like_undone_within_the_hold_never_notifies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = common::test_config(dir.path());
    cfg.notifications.hold_ms = 1_500; // ample time to unlike, even on a slow machine
    let app = TestApp::start_with(cfg).await;
    app.post(1, 7, false).await;
    app.post(2, 7, false).await;
    // Watch the live stream: a delivered-then-withdrawn notification would show up there.
    let req = hyper::Request::get(format!("{}/v1/me/notifications/stream", app.base))
        .header("authorization", format!("Bearer {}", app.user(7)))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .expect("req");
    let mut body = app.client.request(req).await.expect("stream").into_body();
    app.like(50, 1, true).await;
    app.like(50, 1, false).await;
    app.like(51, 2, true).await; // a control, due after the cancelled one would have been
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !seen.contains("\"post_id\":\"2\"") {
        let frame = tokio::time::timeout_at(deadline, body.frame()).await.expect("the control in time");
        if let Some(d) = frame.expect("open").expect("frame").data_ref() {
            seen.push_str(&String::from_utf8_lossy(d));
        }
    }
    assert!(!seen.contains("\"post_id\":\"1\""), "the cancelled like was never pushed: {seen}");
    assert!(!inbox(&app, 7).await.iter().any(|i| i["post_id"] == "1"), "and left no item");
    drop(body);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn comments_and_replies_notify_and_the_stream_delivers_live() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    // Open the stream first.
    let req = hyper::Request::get(format!("{}/v1/me/notifications/stream", app.base))
        .header("authorization", format!("Bearer {}", app.user(7)))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .expect("req");
    let resp = app.client.request(req).await.expect("stream");
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(
        resp.headers()
            .get("content-type")
            .and_then(|h| h.to_str().ok())
            .is_some_and(|c| c.starts_with("text/event-stream"))
    );
    let mut body = resp.into_body();

    app.like(60, 1, true).await;
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !seen.contains("post_liked") {
        let frame = tokio::time::timeout_at(deadline, body.frame()).await.expect("an SSE event in time");
        let frame = frame.expect("stream open").expect("frame");
        if let Some(d) = frame.data_ref() {
            seen.push_str(&String::from_utf8_lossy(d));
        }
    }
    assert!(seen.contains("event: notification") && seen.contains("liked your post"), "{seen}");

    let body_json = json!({"text": "great shot"}).to_string();
    let (st, top) =
        app.call(Method::POST, "/v1/posts/1/comments", Some(&app.user(61)), Some(&body_json)).await;
    assert_eq!(st, StatusCode::CREATED);
    let parent = top["comment_id"].as_str().expect("id").to_string();
    let reply = json!({"text": "agreed", "parent_id": parent}).to_string();
    let (st, _) = app.call(Method::POST, "/v1/posts/1/comments", Some(&app.user(62)), Some(&reply)).await;
    assert_eq!(st, StatusCode::CREATED);
    app.wait_until(|| async { inbox(&app, 7).await.iter().any(|i| i["kind"] == "commented") }).await;
    app.wait_until(|| async { inbox(&app, 61).await.iter().any(|i| i["kind"] == "replied") }).await;
    let replied = inbox(&app, 61).await;
    assert_eq!(replied[0]["text"], "user62 replied to your comment");
    assert!(
        !inbox(&app, 62).await.iter().any(|i| i["kind"] == "replied"),
        "no one is notified of their own reply"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnecting_stream_resumes_from_last_event_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    app.post(2, 7, false).await;
    app.like(70, 1, true).await;
    app.wait_until(|| async { !inbox(&app, 7).await.is_empty() }).await;
    let first = inbox(&app, 7).await;
    let updated_ms: u64 = 1; // older than everything: the whole backlog is replayed
    let req = hyper::Request::get(format!("{}/v1/me/notifications/stream", app.base))
        .header("authorization", format!("Bearer {}", app.user(7)))
        .header("last-event-id", format!("{updated_ms}.0"))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .expect("req");
    let resp = app.client.request(req).await.expect("stream");
    let mut body = resp.into_body();
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let want = format!("\"id\":\"{}\"", first[0]["id"].as_str().expect("id"));
    while !seen.contains(&want) {
        let frame = tokio::time::timeout_at(deadline, body.frame()).await.expect("backlog in time");
        if let Some(d) = frame.expect("open").expect("frame").data_ref() {
            seen.push_str(&String::from_utf8_lossy(d));
        }
    }
    let (st, v) = {
        let req = hyper::Request::get(format!("{}/v1/me/notifications/stream", app.base))
            .header("authorization", format!("Bearer {}", app.user(7)))
            .header("last-event-id", "garbage")
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .expect("req");
        let resp = app.client.request(req).await.expect("stream");
        let st = resp.status();
        let b = resp.into_body().collect().await.expect("body").to_bytes();
        (st, serde_json::from_slice::<Value>(&b).unwrap_or(Value::Null))
    };
    common::assert_error(st, &v, 400, "invalid");
    drop(body);
    app.stop().await;
}
