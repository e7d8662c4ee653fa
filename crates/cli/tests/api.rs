//! Black-box API tests: the real service on port 0 with a temporary data directory.

mod common;

use common::{TestApp, assert_error};
use hyper::{Method, StatusCode};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retried_likes_and_unlikes_converge_to_the_exact_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(42, 7, false).await;
    // 200 users like, every request sent twice, concurrently.
    let mut tasks = Vec::new();
    let app = std::sync::Arc::new(app);
    for u in 1000..1200u64 {
        let app = app.clone();
        tasks.push(tokio::spawn(async move {
            let first = app.like(u, 42, true).await;
            let retry = app.like(u, 42, true).await;
            (first, retry)
        }));
    }
    for t in tasks {
        let (first, retry) = t.await.expect("join");
        assert_eq!(first, (true, true));
        assert_eq!(retry, (true, false));
    }
    // 50 of them unlike, twice.
    for u in 1000..1050u64 {
        assert_eq!(app.like(u, 42, false).await, (false, true));
        assert_eq!(app.like(u, 42, false).await, (false, false));
    }
    let v = app.wait_count(7, 42, 150).await;
    assert_eq!(v["like_count_text"], "150");
    let (st, likers) = app.call(Method::GET, "/v1/posts/42/likers?limit=100", Some(&app.user(7)), None).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(likers["items"].as_array().map(Vec::len), Some(100));
    assert!(likers["next_cursor"].is_string());
    match std::sync::Arc::try_unwrap(app) {
        Ok(app) => app.stop().await,
        Err(_) => panic!("app still shared"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_page_keeps_order_drops_unknown_ids_and_marks_own_likes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    let viewer = 500u64;
    // Read once first so the viewer's caches (recent set, Bloom filter) exist and are used.
    for p in 1..=20u64 {
        app.post(p, 9, false).await;
    }
    let ids: Vec<String> = (1..=20u64).rev().map(|p| p.to_string()).collect();
    let path = format!("/v1/posts?ids={},999999", ids.join(","));
    let token = app.user(viewer);
    let (st, v) = app.call(Method::GET, &path, Some(&token), None).await;
    assert_eq!(st, StatusCode::OK);
    assert!(v["posts"].as_array().expect("posts").iter().all(|p| p["viewer_has_liked"] == false));
    for p in [3u64, 7, 20] {
        app.like(viewer, p, true).await;
    }
    app.like(viewer, 7, false).await;
    // A like a moment before the read must show (read-your-writes).
    app.like(viewer, 11, true).await;
    let (st, v) = app.call(Method::GET, &path, Some(&token), None).await;
    assert_eq!(st, StatusCode::OK);
    let posts = v["posts"].as_array().expect("posts");
    let got: Vec<&str> = posts.iter().map(|p| p["post_id"].as_str().expect("id")).collect();
    let want: Vec<&str> = ids.iter().map(String::as_str).collect();
    assert_eq!(got, want, "request order, unknown dropped");
    for p in posts {
        let id: u64 = p["post_id"].as_str().and_then(|s| s.parse().ok()).expect("id");
        assert_eq!(p["viewer_has_liked"], [3u64, 11, 20].contains(&id), "post {id}: {p}");
        assert_eq!(p["author_id"], "9");
        assert_eq!(p["comment_count"], 0);
        assert_eq!(p["preview_comments"], serde_json::json!([]));
    }
    // Another viewer sees none of them as liked.
    let (_, other) = app.call(Method::GET, &path, Some(&app.user(501)), None).await;
    assert!(other["posts"].as_array().expect("posts").iter().all(|p| p["viewer_has_liked"] == false));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hidden_counts_are_absent_for_others_and_present_for_the_author() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, true).await; // the author hides the count
    app.post(2, 7, false).await;
    app.like(100, 1, true).await;
    app.like(100, 2, true).await;
    // The two likes may land in different aggregation windows: wait for both counts.
    app.wait_count(7, 1, 1).await;
    app.wait_count(7, 2, 1).await;
    let other = app.view(100, 1).await;
    assert!(other["like_count"].is_null() && other["like_count_text"].is_null(), "{other}");
    assert_eq!(other["liked_by"], serde_json::json!(["user100"]));
    assert_eq!(app.view(100, 2).await["like_count"], 1, "others see a visible count");
    // The viewer's own setting hides counts on everyone else's posts...
    let (st, v) = app
        .call(Method::PUT, "/v1/me/settings", Some(&app.user(100)), Some(r#"{"hide_like_counts":true}"#))
        .await;
    assert_eq!((st, v["hide_like_counts"].as_bool()), (StatusCode::OK, Some(true)));
    assert!(app.view(100, 2).await["like_count"].is_null());
    // ...but never from an author on their own post.
    app.call(Method::PUT, "/v1/me/settings", Some(&app.user(7)), Some(r#"{"hide_like_counts":true}"#)).await;
    let author = app.view(7, 1).await;
    assert_eq!((author["like_count"].as_i64(), author["like_count_text"].as_str()), (Some(1), Some("1")));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_the_right_4xx_with_a_json_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let user = app.user(5);
    let (st, v) = app.call(Method::GET, "/v1/posts/1", None, None).await;
    assert_error(st, &v, 401, "unauthenticated");
    let (st, v) = app.call(Method::GET, "/v1/posts/1", Some("not-a-token"), None).await;
    assert_error(st, &v, 401, "unauthenticated");
    let foreign = likewise_http::auth::TokenKeys::new(b"another-secret-entirely")
        .mint(likewise_core::ids::UserId(5), false, std::time::Duration::from_secs(60))
        .expect("mint");
    let (st, v) = app.call(Method::PUT, "/v1/posts/1/like", Some(&foreign), None).await;
    assert_error(st, &v, 401, "unauthenticated");
    let (st, v) = app.call(Method::GET, "/v1/posts/404", Some(&user), None).await;
    assert_error(st, &v, 404, "not_found");
    let (st, v) = app.call(Method::PUT, "/v1/posts/404/like", Some(&user), None).await;
    assert_error(st, &v, 404, "not_found");
    for path in ["/v1/posts/abc", "/v1/posts/-1", "/v1/posts/0", "/v1/posts/99999999999999999999999/like"] {
        let m = if path.ends_with("like") { Method::PUT } else { Method::GET };
        let (st, v) = app.call(m, path, Some(&user), None).await;
        assert_error(st, &v, 400, "invalid");
    }
    let many = (1..=101).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
    for q in [
        format!("/v1/posts?ids={many}"),
        "/v1/posts?ids=".into(),
        "/v1/posts".into(),
        "/v1/posts?ids=1,x".into(),
    ] {
        let (st, v) = app.call(Method::GET, &q, Some(&user), None).await;
        assert_error(st, &v, 400, "invalid");
    }
    let (st, v) = app.call(Method::PUT, "/v1/posts/2", Some(&user), Some(r#"{"author_id":"5"}"#)).await;
    assert_error(st, &v, 403, "forbidden");
    let (st, v) = app.call(Method::PUT, "/v1/users/5", Some(&user), Some(r#"{"username":"x"}"#)).await;
    assert_error(st, &v, 403, "forbidden");
    let (st, v) = app.call(Method::PUT, "/v1/users/5/follows/6", Some(&user), None).await;
    assert_error(st, &v, 403, "forbidden");
    let svc = app.service();
    let (st, v) =
        app.call(Method::PUT, "/v1/posts/2", Some(&svc), Some(r#"{"author_id":"5","extra":1}"#)).await;
    assert_error(st, &v, 422, "invalid");
    let (st, v) = app.call(Method::PUT, "/v1/posts/2", Some(&svc), Some(r#"{"author_id":"5""#)).await;
    assert_error(st, &v, 400, "invalid");
    let (st, v) = app.call(Method::PUT, "/v1/posts/2", Some(&svc), Some(r#"{"author_id":"x"}"#)).await;
    assert_error(st, &v, 422, "invalid");
    let (st, v) = app.call(Method::PUT, "/v1/users/5", Some(&svc), Some(r#"{"username":"  "}"#)).await;
    assert_error(st, &v, 422, "invalid");
    // The 64-character limit counts the name as sent (the schema's maxLength), padding too;
    // the stored name is trimmed.
    let padded = format!(r#"{{"username":" {}"}}"#, "a".repeat(64));
    let (st, v) = app.call(Method::PUT, "/v1/users/5", Some(&svc), Some(&padded)).await;
    assert_error(st, &v, 422, "invalid");
    let (st, v) = app.call(Method::PUT, "/v1/users/5", Some(&svc), Some(r#"{"username":" alice "}"#)).await;
    assert_eq!((st, v["username"].as_str()), (StatusCode::OK, Some("alice")), "{v}");
    let huge = format!(r#"{{"author_id":"5","pad":"{}"}}"#, "x".repeat(100_000));
    let (st, v) = app.call(Method::PUT, "/v1/posts/2", Some(&svc), Some(&huge)).await;
    assert_error(st, &v, 413, "too_large");
    let (st, v) = app.call(Method::GET, "/v1/posts/1/likers?cursor=forged", Some(&user), None).await;
    assert_error(st, &v, 400, "invalid");
    let (st, v) = app.call(Method::GET, "/v1/posts/1/likers?limit=0", Some(&user), None).await;
    assert_error(st, &v, 400, "invalid");
    let (st, v) = app.call(Method::GET, "/v1/nowhere", Some(&user), None).await;
    assert_error(st, &v, 404, "not_found");
    let (st, v) = app.call(Method::POST, "/v1/posts/1/like", Some(&user), None).await;
    assert_error(st, &v, 405, "method_not_allowed");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn likers_page_newest_first_and_liked_by_puts_followees_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    let svc = app.service();
    app.post(1, 7, false).await;
    for (id, name) in [(11u64, "alice"), (12, "bob"), (13, "carol"), (14, "dave"), (15, "erin")] {
        let body = format!(r#"{{"username":"{name}"}}"#);
        let (st, _) = app.call(Method::PUT, &format!("/v1/users/{id}"), Some(&svc), Some(&body)).await;
        assert_eq!(st, StatusCode::OK);
    }
    for u in 11..=15u64 {
        app.like(u, 1, true).await;
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    let (st, _) = app.call(Method::PUT, "/v1/users/99/follows/11", Some(&svc), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    app.wait_count(7, 1, 5).await;
    let v = app.view(99, 1).await;
    assert_eq!(v["liked_by"], serde_json::json!(["alice", "erin", "dave"]), "followee first, then newest");
    let (st, _) = app.call(Method::DELETE, "/v1/users/99/follows/11", Some(&svc), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    assert_eq!(app.view(99, 1).await["liked_by"], serde_json::json!(["erin", "dave", "carol"]));

    let token = app.user(99);
    let (_, p1) = app.call(Method::GET, "/v1/posts/1/likers?limit=2", Some(&token), None).await;
    let names = |v: &serde_json::Value| -> Vec<String> {
        v["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| i["username"].as_str().expect("name").to_string())
            .collect()
    };
    assert_eq!(names(&p1), ["erin", "dave"]);
    let cursor = p1["next_cursor"].as_str().expect("cursor");
    let (_, p2) = app
        .call(Method::GET, &format!("/v1/posts/1/likers?limit=2&cursor={cursor}"), Some(&token), None)
        .await;
    assert_eq!(names(&p2), ["carol", "bob"]);
    let cursor2 = p2["next_cursor"].as_str().expect("cursor");
    let (_, p3) = app
        .call(Method::GET, &format!("/v1/posts/1/likers?limit=2&cursor={cursor2}"), Some(&token), None)
        .await;
    assert_eq!(names(&p3), ["alice"]);
    assert!(p3["next_cursor"].is_null());
    assert!(p1["items"][0]["liked_at"].as_str().is_some_and(|t| t.ends_with('Z')));
    // A cursor from another post's list is rejected.
    app.post(2, 7, false).await;
    let (st, v) =
        app.call(Method::GET, &format!("/v1/posts/2/likers?cursor={cursor}"), Some(&token), None).await;
    assert_error(st, &v, 400, "invalid");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_restart_keeps_every_like_and_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    for u in 1..=30u64 {
        app.like(u, 1, true).await;
    }
    app.like(3, 1, false).await;
    app.stop_for_restart().await; // no waiting for the aggregator: shutdown must drain it
    let app = TestApp::start(dir.path()).await;
    let v = app.view(7, 1).await;
    assert_eq!(v["like_count"], 29, "{v}");
    assert_eq!(app.view(5, 1).await["viewer_has_liked"], true);
    assert_eq!(app.view(3, 1).await["viewer_has_liked"], false);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_routes_answer_without_a_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    let (st, v) = app.call(Method::GET, "/healthz", None, None).await;
    assert_eq!((st, v["status"].as_str()), (StatusCode::OK, Some("ok")));
    // Every dependency is named with its state: the storage alone on the embedded engine;
    // the shared cache and the event stream too on the scale-out engines.
    assert_eq!(v["checks"]["storage"], "ok", "{v}");
    let names: Vec<&String> = v["checks"].as_object().expect("checks").keys().collect();
    let want = if common::scaled_out() { vec!["cache", "storage", "stream"] } else { vec!["storage"] };
    assert_eq!(names, want, "{v}");
    let (st, doc) = app.call(Method::GET, "/openapi.json", None, None).await;
    assert_eq!(st, StatusCode::OK);
    for path in [
        "/v1/posts",
        "/v1/posts/{post_id}",
        "/v1/posts/{post_id}/like",
        "/v1/posts/{post_id}/likers",
        "/v1/users/{user_id}",
        "/v1/users/{user_id}/follows/{other_id}",
        "/v1/me/settings",
        "/healthz",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} missing from OpenAPI");
    }
    app.post(1, 7, false).await;
    app.like(2, 1, true).await;
    let (st, _, _) = app.call_full(Method::GET, "/metrics", None, None).await;
    assert_eq!(st, StatusCode::OK);
    let req = hyper::Request::get(format!("{}/metrics", app.base))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .expect("req");
    let resp = app.client.request(req).await.expect("metrics");
    let text = http_body_util::BodyExt::collect(resp.into_body()).await.expect("body").to_bytes();
    let text = String::from_utf8_lossy(&text);
    for m in [
        "likewise_http_requests_total",
        "likewise_http_request_duration_seconds",
        "likewise_group_commit_batch_size",
        "likewise_group_commit_fsync_seconds",
        "likewise_cache_capacity{cache=\"posts\"}",
    ] {
        assert!(text.contains(m), "{m} missing from /metrics");
    }
    // Memory gauges: the post just read is cached, so the posts cache holds bytes.
    let gauge = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse::<f64>().ok()))
            .unwrap_or_else(|| panic!("{name} missing from /metrics"))
    };
    assert!(gauge("likewise_cache_entries{cache=\"posts\"} ") >= 1.0);
    assert!(gauge("likewise_cache_bytes{cache=\"posts\"} ") > 0.0);
    // The token this test sent was verified once and cached.
    assert!(gauge("likewise_cache_entries{cache=\"verified_tokens\"} ") >= 1.0);
    if !common::scaled_out() {
        assert!(gauge("likewise_store_block_cache_capacity_bytes ") > 0.0);
        assert!(gauge("likewise_store_write_buffer_bytes ") > 0.0);
        // Present (gauge() panics when a name is missing); zero until a table is on disk.
        assert!(gauge("likewise_store_pinned_bytes ") >= 0.0);
        // The like's event went through the in-memory tail of the log.
        assert!(gauge("likewise_cache_entries{cache=\"event_tail\"} ") >= 1.0);
        assert_eq!(gauge("likewise_cache_capacity{cache=\"event_tail\"} "), 262_144.0);
    }
    app.stop().await;
}

/// A like takes no body: none, or `{}`, likes; a body with fields is a 422 (unknown request
/// fields are rejected), malformed JSON a 400, and nothing is liked by either. `{}` is read,
/// so the connection stays open (a body left unread closes it after the answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_like_with_a_body_takes_only_an_empty_object() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(42, 7, false).await;
    let (st, c) = app
        .call(Method::POST, "/v1/posts/42/comments", Some(&app.user(7)), Some(r#"{"text":"a comment"}"#))
        .await;
    assert_eq!(st, StatusCode::CREATED, "{c}");
    let comment = c["comment_id"].as_str().expect("comment_id").to_string();
    for path in ["/v1/posts/42/like".to_string(), format!("/v1/comments/{comment}/like")] {
        for (body, status) in [
            (r#"{"x":1}"#, StatusCode::UNPROCESSABLE_ENTITY),
            (r#"{"liked":true}"#, StatusCode::UNPROCESSABLE_ENTITY),
            ("[1]", StatusCode::UNPROCESSABLE_ENTITY),
            ("{", StatusCode::BAD_REQUEST),
        ] {
            for method in [Method::PUT, Method::DELETE] {
                let (st, v) = app.call(method.clone(), &path, Some(&app.user(9)), Some(body)).await;
                assert_error(st, &v, status.as_u16(), "invalid");
            }
        }
        let (st, headers, v) = app.call_full(Method::PUT, &path, Some(&app.user(9)), Some("{}")).await;
        assert_eq!(
            (st, v["liked"].as_bool(), v["changed"].as_bool()),
            (StatusCode::OK, Some(true), Some(true)),
            "{path}"
        );
        assert!(headers.get("connection").is_none(), "{path}: {headers:?}");
        let (st, v) = app.call(Method::PUT, &path, Some(&app.user(10)), None).await;
        assert_eq!((st, v["changed"].as_bool()), (StatusCode::OK, Some(true)), "{path}: no body");
        let (st, v) = app.call(Method::DELETE, &path, Some(&app.user(10)), Some(" { } ")).await;
        assert_eq!((st, v["changed"].as_bool()), (StatusCode::OK, Some(true)), "{path}: unlike with {{}}");
    }
    let v = app.wait_count(7, 42, 1).await;
    assert_eq!(v["like_count_text"], "1", "only user 9's like of the post stands");
}
