//! Comments through the API: keyset pages under concurrent inserts, two-level threads,
//! deletion placeholders, comment likes, permission checks and validation.

mod common;

use common::{TestApp, assert_error};
use hyper::{Method, StatusCode};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::Arc;

async fn comment(app: &TestApp, user: u64, post: u64, text: &str, parent: Option<&str>) -> Value {
    let body = match parent {
        Some(p) => json!({"text": text, "parent_id": p}),
        None => json!({"text": text}),
    };
    let (st, v) = app
        .call(
            Method::POST,
            &format!("/v1/posts/{post}/comments"),
            Some(&app.user(user)),
            Some(&body.to_string()),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    v
}

fn ids(v: &Value) -> Vec<u64> {
    v["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|c| c["comment_id"].as_str().and_then(|s| s.parse().ok()).expect("id"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newest_first_pages_never_repeat_or_skip_while_comments_arrive() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = Arc::new(TestApp::start(dir.path()).await);
    app.post(1, 7, false).await;
    let mut first: Vec<u64> = Vec::new();
    for i in 0..300u64 {
        let v = comment(&app, 100 + i % 50, 1, &format!("comment number {i}"), None).await;
        first.push(v["comment_id"].as_str().and_then(|s| s.parse().ok()).expect("id"));
    }
    let writer = {
        let app = app.clone();
        tokio::spawn(async move {
            for i in 0..60u64 {
                comment(&app, 200 + i, 1, &format!("late comment {i}"), None).await;
            }
        })
    };
    let token = app.user(9);
    let mut seen: Vec<u64> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/posts/1/comments?order=newest&limit=25&cursor={c}"),
            None => "/v1/posts/1/comments?order=newest&limit=25".to_string(),
        };
        let (st, v) = app.call(Method::GET, &path, Some(&token), None).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        seen.extend(ids(&v));
        match v["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    writer.await.expect("writer");
    assert!(seen.windows(2).all(|w| w[0] > w[1]), "IDs strictly descending");
    let set: HashSet<u64> = seen.iter().copied().collect();
    assert_eq!(set.len(), seen.len(), "no repeats");
    assert!(first.iter().all(|id| set.contains(id)), "none of the first 300 skipped");
    let (_, v) = app.call(Method::GET, "/v1/posts/1", Some(&token), None).await;
    assert!(v["comment_count"].as_i64().is_some());
    app.wait_until(|| async { app.view(9, 1).await["comment_count"] == 360 }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_to_a_reply_lands_under_the_top_level_parent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let top = comment(&app, 10, 1, "top-level", None).await;
    let top_id = top["comment_id"].as_str().expect("id").to_string();
    let r1 = comment(&app, 11, 1, "first reply", Some(&top_id)).await;
    let r1_id = r1["comment_id"].as_str().expect("id").to_string();
    let r2 = comment(&app, 12, 1, "@user11 reply to the reply", Some(&r1_id)).await;
    assert_eq!(r1["parent_id"], top_id.as_str());
    assert!(r1["reply_to_user_id"].is_null());
    assert_eq!(r2["parent_id"], top_id.as_str(), "a reply to a reply goes under the top-level parent");
    assert_eq!(r2["reply_to_user_id"], "11");
    let token = app.user(9);
    let (st, replies) =
        app.call(Method::GET, &format!("/v1/comments/{top_id}/replies"), Some(&token), None).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(
        ids(&replies),
        vec![ids(&json!({"items": [r1]}))[0], ids(&json!({"items": [r2]}))[0]],
        "oldest first"
    );
    app.wait_until(|| async {
        let (_, v) = app.call(Method::GET, "/v1/posts/1/comments?order=oldest", Some(&token), None).await;
        v["items"][0]["reply_count"] == 2
    })
    .await;
    // Only top-level comments in the post's list; all three counted.
    let (_, list) = app.call(Method::GET, "/v1/posts/1/comments?order=oldest", Some(&token), None).await;
    assert_eq!(list["items"].as_array().map(Vec::len), Some(1));
    app.wait_until(|| async { app.view(9, 1).await["comment_count"] == 3 }).await;

    // Deleting the parent leaves a placeholder; deleting a leaf removes it.
    let (st, _) =
        app.call(Method::DELETE, &format!("/v1/comments/{top_id}"), Some(&app.user(10)), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let (_, list) = app.call(Method::GET, "/v1/posts/1/comments?order=oldest", Some(&token), None).await;
    assert_eq!(
        (list["items"][0]["status"].as_str(), list["items"][0]["text"].as_str()),
        (Some("deleted"), Some(""))
    );
    let leaf = comment(&app, 13, 1, "a leaf", None).await;
    let leaf_id = leaf["comment_id"].as_str().expect("id");
    let (st, v) =
        app.call(Method::DELETE, &format!("/v1/comments/{leaf_id}"), Some(&app.user(99)), None).await;
    assert_error(st, &v, 403, "forbidden");
    let (st, _) =
        app.call(Method::DELETE, &format!("/v1/comments/{leaf_id}"), Some(&app.user(7)), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT, "the post's author may delete");
    let (_, list) = app.call(Method::GET, "/v1/posts/1/comments?order=oldest", Some(&token), None).await;
    assert_eq!(list["items"].as_array().map(Vec::len), Some(1), "the leaf is gone");
    app.wait_until(|| async { app.view(9, 1).await["comment_count"] == 2 }).await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn comment_likes_are_idempotent_and_counted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let c = comment(&app, 10, 1, "like me", None).await;
    let id = c["comment_id"].as_str().expect("id");
    for u in 20..30u64 {
        let (st, v) =
            app.call(Method::PUT, &format!("/v1/comments/{id}/like"), Some(&app.user(u)), None).await;
        assert_eq!((st, v["changed"].as_bool()), (StatusCode::OK, Some(true)));
        let (_, v) =
            app.call(Method::PUT, &format!("/v1/comments/{id}/like"), Some(&app.user(u)), None).await;
        assert_eq!(v["changed"], false);
    }
    let (_, v) =
        app.call(Method::DELETE, &format!("/v1/comments/{id}/like"), Some(&app.user(20)), None).await;
    assert_eq!((v["liked"].as_bool(), v["changed"].as_bool()), (Some(false), Some(true)));
    let token = app.user(21);
    app.wait_until(|| async {
        let (_, v) = app.call(Method::GET, "/v1/posts/1/comments?order=newest", Some(&token), None).await;
        v["items"][0]["like_count"] == 9 && v["items"][0]["viewer_has_liked"] == true
    })
    .await;
    let (st, v) = app.call(Method::PUT, "/v1/comments/123456/like", Some(&token), None).await;
    assert_error(st, &v, 404, "not_found");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_comments_and_forbidden_comments_get_a_4xx() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    app.post(2, 7, false).await;
    let other = comment(&app, 10, 2, "on post two", None).await;
    let other_id = other["comment_id"].as_str().expect("id");
    let token = app.user(10);
    let cases = [
        (json!({"text": "   "}), 400),
        (json!({"text": "x".repeat(2201)}), 400),
        (json!({"text": "bell \u{7} char"}), 400),
        (json!({"text": "ok", "parent_id": "999999"}), 404),
        (json!({"text": "ok", "parent_id": other_id}), 400),
        (json!({"text": "ok", "extra": true}), 422),
    ];
    for (body, want) in cases {
        let (st, v) =
            app.call(Method::POST, "/v1/posts/1/comments", Some(&token), Some(&body.to_string())).await;
        assert_error(st, &v, want, if want == 404 { "not_found" } else { "invalid" });
    }
    let ok = comment(&app, 10, 1, &"y".repeat(2200), None).await;
    assert_eq!(ok["text"].as_str().map(|t| t.chars().count()), Some(2200));
    // The limit counts the text after trimming (docs/api.md): padding does not count, and is not kept.
    let padded = comment(&app, 10, 1, &format!("  {}\n ", "z".repeat(2200)), None).await;
    assert_eq!(padded["text"].as_str(), Some("z".repeat(2200).as_str()));
    let body = json!({ "text": format!(" {} ", "z".repeat(2201)) }).to_string();
    let (st, v) = app.call(Method::POST, "/v1/posts/1/comments", Some(&token), Some(&body)).await;
    assert_error(st, &v, 400, "invalid");
    let (st, v) =
        app.call(Method::POST, "/v1/posts/404/comments", Some(&token), Some(r#"{"text":"hi"}"#)).await;
    assert_error(st, &v, 404, "not_found");
    for q in ["order=sideways", "order=newest&cursor=forged", "order=newest&limit=101"] {
        let (st, v) = app.call(Method::GET, &format!("/v1/posts/1/comments?{q}"), Some(&token), None).await;
        assert_error(st, &v, 400, "invalid");
    }
    // A cursor of the oldest-first list is not valid for newest-first.
    for i in 0..3 {
        comment(&app, 10, 1, &format!("c{i}"), None).await;
    }
    let (_, v) = app.call(Method::GET, "/v1/posts/1/comments?order=oldest&limit=1", Some(&token), None).await;
    let c = v["next_cursor"].as_str().expect("cursor");
    let (st, v) = app
        .call(Method::GET, &format!("/v1/posts/1/comments?order=newest&cursor={c}"), Some(&token), None)
        .await;
    assert_error(st, &v, 400, "invalid");
    // Comments off and followers-only.
    let svc = app.service();
    app.call(Method::PUT, "/v1/posts/3", Some(&svc), Some(r#"{"author_id":"7","comments":"off"}"#)).await;
    let (st, v) =
        app.call(Method::POST, "/v1/posts/3/comments", Some(&token), Some(r#"{"text":"hi"}"#)).await;
    assert_error(st, &v, 403, "forbidden");
    app.call(Method::PUT, "/v1/posts/4", Some(&svc), Some(r#"{"author_id":"7","comments":"followers"}"#))
        .await;
    let (st, v) =
        app.call(Method::POST, "/v1/posts/4/comments", Some(&token), Some(r#"{"text":"hi"}"#)).await;
    assert_error(st, &v, 403, "forbidden");
    let (st, _) = app.call(Method::PUT, "/v1/users/10/follows/7", Some(&svc), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let (st, v) =
        app.call(Method::POST, "/v1/posts/4/comments", Some(&token), Some(r#"{"text":"hi"}"#)).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    app.stop().await;
}

/// Everything `viewer` can page through on `post`: its top-level comments, each with its
/// `reply_count` and the replies listed under it.
async fn pageable(app: &TestApp, viewer: u64, post: u64) -> Vec<(Value, Vec<Value>)> {
    let token = app.user(viewer);
    let (st, tops) = app
        .call(Method::GET, &format!("/v1/posts/{post}/comments?order=oldest&limit=100"), Some(&token), None)
        .await;
    assert_eq!(st, StatusCode::OK, "{tops}");
    let mut out = Vec::new();
    for t in tops["items"].as_array().expect("items") {
        let path = format!("/v1/comments/{}/replies?limit=100", t["comment_id"].as_str().expect("id"));
        let (st, r) = app.call(Method::GET, &path, Some(&token), None).await;
        assert_eq!(st, StatusCode::OK, "{r}");
        out.push((t.clone(), r["items"].as_array().expect("items").clone()));
    }
    out
}

/// Wait until `post`'s counts are `want` comments and equal, for `viewer`, what they can page
/// through: `comment_count` the visible comments and replies, each `reply_count` its replies.
async fn counts_settle_at(app: &TestApp, viewer: u64, post: u64, want: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let threads = pageable(app, viewer, post).await;
        let visible = |c: &Value| usize::from(c["status"] == "visible");
        let seen: usize =
            threads.iter().map(|(t, r)| visible(t) + r.iter().map(visible).sum::<usize>()).sum();
        let replies_ok = threads.iter().all(|(t, r)| t["reply_count"].as_u64() == Some(r.len() as u64));
        let counted = app.view(viewer, post).await["comment_count"].as_u64();
        if counted == Some(seen as u64) && seen == want && replies_ok {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "comment_count {counted:?}, pageable {seen}, want {want}: {threads:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A moderator's decision on a comment (service role).
async fn moderate(app: &TestApp, comment: &Value, action: &str) -> (StatusCode, Value) {
    let body = json!({ "action": action }).to_string();
    let path = format!("/v1/moderation/comments/{}", cid(comment));
    app.call(Method::POST, &path, Some(&app.service()), Some(&body)).await
}

fn cid(v: &Value) -> &str {
    v["comment_id"].as_str().expect("comment_id")
}

/// Threads follow their parent: while a moderator holds a top-level comment, its replies are
/// a 404 to everyone else (read, like, report, reply) and not counted; its own author still
/// sees the thread and a reply's author still reaches their reply; approving the parent
/// brings the replies back, counted, with the one written meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_under_a_held_parent_are_hidden_and_uncounted_until_it_is_approved() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let top = comment(&app, 10, 1, "a thought worth a thread", None).await;
    let r1 = comment(&app, 11, 1, "a first answer", Some(cid(&top))).await;
    comment(&app, 12, 1, "a second answer", Some(cid(&top))).await;
    counts_settle_at(&app, 9, 1, 3).await;
    let (st, v) = moderate(&app, &top, "hide").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    counts_settle_at(&app, 9, 1, 0).await;
    let (st, v) =
        app.call(Method::GET, &format!("/v1/comments/{}/replies", cid(&top)), Some(&app.user(9)), None).await;
    assert_error(st, &v, 404, "not_found");
    let like = format!("/v1/comments/{}/like", cid(&r1));
    let report = format!("/v1/comments/{}/reports", cid(&r1));
    let answer = json!({"text": "@user11 agreed", "parent_id": cid(&r1)}).to_string();
    for user in [9, 12] {
        let token = app.user(user);
        let (st, v) = app.call(Method::PUT, &like, Some(&token), None).await;
        assert_error(st, &v, 404, "not_found");
        let (st, v) = app.call(Method::POST, &report, Some(&token), Some(r#"{"reason":"spam"}"#)).await;
        assert_error(st, &v, 404, "not_found");
        let (st, v) = app.call(Method::POST, "/v1/posts/1/comments", Some(&token), Some(&answer)).await;
        assert_error(st, &v, 404, "not_found");
    }
    // The reply's own author still reaches it; the parent's author still sees the thread
    // (shadowed) and answers in it, uncounted.
    let (st, v) = app.call(Method::PUT, &like, Some(&app.user(11)), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    comment(&app, 10, 1, "anyone still here?", Some(cid(&top))).await;
    let own = pageable(&app, 10, 1).await;
    assert_eq!(own.iter().map(|(_, r)| r.len()).collect::<Vec<_>>(), vec![3], "{own:?}");
    counts_settle_at(&app, 9, 1, 0).await;
    let (st, v) = moderate(&app, &top, "approve").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    counts_settle_at(&app, 9, 1, 4).await;
    let (st, v) = app.call(Method::PUT, &like, Some(&app.user(9)), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    app.stop().await;
}

/// A restricted comment the post's author answers before approving it: the answer waits
/// with it, unseen by others and uncounted, and counts once the comment is approved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_under_a_restricted_comment_counts_once_the_post_author_approves_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let (st, _) = app.call(Method::PUT, "/v1/me/restricts/20", Some(&app.user(7)), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    comment(&app, 30, 1, "an ordinary comment", None).await;
    let held = comment(&app, 20, 1, "a restricted comment", None).await;
    let answer = comment(&app, 7, 1, "thanks, approving this", Some(cid(&held))).await;
    assert_eq!(answer["parent_id"], cid(&held));
    counts_settle_at(&app, 9, 1, 1).await;
    let seen = pageable(&app, 7, 1).await;
    assert_eq!(
        seen.iter().map(|(_, r)| r.len()).collect::<Vec<_>>(),
        vec![0, 1],
        "the post author sees both"
    );
    let (st, v) = app
        .call(Method::POST, &format!("/v1/comments/{}/approve", cid(&held)), Some(&app.user(7)), None)
        .await;
    assert_eq!((st, v["status"].as_str()), (StatusCode::OK, Some("visible")), "{v}");
    counts_settle_at(&app, 9, 1, 3).await;
    app.stop().await;
}

/// Every page of `order=top` for `viewer` (limit `limit`), in order.
async fn top_walk(app: &TestApp, post: u64, viewer: u64, limit: usize) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor = String::new();
    loop {
        let path = format!("/v1/posts/{post}/comments?order=top&limit={limit}{cursor}");
        let (st, v) = app.call(Method::GET, &path, Some(&app.user(viewer)), None).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        out.extend(v["items"].as_array().expect("items").iter().cloned());
        match v["next_cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => return out,
        }
    }
}

/// Every comment ID of `order=newest` for `viewer`.
async fn newest_ids(app: &TestApp, post: u64, viewer: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut cursor = String::new();
    loop {
        let path = format!("/v1/posts/{post}/comments?order=newest&limit=100{cursor}");
        let (st, v) = app.call(Method::GET, &path, Some(&app.user(viewer)), None).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        out.extend(ids(&v));
        match v["next_cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => return out,
        }
    }
}

fn id_of(c: &Value) -> u64 {
    c["comment_id"].as_str().and_then(|s| s.parse().ok()).expect("comment_id")
}

/// Ordinary text, different for each `i` (one author each, so no duplicate filter applies).
fn prose(i: u64) -> String {
    const A: [&str; 8] = ["morning", "garden", "river", "window", "kitchen", "harbor", "meadow", "library"];
    const B: [&str; 7] = ["quiet", "bright", "early", "lovely", "simple", "gentle", "useful"];
    const C: [&str; 5] = ["walk", "chat", "photo", "story", "visit"];
    format!("{} {} {} number {i}", B[(i % 7) as usize], A[(i / 7 % 8) as usize], C[(i / 56 % 5) as usize])
}

async fn comments_concurrently(
    app: &Arc<TestApp>,
    post: u64,
    users: std::ops::Range<u64>,
    text: fn(u64) -> String,
) {
    let users: Vec<u64> = users.collect();
    let mut tasks = Vec::new();
    for chunk in users.chunks(users.len().div_ceil(16).max(1)) {
        let (app, chunk) = (app.clone(), chunk.to_vec());
        tasks.push(tokio::spawn(async move {
            for u in chunk {
                comment(&app, u, post, &text(u), None).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("join");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_ranks_the_whole_post_and_held_comments_take_no_place() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = Arc::new(TestApp::start(dir.path()).await);
    app.post(70, 7, false).await;
    let (st, v) = app
        .call(Method::PUT, "/v1/me/hidden-words", Some(&app.user(7)), Some(r#"{"words":["quagmire"]}"#))
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    // The oldest comment, then ORDINARY newer ones, then HELD the author's filter holds: six
    // times the ranker's cached top (TOP_K, 200), so most of the walk is beyond it.
    const ORDINARY: u64 = 1_200;
    const HELD: u64 = 300;
    let old = id_of(&comment(&app, 60_000, 70, "the first comment here, on a fine day", None).await);
    comments_concurrently(&app, 70, 100_000..100_000 + ORDINARY, prose).await;
    comments_concurrently(&app, 70, 200_000..200_000 + HELD, |u| format!("{} quagmire", prose(u))).await;
    {
        use futures::StreamExt;
        futures::stream::iter(300_000..300_300u64)
            .for_each_concurrent(16, |u| {
                let app = app.clone();
                async move {
                    let path = format!("/v1/comments/{old}/like");
                    let (st, v) = app.call(Method::PUT, &path, Some(&app.user(u)), None).await;
                    assert_eq!(st, StatusCode::OK, "{v}");
                }
            })
            .await;
    }
    // Hundreds of likes carry the oldest comment past every newer one (once aggregated).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let first = loop {
        let (st, v) =
            app.call(Method::GET, "/v1/posts/70/comments?order=top&limit=20", Some(&app.user(9)), None).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        if v["items"][0]["comment_id"] == json!(old.to_string()) && v["items"][0]["like_count"] == 300 {
            break v;
        }
        assert!(std::time::Instant::now() < deadline, "the liked comment never led: {}", v["items"][0]);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let page = first["items"].as_array().expect("items");
    assert_eq!(page.len(), 20, "a full first page");
    assert!(
        page.iter().all(|c| !c["text"].as_str().unwrap_or("").contains("quagmire")),
        "held ones take no place"
    );
    // The whole walk: every comment others can see, once; the same set as newest-first.
    let walk = top_walk(&app, 70, 9, 100).await;
    let got: Vec<u64> = walk.iter().map(id_of).collect();
    let unique: HashSet<u64> = got.iter().copied().collect();
    assert_eq!(unique.len(), got.len(), "no comment twice");
    let mut newest = newest_ids(&app, 70, 9).await;
    newest.sort_unstable();
    let mut sorted = got.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, newest, "top walks exactly the comments newest lists");
    assert!(
        got.len() as u64 >= ORDINARY,
        "the {} ordinary comments (a rare classifier hold aside): {}",
        ORDINARY + 1,
        got.len()
    );
    assert!(walk.iter().all(|c| !c["text"].as_str().unwrap_or("").contains("quagmire")));
    // A held comment's author still finds it in their own top order (shadow).
    let own = top_walk(&app, 70, 200_100, 100).await;
    assert!(own.iter().any(|c| c["author_id"] == json!("200100")), "the author sees their held comment");
    Arc::try_unwrap(app).ok().expect("sole owner").stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_pages_hold_across_a_restart_with_comments_arriving() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut app = Arc::new(TestApp::start(dir.path()).await);
    app.post(71, 7, false).await;
    comments_concurrently(&app, 71, 400_000..400_300, prose).await;
    // Some likes, so the order is not simply newest first.
    let snapshot = newest_ids(&app, 71, 9).await;
    assert_eq!(snapshot.len(), 300);
    let mut total = 0;
    for (k, c) in snapshot.iter().enumerate().filter(|(k, _)| k % 10 == 3) {
        for u in 0..(k % 7 + 1) as u64 {
            let (st, _) = app
                .call(Method::PUT, &format!("/v1/comments/{c}/like"), Some(&app.user(500_000 + u)), None)
                .await;
            assert_eq!(st, StatusCode::OK);
            total += 1;
        }
    }
    // Every like ranked before the walk, so the order is known to be settled.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while top_walk(&app, 71, 9, 100).await.iter().map(|c| c["like_count"].as_i64().unwrap_or(0)).sum::<i64>()
        != total
    {
        assert!(std::time::Instant::now() < deadline, "likes never all counted");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Walk 25 at a time, restarting the server and adding 20 comments before each of the
    // first three later pages.
    let mut seen: Vec<u64> = Vec::new();
    let mut cursor = String::new();
    let mut newer = 600_000u64;
    for page in 0.. {
        let path = format!("/v1/posts/71/comments?order=top&limit=25{cursor}");
        let (st, v) = app.call(Method::GET, &path, Some(&app.user(9)), None).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        seen.extend(ids(&v));
        let Some(next) = v["next_cursor"].as_str() else { break };
        cursor = format!("&cursor={next}");
        if page < 3 {
            Arc::try_unwrap(app).ok().expect("sole owner").stop_for_restart().await;
            app = Arc::new(TestApp::start(dir.path()).await);
            comments_concurrently(&app, 71, newer..newer + 20, prose).await;
            newer += 20;
        }
    }
    let unique: HashSet<u64> = seen.iter().copied().collect();
    assert_eq!(unique.len(), seen.len(), "no comment twice");
    let want: HashSet<u64> = snapshot.iter().copied().collect();
    let missing: Vec<&u64> = want.difference(&unique).collect();
    let extra: Vec<&u64> = unique.difference(&want).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {missing:?}, written after the first page {extra:?}"
    );
    Arc::try_unwrap(app).ok().expect("sole owner").stop().await;
}

/// Like comment `c` as each of `users`.
async fn like_comment(app: &TestApp, c: u64, users: std::ops::Range<u64>) {
    for u in users {
        let (st, v) =
            app.call(Method::PUT, &format!("/v1/comments/{c}/like"), Some(&app.user(u)), None).await;
        assert_eq!(st, StatusCode::OK, "{v}");
    }
}

/// Likers of [`walk_lifting`], and the comments it lifted.
struct Lifter {
    next_user: u64,
    lifted: Vec<u64>,
}

/// Walk post 72's top order 7 at a time as user 9. After each of the first three pages, an
/// unseen comment is liked to the top (more likes than the top one has) and the walk waits
/// until the index ranks it there: it then sits above the cursor, where a walk ranking by
/// today's scores never looks again.
/// With `restart`, the server restarts after the second page.
async fn walk_lifting(
    mut app: Arc<TestApp>,
    all: &[u64],
    restart: bool,
    l: &mut Lifter,
) -> (Vec<u64>, Arc<TestApp>) {
    let mut seen: Vec<u64> = Vec::new();
    let mut cursor = String::new();
    for page in 0.. {
        let path = format!("/v1/posts/72/comments?order=top&limit=7{cursor}");
        let (st, v) = app.call(Method::GET, &path, Some(&app.user(9)), None).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        seen.extend(ids(&v));
        let Some(next) = v["next_cursor"].as_str() else { break };
        cursor = format!("&cursor={next}");
        let top = "/v1/posts/72/comments?order=top&limit=1";
        let unseen = all.iter().find(|c| !seen.contains(c) && !l.lifted.contains(c));
        if let Some(&target) = unseen.filter(|_| page < 3) {
            l.lifted.push(target);
            let (_, v) = app.call(Method::GET, top, Some(&app.user(9)), None).await;
            let n = v["items"][0]["like_count"].as_u64().expect("like_count") + 6;
            like_comment(&app, target, l.next_user..l.next_user + n).await;
            l.next_user += n;
            // Generous: likes reach the index through the aggregator, behind a loaded machine.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            loop {
                let (_, v) = app.call(Method::GET, top, Some(&app.user(9)), None).await;
                if v["items"][0]["comment_id"] == json!(target.to_string()) {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "{target} with {n} likes never led: {v}");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
        if restart && page == 1 {
            let dir = app.data_dir.clone();
            Arc::try_unwrap(app).ok().expect("sole owner").stop_for_restart().await;
            app = Arc::new(TestApp::start(&dir).await);
        }
    }
    (seen, app)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_pages_show_every_comment_once_while_comments_are_liked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = Arc::new(TestApp::start(dir.path()).await);
    app.post(72, 7, false).await;
    comments_concurrently(&app, 72, 700_000..700_060, prose).await;
    let all: Vec<u64> = newest_ids(&app, 72, 9).await;
    assert_eq!(all.len(), 60);
    // A few likes a second on random comments, for the whole first walk.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let liker = {
        let (app, stop, all) = (app.clone(), stop.clone(), all.clone());
        tokio::spawn(async move {
            let mut u = 800_000u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let c = all[rand::random_range(0..all.len())];
                like_comment(&app, c, u..u + 1).await;
                u += 1;
                // Pacing of the load, not a wait for anything.
                tokio::time::sleep(std::time::Duration::from_millis(150)).await;
            }
        })
    };
    let mut lifter = Lifter { next_user: 900_000, lifted: Vec::new() };
    let (seen, app) = walk_lifting(app, &all, false, &mut lifter).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    liker.await.expect("liker");
    let unique: HashSet<u64> = seen.iter().copied().collect();
    assert_eq!(unique.len(), seen.len(), "no comment twice: {seen:?}");
    assert_eq!(unique, all.iter().copied().collect(), "all 60 comments, once each");
    // Once more, with a restart of the server between two pages.
    let (seen, app) = walk_lifting(app, &all, true, &mut lifter).await;
    let unique: HashSet<u64> = seen.iter().copied().collect();
    assert_eq!(unique.len(), seen.len(), "no comment twice across a restart: {seen:?}");
    assert_eq!(unique, all.iter().copied().collect(), "all 60 comments across a restart");
    Arc::try_unwrap(app).ok().expect("sole owner").stop().await;
}
