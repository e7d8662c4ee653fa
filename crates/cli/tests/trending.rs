//! `GET /v1/trending` through the API, on both engines (`LIKEWISE_TEST_BACKEND=postgres`):
//! likes and visible comments rank posts, undone likes count for nothing, and the consumer's
//! state survives a restart without counting an event twice. (How recency is weighed is
//! tested on the ranking itself, `likewise_core::trending`, with its own clock.)

mod common;

use common::{TestApp, assert_error};
use hyper::Method;
use serde_json::Value;
use std::time::{Duration, Instant};

/// (post, likes, comments) of the ranking as `viewer` sees it, best first.
async fn ranking(app: &TestApp, viewer: u64, window: &str) -> Vec<(String, u64, u64)> {
    let (st, v) =
        app.call(Method::GET, &format!("/v1/trending?window={window}"), Some(&app.user(viewer)), None).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["next_cursor"], Value::Null);
    v["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            assert!(i["score"].as_f64().expect("score") > 0.0);
            (
                i["post_id"].as_str().expect("post_id").to_string(),
                i["likes"].as_u64().expect("likes"),
                i["comments"].as_u64().expect("comments"),
            )
        })
        .collect()
}

/// Wait until both windows rank `want` for a viewer who sees every count in it.
async fn wait_ranking(app: &TestApp, want: &[(&str, u64, u64)]) {
    wait_ranking_as(app, 1, want).await;
}

async fn wait_ranking_as(app: &TestApp, viewer: u64, want: &[(&str, u64, u64)]) {
    let want: Vec<(String, u64, u64)> = want.iter().map(|(p, l, c)| (p.to_string(), *l, *c)).collect();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (hour, day) = (ranking(app, viewer, "1h").await, ranking(app, viewer, "24h").await);
        if hour == want && day == want {
            return;
        }
        assert!(Instant::now() < deadline, "trending is {hour:?} / {day:?}, want {want:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn likes_and_visible_comments_rank_posts_and_survive_a_restart() {
    let dir = tempfile::tempdir().expect("tmp");
    let app = TestApp::start(dir.path()).await;
    for post in 1..=3 {
        app.post(post, 100 + post, false).await;
    }
    for user in 1_000..1_030 {
        app.like(user, 1, true).await;
    }
    for user in 2_000..2_010 {
        app.like(user, 2, true).await;
    }
    // Comments weigh twice a like: post 2 (10 likes, 15 comments) outranks post 1 (30 likes).
    for user in 3_000..3_015 {
        let (st, v) = app
            .call(Method::POST, "/v1/posts/2/comments", Some(&app.user(user)), Some(r#"{"text":"so good"}"#))
            .await;
        assert_eq!(st, 201, "{v}");
    }
    // Liked and unliked: counts for nothing.
    for user in 4_000..4_020 {
        app.like(user, 3, true).await;
        app.like(user, 3, false).await;
    }
    wait_ranking(&app, &[("2", 10, 15), ("1", 30, 0)]).await;

    // Bad parameters.
    for q in ["window=2h", "window=", "limit=0", "limit=101", "cursor=abc"] {
        let (st, v) = app.call(Method::GET, &format!("/v1/trending?{q}"), Some(&app.user(1)), None).await;
        assert_error(st, &v, 400, "invalid");
    }
    let (st, v) = app.call(Method::GET, "/v1/trending", None, None).await;
    assert_error(st, &v, 401, "unauthenticated");
    let (st, v) = app.call(Method::GET, "/v1/trending?limit=1", Some(&app.user(1)), None).await;
    assert_eq!((st.as_u16(), v["items"].as_array().map(Vec::len)), (200, Some(1)), "{v}");

    // A restart resumes from the saved state: nothing counted twice, nothing lost.
    app.stop_for_restart().await;
    let app = TestApp::start(dir.path()).await;
    wait_ranking(&app, &[("2", 10, 15), ("1", 30, 0)]).await;
    for user in 1_030..1_050 {
        app.like(user, 1, true).await;
    }
    wait_ranking(&app, &[("1", 50, 0), ("2", 10, 15)]).await;
    app.stop().await;
}

/// The `likes` of post `post` in the 1h ranking as `viewer` sees it, once the post is ranked.
async fn trending_likes(app: &TestApp, viewer: u64, post: &str) -> Value {
    let (st, v) = app.call(Method::GET, "/v1/trending?window=1h", Some(&app.user(viewer)), None).await;
    assert_eq!(st, 200, "{v}");
    let item = v["items"].as_array().expect("items").iter().find(|i| i["post_id"] == post).cloned();
    let item = item.unwrap_or_else(|| panic!("post {post} not in trending: {v}"));
    // The score weighs likes and comments: shown with a hidden count, it would give it away.
    assert_eq!(item["score"].is_null(), item["likes"].is_null(), "score and likes hidden together: {item}");
    item["likes"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hidden_like_count_is_null_in_trending_except_for_the_posts_author() {
    let dir = tempfile::tempdir().expect("tmp");
    let app = TestApp::start(dir.path()).await;
    let (author, stranger, hider) = (100, 5_000, 5_001);
    app.post(45, author, true).await;
    app.post(46, author, false).await;
    for user in 1_000..1_012 {
        app.like(user, 45, true).await;
    }
    for user in 1_000..1_011 {
        app.like(user, 46, true).await;
    }
    let (st, v) = app
        .call(Method::PUT, "/v1/me/settings", Some(&app.user(hider)), Some(r#"{"hide_like_counts":true}"#))
        .await;
    assert_eq!(st, 200, "{v}");
    wait_ranking_as(&app, author, &[("45", 12, 0), ("46", 11, 0)]).await;
    let hidden = Value::Null;
    // The post hides its count: null to others, shown to its author.
    assert_eq!(trending_likes(&app, stranger, "45").await, hidden);
    assert_eq!(trending_likes(&app, hider, "45").await, hidden);
    assert_eq!(trending_likes(&app, author, "45").await, serde_json::json!(12));
    // The viewer hides counts: null to them on others' posts only.
    assert_eq!(trending_likes(&app, stranger, "46").await, serde_json::json!(11));
    assert_eq!(trending_likes(&app, hider, "46").await, hidden);
    assert_eq!(app.view(stranger, 45).await["like_count"], hidden);
    app.stop().await;
}
