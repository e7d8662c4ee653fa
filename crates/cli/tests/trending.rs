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
    // The fewer likes first: scores weigh one-minute buckets, and a minute ending between the
    // two posts' likes then only widens the gap (the other way round it could swap them).
    for user in 1_000..1_011 {
        app.like(user, 46, true).await;
    }
    for user in 1_000..1_012 {
        app.like(user, 45, true).await;
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

/// (post, score) of the ranking of `window` as `viewer` sees it, best first (`None`: hidden).
async fn placed(app: &TestApp, viewer: u64, window: &str) -> Vec<(u64, Option<f64>)> {
    let (st, v) =
        app.call(Method::GET, &format!("/v1/trending?window={window}"), Some(&app.user(viewer)), None).await;
    assert_eq!(st, 200, "{v}");
    let items = v["items"].as_array().expect("items");
    items
        .iter()
        .map(|i| (i["post_id"].as_str().expect("post_id").parse().expect("post id"), i["score"].as_f64()))
        .collect()
}

/// The order a viewer is shown, from the exact scores (`exact`, best first) and which posts'
/// counts are hidden from them: a hidden post at the power of two at or below its score,
/// after the posts shown in that bucket; hidden posts of a bucket by post ID.
fn bucketed(exact: &[(u64, Option<f64>)], hidden: impl Fn(u64) -> bool) -> Vec<u64> {
    let mut v: Vec<(f64, bool, u64)> = exact
        .iter()
        .map(|(p, s)| {
            let s = s.expect("the author sees every score");
            if hidden(*p) { (s.log2().floor().exp2(), true, *p) } else { (s, false, *p) }
        })
        .collect();
    v.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    v.into_iter().map(|(_, _, p)| p).collect()
}

/// A hidden like count does not leak through a post's place in trending: between posts shown
/// with 11 and 13 likes, a hidden post with 12 would give its count away, so it is placed by
/// the power of two its score falls in (here below all of them). A viewer who hides every
/// count sees every other post placed so: the list then orders buckets, then post IDs, and
/// tells them nothing finer about any count.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hidden_like_count_is_not_given_away_by_its_place_in_trending() {
    let dir = tempfile::tempdir().expect("tmp");
    let app = TestApp::start(dir.path()).await;
    let (author, stranger, hider) = (100, 5_000, 5_001);
    // Posts 1..=5 show 10..=14 likes; post 6 hides its 12.
    let minute_before_likes =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs() / 60;
    for (post, likes) in (1..=5).zip(10..=14u64) {
        app.post(post, author, false).await;
        for user in 1_000..1_000 + likes {
            app.like(user, post, true).await;
        }
    }
    app.post(6, author, true).await;
    for user in 1_000..1_012 {
        app.like(user, 6, true).await;
    }
    let (st, v) = app
        .call(Method::PUT, "/v1/me/settings", Some(&app.user(hider)), Some(r#"{"hide_like_counts":true}"#))
        .await;
    assert_eq!(st, 200, "{v}");
    let want = [("5", 14, 0), ("4", 13, 0), ("3", 12, 0), ("6", 12, 0), ("2", 11, 0), ("1", 10, 0)];
    let minute_after_likes =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs() / 60;
    // The author sees every count: by exact score, ties by post ID (6 after 3). Scores weigh
    // one-minute buckets: when a minute ended while the likes were sent, the later posts'
    // likes weigh more, and only the order by score (ties by post ID) and the counts hold.
    let same_minute = minute_after_likes == minute_before_likes;
    let in_order: Vec<(String, u64, u64)> = want.iter().map(|(p, l, c)| (p.to_string(), *l, *c)).collect();
    let mut as_set = in_order.clone();
    as_set.sort();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (hour, day) = (ranking(&app, author, "1h").await, ranking(&app, author, "24h").await);
        let mut ordered = true;
        for window in ["1h", "24h"] {
            let scored = placed(&app, author, window).await;
            ordered &= scored.windows(2).all(|w| {
                let (a, b) = (w[0].1.unwrap_or(0.0), w[1].1.unwrap_or(0.0));
                a > b || (a == b && w[0].0 < w[1].0)
            });
        }
        let (mut hour_set, mut day_set) = (hour.clone(), day.clone());
        hour_set.sort();
        day_set.sort();
        let exact = !same_minute || (hour == in_order && day == in_order);
        if ordered && exact && hour_set == as_set && day_set == as_set {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "trending is {hour:?} / {day:?}, want {want:?} (likes within one minute: {same_minute})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    for window in ["1h", "24h"] {
        // One set of scores for all three reads: the author's before and after agree.
        let (exact, theirs, hiders) = loop {
            let before = placed(&app, author, window).await;
            let theirs = placed(&app, stranger, window).await;
            let hiders = placed(&app, hider, window).await;
            if placed(&app, author, window).await == before {
                break (before, theirs, hiders);
            }
        };
        let ids = |v: &[(u64, Option<f64>)]| v.iter().map(|(p, _)| *p).collect::<Vec<_>>();
        assert_eq!(ids(&theirs), bucketed(&exact, |p| p == 6), "{window}: a stranger, from {exact:?}");
        assert_eq!(ids(&hiders), bucketed(&exact, |_| true), "{window}: a hider, from {exact:?}");
        let at = |p: u64| ids(&theirs).iter().position(|x| *x == p).expect("ranked");
        assert!(!(at(4) < at(6) && at(6) < at(2)), "{window}: 6 placed between 13 and 11 likes: {theirs:?}");
        assert_eq!(
            theirs.iter().find(|(p, _)| *p == 6).map(|(_, s)| *s),
            Some(None),
            "{window}: score hidden"
        );
        assert!(hiders.iter().all(|(_, s)| s.is_none()), "{window}: {hiders:?}");
    }
    app.stop().await;
}
