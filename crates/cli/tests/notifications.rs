//! Notifications through the API: hold-and-aggregate, cancellation, comment and reply
//! notifications, and the live SSE stream.

mod common;

use common::TestApp;
use http_body_util::BodyExt;
use hyper::{Method, StatusCode};
use serde_json::{Value, json};
use std::time::Duration;

/// A comment on post 1 by `user` (`body` as the API takes it); its ID.
async fn post_comment(app: &TestApp, user: u64, body: Value) -> String {
    let (st, c) =
        app.call(Method::POST, "/v1/posts/1/comments", Some(&app.user(user)), Some(&body.to_string())).await;
    assert_eq!(st, StatusCode::CREATED, "{c}");
    c["comment_id"].as_str().expect("id").to_string()
}

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

async fn put_prefs(app: &TestApp, user: u64, body: &str) -> (StatusCode, Value) {
    app.call(Method::PUT, "/v1/me/notification-settings", Some(&app.user(user)), Some(body)).await
}

/// Wait until `user` has an item of `kind`, and return it. Items are released in log order
/// (each after the same hold), so once a later action's item is there, every earlier action
/// was either delivered or muted: this is how the test knows a muted one is not just late.
async fn wait_item(app: &TestApp, user: u64, kind: &str) -> Value {
    app.wait_until(|| async { inbox(app, user).await.iter().any(|i| i["kind"] == kind) }).await;
    inbox(app, user).await.into_iter().find(|i| i["kind"] == kind).expect("item")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notification_settings_mute_per_kind_and_by_follows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await; // the author under test
    app.post(2, 8, false).await; // a witness with default settings
    let svc = app.service();

    // Defaults, partial updates, and junk.
    let all = json!({"post_liked": "all", "comment_liked": "all", "commented": "all", "replied": "all"});
    let (st, v) = app.call(Method::GET, "/v1/me/notification-settings", Some(&app.user(7)), None).await;
    assert_eq!((st, &v), (StatusCode::OK, &all));
    let (st, v) = put_prefs(&app, 7, "{}").await;
    assert_eq!((st, &v), (StatusCode::OK, &all));
    let (st, v) = put_prefs(&app, 7, r#"{"post_liked": "off", "commented": "off"}"#).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v, json!({"post_liked": "off", "comment_liked": "all", "commented": "off", "replied": "all"}));
    for junk in [r#"{"post_liked": "sometimes"}"#, r#"{"likes": "off"}"#, r#"{"post_liked": null, "x": 1}"#] {
        let (st, v) = put_prefs(&app, 7, junk).await;
        assert!(st.is_client_error(), "{junk}: {st} {v}");
        assert!(v["error"].is_string(), "{v}");
    }
    // The other settings keep the preferences, and the other way round.
    let (st, _) = app
        .call(Method::PUT, "/v1/me/settings", Some(&app.user(7)), Some(r#"{"hide_like_counts": true}"#))
        .await;
    assert_eq!(st, StatusCode::OK);
    let (_, v) = app.call(Method::GET, "/v1/me/notification-settings", Some(&app.user(7)), None).await;
    assert_eq!(v["post_liked"], "off");

    // Off: a like and a comment notify nobody (the witness's item shows the log got past them).
    app.like(20, 1, true).await;
    let (st, _) = app
        .call(Method::POST, "/v1/posts/1/comments", Some(&app.user(21)), Some(r#"{"text": "nice one"}"#))
        .await;
    assert_eq!(st, StatusCode::CREATED);
    app.like(22, 2, true).await;
    wait_item(&app, 8, "post_liked").await;
    assert!(inbox(&app, 7).await.is_empty(), "muted kinds made items: {:?}", inbox(&app, 7).await);

    // Following: only likes by people the author follows.
    app.call(Method::PUT, "/v1/users/7/follows/30", Some(&svc), None).await;
    let (st, _) = put_prefs(&app, 7, r#"{"post_liked": "following"}"#).await;
    assert_eq!(st, StatusCode::OK);
    app.like(31, 1, true).await; // not followed
    app.like(30, 1, true).await; // followed
    let item = wait_item(&app, 7, "post_liked").await;
    assert_eq!(item["actor_count"], 1, "{item}");

    // Back to all: what was muted is not replayed; new likes count again.
    let (st, _) = put_prefs(&app, 7, r#"{"post_liked": "all"}"#).await;
    assert_eq!(st, StatusCode::OK);
    app.like(32, 1, true).await;
    app.wait_until(|| async { inbox(&app, 7).await.iter().any(|i| i["actor_count"] == 2) }).await;
    app.like(23, 2, true).await; // the witness again: everything before is through
    app.wait_until(|| async { inbox(&app, 8).await.iter().any(|i| i["actor_count"] == 2) }).await;
    let items = inbox(&app, 7).await;
    assert_eq!(items.len(), 1, "the muted comment stays muted: {items:?}");
    assert_eq!(items[0]["actor_count"], 2, "20 and 31 are not replayed: {items:?}");
    app.stop().await;
}

/// The item of `kind` in `user`'s inbox, if any.
async fn item(app: &TestApp, user: u64, kind: &str) -> Option<Value> {
    inbox(app, user).await.into_iter().find(|i| i["kind"] == kind)
}

/// A `comment_liked` item is withdrawn when the comment is hidden and restored when it is
/// approved, as a `commented` item is; deleting the comment withdraws it for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn comment_liked_items_follow_the_comments_visibility() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let body = json!({"text": "a comment to like"}).to_string();
    let (st, c) = app.call(Method::POST, "/v1/posts/1/comments", Some(&app.user(20)), Some(&body)).await;
    assert_eq!(st, StatusCode::CREATED, "{c}");
    let cid = c["comment_id"].as_str().expect("id").to_string();
    for u in [30u64, 31] {
        let (st, v) =
            app.call(Method::PUT, &format!("/v1/comments/{cid}/like"), Some(&app.user(u)), None).await;
        assert_eq!(st, StatusCode::OK, "{v}");
    }
    app.wait_until(|| async { item(&app, 20, "comment_liked").await.is_some_and(|i| i["actor_count"] == 2) })
        .await;
    let moderate = |action: &'static str| {
        let (app, cid) = (&app, cid.clone());
        async move {
            let body = json!({ "action": action }).to_string();
            let path = format!("/v1/moderation/comments/{cid}");
            let (st, v) = app.call(Method::POST, &path, Some(&app.service()), Some(&body)).await;
            assert_eq!(st, StatusCode::OK, "{v}");
        }
    };
    moderate("hide").await;
    app.wait_until(|| async { item(&app, 20, "comment_liked").await.is_none() }).await;
    moderate("approve").await;
    app.wait_until(|| async { item(&app, 20, "comment_liked").await.is_some_and(|i| i["actor_count"] == 2) })
        .await;
    let (st, _) = app.call(Method::DELETE, &format!("/v1/comments/{cid}"), Some(&app.user(20)), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    app.wait_until(|| async { item(&app, 20, "comment_liked").await.is_none() }).await;
    app.stop().await;
}

/// Likers unliking after delivery, newest first: the item keeps naming the most recent
/// remaining actors, and its text always names someone while anyone remains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_keeps_naming_the_remaining_actors_after_unlikes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let svc = app.service();
    for u in 100..130u64 {
        let body = json!({ "username": format!("liker{u}") }).to_string();
        let (st, _) = app.call(Method::PUT, &format!("/v1/users/{u}"), Some(&svc), Some(&body)).await;
        assert_eq!(st, StatusCode::OK);
    }
    let named = |it: &Value| -> Vec<String> {
        it["actors"].as_array().expect("actors").iter().filter_map(Value::as_str).map(String::from).collect()
    };
    // 11 likers, then the 10 newest take theirs back one by one, each after delivery.
    for u in 100..111u64 {
        app.like(u, 1, true).await;
    }
    app.wait_until(|| async { inbox(&app, 7).await.first().is_some_and(|i| i["actor_count"] == 11) }).await;
    for (k, u) in (101..111u64).rev().enumerate() {
        app.like(u, 1, false).await;
        let left = 10 - k as i64;
        app.wait_until(|| async { inbox(&app, 7).await.first().is_some_and(|i| i["actor_count"] == left) })
            .await;
        let it = inbox(&app, 7).await.remove(0);
        assert!(!named(&it).is_empty(), "{left} actors left, none named: {it}");
    }
    let it = inbox(&app, 7).await.remove(0);
    assert_eq!(named(&it), ["liker100"], "{it}");
    assert_eq!(it["text"], "liker100 liked your post");
    // 30 likers, 10 of them unliking: two of the 20 left are still named.
    for u in 111..130u64 {
        app.like(u, 1, true).await;
    }
    app.wait_until(|| async { inbox(&app, 7).await.first().is_some_and(|i| i["actor_count"] == 20) }).await;
    for u in (120..130u64).rev() {
        app.like(u, 1, false).await;
    }
    app.wait_until(|| async { inbox(&app, 7).await.first().is_some_and(|i| i["actor_count"] == 10) }).await;
    let it = inbox(&app, 7).await.remove(0);
    let names = named(&it);
    assert_eq!(names.len(), 2, "{it}");
    assert!(names.iter().all(|n| (111..120).any(|u| *n == format!("liker{u}"))), "the newest left: {it}");
    assert!(it["text"].as_str().is_some_and(|t| t.ends_with("and 8 others liked your post")), "{it}");
    app.stop().await;
}

/// The `actor_count`s of the live pushes `author` receives while `likers` like post 1 in
/// waves, with `max` as `notifications.live_push_max_likes_per_minute`; and the inbox's final
/// count.
async fn pushes_during_a_like_storm(max: u64, likers: u64) -> (Vec<u64>, u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = common::test_config(dir.path());
    cfg.notifications.hold_ms = 100;
    cfg.notifications.live_push_max_likes_per_minute = max;
    let app = TestApp::start_with(cfg).await;
    app.post(1, 7, false).await;
    let req = hyper::Request::get(format!("{}/v1/me/notifications/stream", app.base))
        .header("authorization", format!("Bearer {}", app.user(7)))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .expect("req");
    let resp = app.client.request(req).await.expect("stream");
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    for wave in 0..likers / 5 {
        for u in 0..5 {
            app.like(1_000 + wave * 5 + u, 1, true).await;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    app.wait_until(|| async {
        inbox(&app, 7).await.first().is_some_and(|i| i["actor_count"].as_u64() == Some(likers))
    })
    .await;
    // Whatever is still on its way arrives within a notifier round or two.
    let mut seen = String::new();
    let until = tokio::time::Instant::now() + Duration::from_secs(2);
    while let Ok(Some(Ok(frame))) = tokio::time::timeout_at(until, body.frame()).await {
        if let Some(d) = frame.data_ref() {
            seen.push_str(&String::from_utf8_lossy(d));
        }
    }
    let counts = seen
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .filter(|v| v["kind"] == "post_liked")
        .filter_map(|v| v["actor_count"].as_u64())
        .collect();
    let total = inbox(&app, 7).await[0]["actor_count"].as_u64().expect("actor_count");
    app.stop().await;
    (counts, total)
}

/// docs/notifications.md: per-like live pushes stop for a post that gets more likes a
/// minute than the threshold, while the inbox aggregate keeps counting every liker. Without
/// the threshold, the same storm is pushed up to its last liker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_pushes_stop_above_the_per_post_like_rate_and_the_inbox_still_counts() {
    let (limited, total) = pushes_during_a_like_storm(10, 60).await;
    assert_eq!(total, 60, "the inbox item counts every liker");
    let first = *limited.first().expect("the first change is pushed");
    assert!(
        limited.iter().all(|c| *c <= first + 10),
        "no push after the 10th new liker of the minute: {limited:?}"
    );
    let (free, total) = pushes_during_a_like_storm(0, 60).await;
    assert_eq!(total, 60);
    assert_eq!(free.iter().max(), Some(&60), "without a threshold the last state is pushed: {free:?}");
}

/// A like of a comment deleted or hidden within the hold never notifies its author, and a
/// reply deleted together with its parent (within one notifier step) leaves the parent's
/// author no `replied` item. Each time a later witness shows the notifier got past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn likes_and_replies_of_comments_gone_within_the_hold_leave_no_item() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = common::test_config(dir.path());
    cfg.notifications.hold_ms = 1_500; // ample time to delete, even on a slow machine
    let app = TestApp::start_with(cfg).await;
    app.post(1, 7, false).await;
    app.post(2, 8, false).await; // the witness's post
    let comment = |user: u64, body: Value| post_comment(&app, user, body);
    let delete = |user: u64, cid: String| {
        let app = &app;
        async move {
            let path = format!("/v1/comments/{cid}");
            let (st, v) = app.call(Method::DELETE, &path, Some(&app.user(user)), None).await;
            assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
        }
    };
    let like_comment = |user: u64, cid: &str| {
        let (app, path) = (&app, format!("/v1/comments/{cid}/like"));
        async move {
            let (st, v) = app.call(Method::PUT, &path, Some(&app.user(user)), None).await;
            assert_eq!(st, StatusCode::OK, "{v}");
        }
    };
    // Deleted within the hold.
    let deleted = comment(20, json!({"text": "soon deleted"})).await;
    like_comment(24, &deleted).await;
    delete(20, deleted).await;
    // Hidden by a moderator within the hold.
    let hidden = comment(21, json!({"text": "soon hidden"})).await;
    like_comment(24, &hidden).await;
    let body = json!({"action": "hide"}).to_string();
    let path = format!("/v1/moderation/comments/{hidden}");
    let (st, v) = app.call(Method::POST, &path, Some(&app.service()), Some(&body)).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    app.like(25, 2, true).await;
    wait_item(&app, 8, "post_liked").await;
    for author in [20, 21] {
        assert_eq!(item(&app, author, "comment_liked").await, None, "user {author} was notified of a like");
    }

    // A reply, delivered; then the reply and its parent deleted one right after the other.
    let parent = comment(30, json!({"text": "a parent"})).await;
    let reply = comment(31, json!({"text": "a reply", "parent_id": parent})).await;
    wait_item(&app, 30, "replied").await;
    delete(31, reply).await;
    delete(30, parent).await;
    let (st, _) = app
        .call(Method::POST, "/v1/posts/2/comments", Some(&app.user(32)), Some(r#"{"text": "witness"}"#))
        .await;
    assert_eq!(st, StatusCode::CREATED);
    wait_item(&app, 8, "commented").await;
    assert_eq!(item(&app, 30, "replied").await, None, "the deleted reply still notifies");
    app.stop().await;
}

/// The preference in force when a like is made decides: `post_liked` turned off, a like,
/// and the kind turned on again within the hold leave no item; a like made after it is on
/// again notifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_like_made_while_its_kind_was_off_stays_muted_when_it_is_turned_on_within_the_hold() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = common::test_config(dir.path());
    cfg.notifications.hold_ms = 1_500; // ample time to turn the kind on again
    let app = TestApp::start_with(cfg).await;
    app.post(1, 7, false).await;
    app.post(2, 7, false).await;
    let (st, _) = put_prefs(&app, 7, r#"{"post_liked": "off"}"#).await;
    assert_eq!(st, StatusCode::OK);
    app.like(40, 1, true).await;
    let (st, v) = put_prefs(&app, 7, r#"{"post_liked": "all"}"#).await;
    assert_eq!((st, &v["post_liked"]), (StatusCode::OK, &json!("all")));
    app.like(41, 2, true).await; // made while on: notifies, after the muted one was due
    wait_item(&app, 7, "post_liked").await;
    let items = inbox(&app, 7).await;
    assert_eq!(items.len(), 1, "the like made while muted made an item: {items:?}");
    assert_eq!(items[0]["post_id"], "2", "{items:?}");
    app.stop().await;
}

/// Open `user`'s notification stream, resuming after `last_event_id` if given.
async fn open_stream(app: &TestApp, user: u64, last_event_id: Option<&str>) -> hyper::body::Incoming {
    let mut req = hyper::Request::get(format!("{}/v1/me/notifications/stream", app.base))
        .header("authorization", format!("Bearer {}", app.user(user)));
    if let Some(id) = last_event_id {
        req = req.header("last-event-id", id);
    }
    let req = req.body(http_body_util::Full::new(bytes::Bytes::new())).expect("req");
    let resp = app.client.request(req).await.expect("stream");
    assert_eq!(resp.status(), StatusCode::OK);
    resp.into_body()
}

/// The (id, data) of the stream's events, read until one's data satisfies `last`.
async fn events_until(
    body: &mut hyper::body::Incoming,
    last: impl Fn(&Value) -> bool,
) -> Vec<(String, Value)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let (mut text, mut events) = (String::new(), Vec::new());
    loop {
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            let field =
                |name: &str| block.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_string());
            if let (Some(id), Some(data)) = (field("id:"), field("data:")) {
                let data: Value = serde_json::from_str(&data).expect("event data");
                let done = last(&data);
                events.push((id, data));
                if done {
                    return events;
                }
            }
        }
        let frame =
            tokio::time::timeout_at(deadline, body.frame()).await.expect("events in time: {events:?}");
        if let Some(d) = frame.expect("open").expect("frame").data_ref() {
            text.push_str(&String::from_utf8_lossy(d));
        }
    }
}

/// A like held while a later comment is pushed, then released while the client is away:
/// resuming after the comment's event delivers the like, once, and not the comment again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_resumed_after_a_later_comment_delivers_a_like_released_meanwhile_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = common::test_config(dir.path());
    cfg.notifications.hold_ms = 1_500; // the comment is pushed while the like is held
    let app = TestApp::start_with(cfg).await;
    app.post(1, 7, false).await;
    app.post(2, 7, false).await;
    let mut body = open_stream(&app, 7, None).await;
    app.like(80, 1, true).await;
    let (st, _) = app
        .call(Method::POST, "/v1/posts/2/comments", Some(&app.user(81)), Some(r#"{"text": "first!"}"#))
        .await;
    assert_eq!(st, StatusCode::CREATED);
    let seen = events_until(&mut body, |d| d["kind"] == "commented").await;
    assert!(seen.iter().all(|(_, d)| d["kind"] != "post_liked"), "the like is still held: {seen:?}");
    let (comment_event_id, _) = seen.last().expect("the comment's event").clone();
    drop(body); // away while the like is released
    wait_item(&app, 7, "post_liked").await;
    let mut body = open_stream(&app, 7, Some(&comment_event_id)).await;
    // A witness after the like, pushed live to the resumed stream.
    let (st, _) = app
        .call(Method::POST, "/v1/posts/1/comments", Some(&app.user(82)), Some(r#"{"text": "witness"}"#))
        .await;
    assert_eq!(st, StatusCode::CREATED);
    let resumed = events_until(&mut body, |d| d["kind"] == "commented" && d["post_id"] == "1").await;
    let kinds: Vec<(String, String)> = resumed
        .iter()
        .map(|(_, d)| (d["kind"].as_str().unwrap_or("").into(), d["post_id"].as_str().unwrap_or("").into()))
        .collect();
    let want = [("post_liked", "1"), ("commented", "1")].map(|(k, p)| (k.to_string(), p.to_string()));
    assert_eq!(kinds, want, "the released like once, then the witness; not the comment again: {resumed:?}");
    let ids: Vec<&String> = resumed.iter().map(|(id, _)| id).collect();
    assert!(ids.iter().all(|id| **id != comment_event_id), "{ids:?}");
    drop(body);
    app.stop().await;
}

/// A reply to a reply notifies the top-level comment's author and the @mentioned author of
/// the reply it answers; deleting it withdraws both items, though the deleted reply's record
/// (which names the mentioned user) is gone by the time the notifier reads the deletion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_reply_withdraws_its_mention_as_well_as_its_reply() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    app.post(2, 8, false).await; // the witness's post
    let comment = |user: u64, body: Value| post_comment(&app, user, body);
    let top = comment(30, json!({"text": "a parent"})).await;
    let first = comment(31, json!({"text": "a first reply", "parent_id": top})).await;
    wait_item(&app, 30, "replied").await;
    let answer = comment(32, json!({"text": "an answer to the first reply", "parent_id": first})).await;
    app.wait_until(|| async {
        let names = |i: Option<Value>| i.map(|i| i["actors"].clone());
        names(item(&app, 31, "replied").await) == Some(json!(["user32"]))
            && names(item(&app, 30, "replied").await) == Some(json!(["user32", "user31"]))
    })
    .await;
    let (st, v) =
        app.call(Method::DELETE, &format!("/v1/comments/{answer}"), Some(&app.user(32)), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
    let (st, _) = app
        .call(Method::POST, "/v1/posts/2/comments", Some(&app.user(33)), Some(r#"{"text": "witness"}"#))
        .await;
    assert_eq!(st, StatusCode::CREATED);
    wait_item(&app, 8, "commented").await;
    assert_eq!(item(&app, 31, "replied").await, None, "the deleted reply still notifies its mention");
    let parent_item = item(&app, 30, "replied").await.expect("the first reply still notifies");
    assert_eq!(parent_item["actors"], json!(["user31"]), "{parent_item}");
    app.stop().await;
}

/// The @mention of a reply to a reply is withdrawn when the reply is deleted or hidden after
/// a restart: the events of the reply name the mentioned user, so neither the deleted
/// reply's record (gone) nor the notifier's memory of it (gone with the process) is needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_deleted_or_hidden_after_a_restart_withdraws_its_mention() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    app.post(2, 8, false).await; // the witness's post
    let comment = |user: u64, body: Value| post_comment(&app, user, body);
    let top = comment(30, json!({"text": "a parent"})).await;
    let first = comment(31, json!({"text": "a first reply", "parent_id": top})).await;
    let deleted = comment(32, json!({"text": "an answer to the first reply", "parent_id": first})).await;
    let hidden = comment(34, json!({"text": "another answer to it", "parent_id": first})).await;
    let counted = |i: Option<Value>| i.map(|i| i["actor_count"].clone());
    app.wait_until(|| async {
        counted(item(&app, 31, "replied").await) == Some(json!(2))
            && counted(item(&app, 30, "replied").await) == Some(json!(3))
    })
    .await;
    app.stop_for_restart().await;

    let app = TestApp::start(dir.path()).await;
    delete_comment(&app, 32, &deleted).await;
    witness(&app, 40, 1).await;
    let mention = item(&app, 31, "replied").await.expect("the other answer still mentions 31");
    assert_eq!(
        mention["actors"],
        json!(["user34"]),
        "the deleted reply still notifies its mention: {mention}"
    );
    assert_eq!(counted(item(&app, 30, "replied").await), Some(json!(2)), "the deleted reply is withdrawn");
    let (st, v) = app
        .call(
            Method::POST,
            &format!("/v1/moderation/comments/{hidden}"),
            Some(&app.service()),
            Some(r#"{"action": "hide"}"#),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    witness(&app, 41, 2).await;
    assert_eq!(item(&app, 31, "replied").await, None, "the hidden reply still notifies its mention");
    let parent_item = item(&app, 30, "replied").await.expect("the first reply still notifies");
    assert_eq!(parent_item["actors"], json!(["user31"]), "{parent_item}");
    app.stop().await;
}

/// Delete comment `cid` as `user`.
async fn delete_comment(app: &TestApp, user: u64, cid: &str) {
    let (st, v) = app.call(Method::DELETE, &format!("/v1/comments/{cid}"), Some(&app.user(user)), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
}

/// A comment on post 2 (by user 8) by `user`, then wait until its author's `commented` item
/// counts `n`: the notifier has read every earlier event.
async fn witness(app: &TestApp, user: u64, n: u64) {
    let (st, v) = app
        .call(Method::POST, "/v1/posts/2/comments", Some(&app.user(user)), Some(r#"{"text": "witness"}"#))
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    app.wait_until(|| async { item(app, 8, "commented").await.is_some_and(|i| i["actor_count"] == n) }).await;
}

/// A user who liked two comments of one author on one post stays in the author's
/// `comment_liked` item when one of the comments is deleted: their like of the other stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_one_liked_comment_keeps_the_likes_of_the_authors_other_comment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    app.post(2, 8, false).await; // the witness's post
    let first = post_comment(&app, 20, json!({"text": "a first comment"})).await;
    let second = post_comment(&app, 20, json!({"text": "a second comment"})).await;
    for cid in [&first, &second] {
        let (st, v) =
            app.call(Method::PUT, &format!("/v1/comments/{cid}/like"), Some(&app.user(24)), None).await;
        assert_eq!(st, StatusCode::OK, "{v}");
    }
    app.wait_until(|| async { item(&app, 20, "comment_liked").await.is_some() }).await;
    delete_comment(&app, 20, &first).await;
    witness(&app, 40, 1).await;
    let it = item(&app, 20, "comment_liked").await.expect("the like of the second comment still notifies");
    assert_eq!((&it["actor_count"], &it["actors"]), (&json!(1), &json!(["user24"])), "{it}");
    // Deleting the second one withdraws the last like.
    delete_comment(&app, 20, &second).await;
    witness(&app, 41, 2).await;
    assert_eq!(item(&app, 20, "comment_liked").await, None);
    app.stop().await;
}

/// A user who replied twice to a comment stays in its author's `replied` item when one of
/// their replies is deleted, and the item stays after every other replier's reply is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_one_of_two_replies_keeps_the_replier_in_the_item() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    app.post(2, 8, false).await; // the witness's post
    let top = post_comment(&app, 30, json!({"text": "a parent"})).await;
    let first = post_comment(&app, 31, json!({"text": "a first reply", "parent_id": top})).await;
    let _second = post_comment(&app, 31, json!({"text": "a second reply", "parent_id": top})).await;
    let other = post_comment(&app, 32, json!({"text": "another reply", "parent_id": top})).await;
    app.wait_until(|| async { item(&app, 30, "replied").await.is_some_and(|i| i["actor_count"] == 2) }).await;
    delete_comment(&app, 31, &first).await;
    witness(&app, 40, 1).await;
    let it = item(&app, 30, "replied").await.expect("the replied item");
    assert_eq!(it["actor_count"], 2, "the second reply of user31 stands: {it}");
    delete_comment(&app, 32, &other).await;
    witness(&app, 41, 2).await;
    let it = item(&app, 30, "replied").await.expect("the second reply of user31 still notifies");
    assert_eq!((&it["actor_count"], &it["actors"]), (&json!(1), &json!(["user31"])), "{it}");
    app.stop().await;
}

/// `post_liked: following` is decided when the like is made (read by the notifier), not when
/// its hold ends: a like by someone the author starts following within the hold stays muted,
/// and a like by someone they stop following within the hold notifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn following_is_decided_by_the_follows_when_the_like_is_made() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = common::test_config(dir.path());
    cfg.notifications.hold_ms = 3_000; // ample time to follow and unfollow within it
    let app = TestApp::start_with(cfg).await;
    app.post(1, 7, false).await;
    app.post(2, 7, false).await;
    let follow = |method: Method, other: u64| {
        let app = &app;
        async move {
            let path = format!("/v1/users/7/follows/{other}");
            let (st, v) = app.call(method, &path, Some(&app.service()), None).await;
            assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
        }
    };
    follow(Method::PUT, 32).await;
    let (st, _) = put_prefs(&app, 7, r#"{"post_liked": "following"}"#).await;
    assert_eq!(st, StatusCode::OK);
    app.like(31, 1, true).await; // not followed when liking...
    app.like(32, 1, true).await; // followed when liking...
    // A comment, notified at once: the notifier has read the likes, which are held.
    post_comment(&app, 40, json!({"text": "after the likes"})).await;
    wait_item(&app, 7, "commented").await;
    follow(Method::PUT, 31).await; // ...followed within the hold
    follow(Method::DELETE, 32).await; // ...unfollowed within the hold
    app.like(31, 2, true).await; // a witness, followed now: due after the two before
    app.wait_until(|| async { inbox(&app, 7).await.iter().any(|i| i["post_id"] == "2") }).await;
    let items = inbox(&app, 7).await;
    let liked = items.iter().find(|i| i["kind"] == "post_liked" && i["post_id"] == "1");
    let liked = liked.expect("the like of user32, followed when liking");
    assert_eq!((&liked["actor_count"], &liked["actors"]), (&json!(1), &json!(["user32"])), "{items:?}");
    app.stop().await;
}
