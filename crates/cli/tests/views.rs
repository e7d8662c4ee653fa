//! Unique views and insights through the API.

mod common;

use common::{TestApp, assert_error};
use hyper::{Method, StatusCode};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_viewers_are_counted_within_three_percent_and_only_the_author_sees_insights() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = Arc::new(TestApp::start(dir.path()).await);
    app.post(1, 7, true).await; // the count is hidden from others
    for u in 1..=5u64 {
        app.like(100 + u, 1, true).await;
    }
    let mut tasks = Vec::new();
    for w in 0..16u64 {
        let app = app.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..125u64 {
                let user = 10_000 + w * 125 + i;
                for _ in 0..2 {
                    let (st, _) =
                        app.call(Method::POST, "/v1/posts/1/views", Some(&app.user(user)), None).await;
                    assert_eq!(st, StatusCode::NO_CONTENT);
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("join");
    }
    app.wait_until(|| async {
        let (_, v) = app.call(Method::GET, "/v1/posts/1/insights", Some(&app.user(7)), None).await;
        v["like_count"] == 5
    })
    .await;
    let (st, v) = app.call(Method::GET, "/v1/posts/1/insights", Some(&app.user(7)), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let uniques = v["unique_viewers"].as_u64().expect("unique_viewers") as f64;
    assert!((uniques - 2000.0).abs() / 2000.0 <= 0.03, "unique_viewers {uniques} not within 3% of 2000");
    assert_eq!(v["comment_count"], 0);
    assert!(app.view(101, 1).await["like_count"].is_null(), "hidden from others");
    let (st, v) = app.call(Method::GET, "/v1/posts/1/insights", Some(&app.user(101)), None).await;
    assert_error(st, &v, 403, "forbidden");
    let (st, v) = app.call(Method::GET, "/v1/posts/404/insights", Some(&app.user(7)), None).await;
    assert_error(st, &v, 404, "not_found");
    let (st, v) = app.call(Method::POST, "/v1/posts/404/views", Some(&app.user(7)), None).await;
    assert_error(st, &v, 404, "not_found");
    // The sketch survives a restart.
    let data = app.data_dir.clone();
    match Arc::try_unwrap(app) {
        Ok(app) => app.stop_for_restart().await,
        Err(_) => panic!("app still shared"),
    }
    let app = TestApp::start(&data).await;
    let (_, v) = app.call(Method::GET, "/v1/posts/1/insights", Some(&app.user(7)), None).await;
    assert_eq!(v["unique_viewers"].as_u64(), Some(uniques as u64), "{v}");
    app.stop().await;
}

/// docs/architecture.md, "The read path": the author's own view of their counts is fresher than everyone else's.
/// With an aggregation window far longer than the test, other viewers still see the count of
/// before the likes, while the author's post view and insights include every like and unlike
/// on the first read after its acknowledgement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_author_sees_every_acknowledged_like_before_it_is_aggregated() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = common::test_config(dir.path());
    cfg.aggregator.window_ms = 60_000;
    let app = TestApp::start_with(cfg).await;
    app.post(1, 7, false).await;
    app.post(2, 8, false).await;
    let author_sees = |v: &serde_json::Value| v["like_count"].as_i64().expect("like_count");
    for u in 1..=5u64 {
        assert_eq!(app.like(100 + u, 1, true).await, (true, true));
        // The first read after the acknowledgement, no waiting.
        assert_eq!(author_sees(&app.view(7, 1).await), u as i64);
    }
    assert_eq!(app.like(101, 1, false).await, (false, true));
    app.like(101, 2, true).await;
    assert_eq!(author_sees(&app.view(7, 1).await), 4);
    let (st, v) = app.call(Method::GET, "/v1/posts/1/insights", Some(&app.user(7)), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["like_count"], 4, "{v}");
    // A feed page mixing the author's post with another's: only their own is fresh.
    let (st, v) = app.call(Method::GET, "/v1/posts?ids=1,2", Some(&app.user(7)), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(
        (v["posts"][0]["like_count"].as_i64(), v["posts"][1]["like_count"].as_i64()),
        (Some(4), Some(0))
    );
    // Everyone else keeps the cached count: nothing is aggregated yet.
    assert_eq!(author_sees(&app.view(200, 1).await), 0);
    assert_eq!(author_sees(&app.view(8, 2).await), 1, "post 2's author sees its like");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_few_viewers_are_counted_exactly_also_after_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    // Users 22 and 101 share a HyperLogLog register: the registers alone read one short.
    for n in 1..=120u64 {
        for _ in 0..2 {
            let (st, _) = app.call(Method::POST, "/v1/posts/1/views", Some(&app.user(n)), None).await;
            assert_eq!(st, StatusCode::NO_CONTENT);
        }
        if n % 20 == 0 || n == 101 {
            let (st, v) = app.call(Method::GET, "/v1/posts/1/insights", Some(&app.user(7)), None).await;
            assert_eq!(st, StatusCode::OK, "{v}");
            assert_eq!(v["unique_viewers"].as_u64(), Some(n), "after {n} viewers: {v}");
        }
    }
    // Stored and read back (the exact form, not the registers).
    let data = app.data_dir.clone();
    app.stop_for_restart().await;
    let app = TestApp::start(&data).await;
    let (_, v) = app.call(Method::GET, "/v1/posts/1/insights", Some(&app.user(7)), None).await;
    assert_eq!(v["unique_viewers"].as_u64(), Some(120), "{v}");
    app.stop().await;
}
