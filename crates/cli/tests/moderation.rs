//! Moderation layers and ranking through the API.

mod common;

use common::{TestApp, assert_error};
use hyper::{Method, StatusCode};
use serde_json::{Value, json};

async fn comment(app: &TestApp, user: u64, post: u64, text: &str) -> Value {
    let body = json!({"text": text}).to_string();
    let (st, v) = app
        .call(Method::POST, &format!("/v1/posts/{post}/comments"), Some(&app.user(user)), Some(&body))
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    v
}

fn id(v: &Value) -> String {
    v["comment_id"].as_str().expect("comment_id").to_string()
}

async fn list(app: &TestApp, viewer: u64, post: u64, order: &str) -> Vec<Value> {
    let (st, v) = app
        .call(
            Method::GET,
            &format!("/v1/posts/{post}/comments?order={order}&limit=100"),
            Some(&app.user(viewer)),
            None,
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["items"].as_array().expect("items").clone()
}

/// A moderator's decision on a comment (service role).
async fn moderate(app: &TestApp, comment: &Value, action: &str) -> (StatusCode, Value) {
    let body = json!({ "action": action }).to_string();
    let path = format!("/v1/moderation/comments/{}", id(comment));
    app.call(Method::POST, &path, Some(&app.service()), Some(&body)).await
}

async fn queue(app: &TestApp) -> Vec<Value> {
    let (st, v) = app.call(Method::GET, "/v1/moderation/queue?limit=100", Some(&app.service()), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["items"].as_array().expect("items").clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_first_then_liked_above_unliked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let plain_a = comment(&app, 10, 1, "nice photo").await;
    let liked = comment(&app, 11, 1, "what a view").await;
    let plain_b = comment(&app, 12, 1, "love this place").await;
    let pinned = comment(&app, 13, 1, "first time here").await;
    for u in 100..110u64 {
        let (st, _) = app
            .call(Method::PUT, &format!("/v1/comments/{}/like", id(&liked)), Some(&app.user(u)), None)
            .await;
        assert_eq!(st, StatusCode::OK);
    }
    let (st, v) =
        app.call(Method::PUT, &format!("/v1/posts/1/pins/{}", id(&pinned)), Some(&app.user(10)), None).await;
    assert_error(st, &v, 403, "forbidden");
    let (st, _) =
        app.call(Method::PUT, &format!("/v1/posts/1/pins/{}", id(&pinned)), Some(&app.user(7)), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    // Wait until the likes are counted, then read the ranking (top is the default order).
    app.wait_until(|| async {
        let (_, v) =
            app.call(Method::GET, "/v1/posts/1/comments?order=newest", Some(&app.user(5)), None).await;
        v["items"].as_array().is_some_and(|a| a.iter().any(|c| c["like_count"] == 10))
    })
    .await;
    app.wait_until(|| async {
        let (_, v) = app.call(Method::GET, "/v1/posts/1/comments", Some(&app.user(5)), None).await;
        let ids: Vec<String> = v["items"].as_array().expect("items").iter().map(id).collect();
        ids.len() == 4 && ids[0] == id(&pinned) && ids[1] == id(&liked)
    })
    .await;
    let (_, v) = app.call(Method::GET, "/v1/posts/1/comments?limit=2", Some(&app.user(5)), None).await;
    assert_eq!(v["items"][0]["pinned"], true);
    // Paging the ranking never repeats: two more, then nothing.
    let c = v["next_cursor"].as_str().expect("cursor");
    let (_, rest) = app
        .call(Method::GET, &format!("/v1/posts/1/comments?limit=2&cursor={c}"), Some(&app.user(5)), None)
        .await;
    let mut all: Vec<String> = v["items"].as_array().expect("items").iter().map(id).collect();
    all.extend(rest["items"].as_array().expect("items").iter().map(id));
    all.sort();
    let mut want = vec![id(&plain_a), id(&liked), id(&plain_b), id(&pinned)];
    want.sort();
    assert_eq!(all, want);
    // The feed preview shows the viewer's top two.
    let post = app.view(5, 1).await;
    let previews: Vec<String> =
        post["preview_comments"].as_array().expect("previews").iter().map(id).collect();
    assert_eq!(previews, vec![id(&pinned), id(&liked)]);
    // A fourth pin is refused.
    for c in [&plain_a, &plain_b] {
        let (st, _) =
            app.call(Method::PUT, &format!("/v1/posts/1/pins/{}", id(c)), Some(&app.user(7)), None).await;
        assert_eq!(st, StatusCode::NO_CONTENT);
    }
    let (st, v) =
        app.call(Method::PUT, &format!("/v1/posts/1/pins/{}", id(&liked)), Some(&app.user(7)), None).await;
    assert_error(st, &v, 409, "conflict");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hidden_words_hold_a_comment_in_shadow() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let (st, _) = app
        .call(Method::PUT, "/v1/me/hidden-words", Some(&app.user(7)), Some(r#"{"words":["rubbish"]}"#))
        .await;
    assert_eq!(st, StatusCode::OK);
    comment(&app, 10, 1, "a fine post").await;
    let hit = comment(&app, 11, 1, "what RUBB1SH is this").await;
    assert_eq!(hit["status"], "visible", "the commenter is not told");
    let others = list(&app, 12, 1, "newest").await;
    assert!(!others.iter().any(|c| id(c) == id(&hit)), "invisible to others");
    let own = list(&app, 11, 1, "newest").await;
    let mine = own.iter().find(|c| id(c) == id(&hit)).expect("the author sees it");
    assert_eq!(mine["status"], "visible", "as an ordinary comment");
    app.wait_until(|| async { app.view(12, 1).await["comment_count"] == 1 }).await;
    let q = queue(&app).await;
    let item = q.iter().find(|c| id(c) == id(&hit)).expect("queued");
    assert_eq!(item["status"], "hidden_by_filter");
    assert_eq!(item["report_count"], 0);
    // The queue is for moderators only.
    let (st, v) = app.call(Method::GET, "/v1/moderation/queue", Some(&app.user(7)), None).await;
    assert_error(st, &v, 403, "forbidden");
    // A moderator approves it: now everyone sees it and it counts.
    let (st, v) = moderate(&app, &hit, "approve").await;
    assert_eq!((st, v["status"].as_str()), (StatusCode::OK, Some("visible")), "{v}");
    assert!(list(&app, 12, 1, "newest").await.iter().any(|c| id(c) == id(&hit)));
    app.wait_until(|| async { app.view(12, 1).await["comment_count"] == 2 }).await;
    assert!(!queue(&app).await.iter().any(|c| id(c) == id(&hit)), "left the queue");
    app.stop().await;
}

/// A hidden word that shows nothing (blank, or only invisible characters) is refused like
/// other bad input, and the list stored before stays in force.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blank_or_invisible_hidden_words_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let put = |words: Value| {
        let body = json!({ "words": words }).to_string();
        let app = &app;
        async move { app.call(Method::PUT, "/v1/me/hidden-words", Some(&app.user(7)), Some(&body)).await }
    };
    let (st, v) = put(json!(["rubbish"])).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    for blank in ["", "   ", "\u{200B}", "\u{200B}\u{2060}\u{FEFF}", " \u{200D} ", "\u{3164}"] {
        let (st, v) = put(json!(["spoiler", blank])).await;
        assert_error(st, &v, 400, "invalid");
    }
    // Nothing of the refused lists was stored: "rubbish" still holds, "spoiler" does not.
    let hit = comment(&app, 11, 1, "what rubbish").await;
    let fine = comment(&app, 12, 1, "no spoiler here").await;
    let others: Vec<String> = list(&app, 13, 1, "newest").await.iter().map(id).collect();
    assert_eq!(others, [id(&fine)], "{hit}");
    app.stop().await;
}

/// Blank fillers (Hangul fillers, the Braille blank) show as spaces: they separate words for
/// the hidden-words filter and the classifier as a space does, and the hidden-words list read
/// back is the list as stored, invisible characters dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blank_fillers_separate_words_for_every_filter() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let body = json!({ "words": ["rubbish", "bad word", "ru\u{200B}bb\u{2060}ish"] }).to_string();
    let (st, v) = app.call(Method::PUT, "/v1/me/hidden-words", Some(&app.user(7)), Some(&body)).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["words"], json!(["rubbish", "bad word", "rubbish"]), "the stored list");
    let fine = comment(&app, 10, 1, "a fine post").await;
    let mut held = Vec::new();
    for (u, f) in ['\u{3164}', '\u{FFA0}', '\u{115F}', '\u{1160}', '\u{2800}'].into_iter().enumerate() {
        held.push(comment(&app, 20 + u as u64, 1, &format!("total{f}rubbish here")).await);
        held.push(comment(&app, 30 + u as u64, 1, &format!("a bad{f}word")).await);
    }
    let others: Vec<String> = list(&app, 12, 1, "newest").await.iter().map(id).collect();
    assert_eq!(others, [id(&fine)], "fillers hid no hidden word: {held:?}");
    // The classifier reads them as spaces too.
    app.post(2, 7, false).await;
    let abuse = comment(&app, 40, 2, "kill\u{3164}yourself").await;
    assert_eq!(abuse["text"], "kill yourself", "stored as read");
    assert!(list(&app, 12, 2, "newest").await.is_empty(), "held: {abuse}");
    app.stop().await;
}

/// A like can always be taken back, also of a comment a moderator hid since (so approving it
/// does not bring the like back). Someone who never liked a comment they cannot see gets 404,
/// as for any comment they cannot see; a deleted comment is gone, likes and all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_like_of_a_comment_hidden_or_deleted_since_can_be_taken_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let hidden = comment(&app, 10, 1, "a fine comment").await;
    let gone = comment(&app, 11, 1, "another fine comment").await;
    for c in [&hidden, &gone] {
        let path = format!("/v1/comments/{}/like", id(c));
        let (st, v) = app.call(Method::PUT, &path, Some(&app.user(20)), None).await;
        assert_eq!(st, StatusCode::OK, "{v}");
    }
    let (st, v) = moderate(&app, &hidden, "hide").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let path = format!("/v1/comments/{}", id(&gone));
    let (st, v) = app.call(Method::DELETE, &path, Some(&app.user(11)), None).await;
    assert!(st.is_success(), "{st} {v}");
    // A stranger who never liked the hidden comment learns nothing.
    let unlike = |c: &Value, u: u64| {
        let path = format!("/v1/comments/{}/like", id(c));
        let app = &app;
        async move { app.call(Method::DELETE, &path, Some(&app.user(u)), None).await }
    };
    let (st, v) = unlike(&hidden, 21).await;
    assert_error(st, &v, 404, "not_found");
    let (st, v) = unlike(&gone, 20).await;
    assert_error(st, &v, 404, "not_found");
    let (st, v) = unlike(&hidden, 20).await;
    assert_eq!(
        (st, v["liked"].as_bool(), v["changed"].as_bool()),
        (StatusCode::OK, Some(false), Some(true)),
        "{v}"
    );
    // Approved again, the comment counts no like.
    let (st, v) = moderate(&app, &hidden, "approve").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    app.wait_until(|| async {
        list(&app, 20, 1, "newest").await.iter().any(|c| id(c) == id(&hidden) && c["like_count"] == 0)
    })
    .await;
    let mine = list(&app, 20, 1, "newest").await;
    let c = mine.iter().find(|c| id(c) == id(&hidden)).expect("visible again");
    assert_eq!(c["viewer_has_liked"], false, "{c}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restrict_then_approve_and_block_refuses_comments_and_likes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let author = app.user(7);
    let (st, _) = app.call(Method::PUT, "/v1/me/restricts/20", Some(&author), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let r = comment(&app, 20, 1, "hello there").await;
    assert!(!list(&app, 30, 1, "newest").await.iter().any(|c| id(c) == id(&r)), "hidden from others");
    let seen_by_author = list(&app, 7, 1, "newest").await;
    let c = seen_by_author.iter().find(|c| id(c) == id(&r)).expect("the post author sees it");
    assert_eq!(c["status"], "restricted");
    let (st, v) =
        app.call(Method::POST, &format!("/v1/comments/{}/approve", id(&r)), Some(&app.user(30)), None).await;
    assert_error(st, &v, 404, "not_found");
    // A held comment does not exist for others: no reply can confirm it or hang under it.
    let reply = serde_json::json!({"text": "replying", "parent_id": id(&r)}).to_string();
    let (st, v) = app.call(Method::POST, "/v1/posts/1/comments", Some(&app.user(30)), Some(&reply)).await;
    assert_error(st, &v, 404, "not_found");
    let (st, v) =
        app.call(Method::POST, &format!("/v1/comments/{}/approve", id(&r)), Some(&author), None).await;
    assert_eq!((st, v["status"].as_str()), (StatusCode::OK, Some("visible")), "{v}");
    assert!(list(&app, 30, 1, "newest").await.iter().any(|c| id(c) == id(&r)));

    let (st, _) = app.call(Method::PUT, "/v1/me/blocks/21", Some(&author), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let (st, v) =
        app.call(Method::POST, "/v1/posts/1/comments", Some(&app.user(21)), Some(r#"{"text":"hi"}"#)).await;
    assert_error(st, &v, 403, "forbidden");
    let (st, v) = app.call(Method::PUT, "/v1/posts/1/like", Some(&app.user(21)), None).await;
    assert_error(st, &v, 403, "forbidden");
    let (st, v) =
        app.call(Method::PUT, &format!("/v1/comments/{}/like", id(&r)), Some(&app.user(21)), None).await;
    assert_error(st, &v, 403, "forbidden");
    let (st, _) = app.call(Method::DELETE, "/v1/me/blocks/21", Some(&author), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let (st, _) = app.call(Method::PUT, "/v1/posts/1/like", Some(&app.user(21)), None).await;
    assert_eq!(st, StatusCode::OK, "unblocked");
    app.stop().await;
}

/// A held comment with a reply, deleted by its author: the placeholder the thread keeps must
/// not show anyone who could not see the comment that it existed, or who wrote it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_held_comment_reveals_nothing_to_others() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let (st, _) = app.call(Method::PUT, "/v1/me/restricts/20", Some(&app.user(7)), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    // A visible comment with a reply, for contrast, and a held one with its author's reply.
    let open = comment(&app, 22, 1, "an open comment").await;
    let held = comment(&app, 20, 1, "a held comment").await;
    for (parent, user) in [(&open, 23), (&held, 20)] {
        let reply = json!({"text": "a reply", "parent_id": id(parent)}).to_string();
        let (st, v) =
            app.call(Method::POST, "/v1/posts/1/comments", Some(&app.user(user)), Some(&reply)).await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
    }
    for c in [&open, &held] {
        let author = c["author_id"].as_str().expect("author_id").parse::<u64>().expect("numeric");
        let path = format!("/v1/comments/{}", id(c));
        let (st, v) = app.call(Method::DELETE, &path, Some(&app.user(author)), None).await;
        assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
    }
    let shown = |items: &[Value], c: &Value| items.iter().find(|i| id(i) == id(c)).cloned();
    // Everyone sees the open comment's placeholder; only the held comment's author sees its.
    for viewer in [30, 7, 23] {
        let items = list(&app, viewer, 1, "newest").await;
        let p = shown(&items, &open).expect("the open placeholder");
        assert_eq!((p["status"].as_str(), p["text"].as_str()), (Some("deleted"), Some("")));
        assert!(shown(&items, &held).is_none(), "viewer {viewer} was shown the held comment's placeholder");
        let path = format!("/v1/comments/{}/replies", id(&held));
        let (st, v) = app.call(Method::GET, &path, Some(&app.user(viewer)), None).await;
        assert_error(st, &v, 404, "not_found");
    }
    let items = list(&app, 20, 1, "newest").await;
    let p = shown(&items, &held).expect("its author still sees the thread");
    assert_eq!((p["status"].as_str(), p["text"].as_str()), (Some("deleted"), Some("")));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fifth_copy_of_a_text_across_posts_is_held_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    let spam = "Check out my profile for free followers and great deals every day";
    let mut last = Value::Null;
    for p in 1..=5u64 {
        app.post(p, 7, false).await;
        last = comment(&app, 40, p, spam).await;
    }
    assert!(!list(&app, 41, 5, "newest").await.iter().any(|c| id(c) == id(&last)), "fifth copy hidden");
    assert!(list(&app, 40, 5, "newest").await.iter().any(|c| id(c) == id(&last)), "its author still sees it");
    // Different people writing different sentences are never caught.
    app.post(6, 7, false).await;
    for (u, text) in
        [(50u64, "lovely light in this one"), (51, "where was this taken?"), (52, "the colours are amazing")]
    {
        let c = comment(&app, u, 6, text).await;
        assert!(list(&app, 41, 6, "newest").await.iter().any(|x| id(x) == id(&c)));
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spam_with_a_word_changed_each_time_is_held_from_the_fifth_copy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    let spam = "Get 1000 free followers now, link in my bio";
    let copies = [
        spam.to_string(),
        format!("{spam}!"),
        format!("{spam} ok"),
        spam.replace("now", "today"),
        format!("{spam} today"),
        format!("hey {spam}"),
        format!("{spam} lol"),
        format!("{spam} pls"),
        format!("{spam} now"),
        format!("omg {spam}"),
    ];
    for (i, text) in copies.iter().enumerate() {
        let p = 1 + i as u64;
        app.post(p, 7, false).await;
        let c = comment(&app, 40, p, text).await;
        let seen = list(&app, 41, p, "newest").await.iter().any(|x| id(x) == id(&c));
        assert_eq!(seen, i < 4, "copy {} ({text:?}) seen by others: {seen}", i + 1);
        assert!(list(&app, 40, p, "newest").await.iter().any(|x| id(x) == id(&c)), "its author sees it");
    }
    let held: Vec<Value> = queue(&app).await.into_iter().filter(|x| x["author_id"] == "40").collect();
    assert_eq!(held.len(), 6, "{held:?}");
    assert!(held.iter().all(|x| x["held_by"] == "near_duplicate"), "{held:?}");
    app.stop().await;
}

/// Spam that grows by a word each time drifts away from its first copies; each copy is still
/// near the one before, and the fifth is held as an exact fifth copy would be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_text_with_a_word_appended_each_time_is_held_from_the_fifth_copy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    let mut text = "Get 1000 free followers now, link in my bio".to_string();
    for (i, word) in ["", "today", "friends", "please", "thanks", "everyone", "again"].iter().enumerate() {
        if !word.is_empty() {
            text = format!("{text} {word}");
        }
        let p = 1 + i as u64;
        app.post(p, 7, false).await;
        let c = comment(&app, 40, p, &text).await;
        let seen = list(&app, 41, p, "newest").await.iter().any(|x| id(x) == id(&c));
        assert_eq!(seen, i < 4, "copy {} ({text:?}) seen by others: {seen}", i + 1);
    }
    app.stop().await;
}

/// Everyday short comments are never held: twenty different ones by one person on twenty
/// posts, nor the same few phrases written by many people.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_everyday_short_comments_and_common_phrases_are_never_held() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    let texts = [
        "nice!",
        "love this",
        "so true",
        "great shot",
        "haha yes",
        "omg so cute",
        "congrats!!",
        "this is gorgeous",
        "need this",
        "miss you guys",
        "where is this?",
        "looks so good",
        "happy birthday 🎉",
        "stunning",
        "you look great",
        "lol same",
        "the light!",
        "so proud of you",
        "take me with you",
        "beautiful colours",
    ];
    // Written within seconds, faster than a person types: the classifier may weigh that
    // speed, but none of them is held as a copy of the others.
    for (i, text) in texts.iter().enumerate() {
        let p = 1 + i as u64;
        app.post(p, 7, false).await;
        comment(&app, 42, p, text).await;
    }
    let copies: Vec<Value> =
        queue(&app).await.into_iter().filter(|x| x["held_by"] == "near_duplicate").collect();
    assert!(copies.is_empty(), "{copies:?}");
    // The same phrases, each written once by each of many people on one post.
    app.post(100, 7, false).await;
    for (k, text) in ["nice!", "love this", "so true", "great shot", "congrats!!", "wow"].iter().enumerate() {
        for u in 0..6u64 {
            comment(&app, 200 + 10 * k as u64 + u, 100, text).await;
        }
    }
    assert_eq!(list(&app, 41, 100, "newest").await.len(), 36);
    let copies: Vec<Value> =
        queue(&app).await.into_iter().filter(|x| x["held_by"] == "near_duplicate").collect();
    assert!(copies.is_empty(), "{copies:?}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_short_comments_by_one_user_are_never_held() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    // What one person leaves under friends' posts in an evening: short, alike in tone.
    let texts = [
        "nice!",
        "love this",
        "great shot",
        "great pic",
        "so cute",
        "nice one",
        "so beautiful",
        "great work",
        "love this so much",
        "congrats, so happy for you!",
    ];
    for (i, text) in texts.iter().enumerate() {
        let p = 1 + i as u64;
        app.post(p, 7, false).await;
        let c = comment(&app, 42, p, text).await;
        assert!(list(&app, 41, p, "newest").await.iter().any(|x| id(x) == id(&c)), "{text:?} held");
    }
    assert!(queue(&app).await.is_empty());
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_comments_meets_a_429_but_a_few_never_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    for i in 0..10 {
        comment(&app, 60, 1, &format!("normal comment {i} about the trip")).await;
    }
    let mut limited = None;
    for i in 0..60 {
        let body = json!({"text": format!("burst {i} of many words here")}).to_string();
        let (st, headers, v) =
            app.call_full(Method::POST, "/v1/posts/1/comments", Some(&app.user(61)), Some(&body)).await;
        if st == StatusCode::TOO_MANY_REQUESTS {
            assert_eq!(v["error"], "rate_limited");
            limited =
                headers.get("retry-after").and_then(|h| h.to_str().ok()).and_then(|s| s.parse::<u64>().ok());
            break;
        }
        assert_eq!(st, StatusCode::CREATED, "{v}");
    }
    assert!(limited.is_some_and(|s| s >= 1), "a burst of 60 is limited with Retry-After");
    // Other users (a viral post) are not throttled by it.
    comment(&app, 62, 1, "someone else entirely").await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enough_reports_hide_a_comment_pending_review() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let c = comment(&app, 70, 1, "an ordinary looking comment").await;
    for u in 80..84u64 {
        let (st, _) = app
            .call(
                Method::POST,
                &format!("/v1/comments/{}/reports", id(&c)),
                Some(&app.user(u)),
                Some(r#"{"reason":"spam"}"#),
            )
            .await;
        assert_eq!(st, StatusCode::ACCEPTED);
    }
    // A repeated report by the same user does not count twice.
    app.call(
        Method::POST,
        &format!("/v1/comments/{}/reports", id(&c)),
        Some(&app.user(80)),
        Some(r#"{"reason":"other"}"#),
    )
    .await;
    assert!(
        list(&app, 90, 1, "newest").await.iter().any(|x| id(x) == id(&c)),
        "four reporters: still visible"
    );
    let (st, _) = app
        .call(
            Method::POST,
            &format!("/v1/comments/{}/reports", id(&c)),
            Some(&app.user(84)),
            Some(r#"{"reason":"bullying"}"#),
        )
        .await;
    assert_eq!(st, StatusCode::ACCEPTED);
    assert!(
        !list(&app, 90, 1, "newest").await.iter().any(|x| id(x) == id(&c)),
        "five: hidden pending review"
    );
    let q = queue(&app).await;
    let item = q.iter().find(|x| id(x) == id(&c)).expect("queued");
    assert_eq!((item["status"].as_str(), item["report_count"].as_u64()), (Some("pending"), Some(5)));
    let (st, v) = app
        .call(
            Method::POST,
            &format!("/v1/comments/{}/reports", id(&c)),
            Some(&app.user(85)),
            Some(r#"{"reason":"nonsense"}"#),
        )
        .await;
    assert_error(st, &v, 422, "invalid");
    let (st, v) = moderate(&app, &c, "hide").await;
    assert_eq!((st, v["status"].as_str()), (StatusCode::OK, Some("hidden_by_filter")));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_classifier_holds_spam_and_abuse_but_not_ordinary_comments() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let spam = comment(&app, 90, 1, "BUY NOW!!!!!!!! cheap-pills.biz www.x.ru http://spam.io").await;
    let fine = comment(&app, 91, 1, "Such a calm morning, thanks for sharing").await;
    let others = list(&app, 92, 1, "newest").await;
    assert!(!others.iter().any(|c| id(c) == id(&spam)), "spam held back");
    assert!(others.iter().any(|c| id(c) == id(&fine)), "an ordinary comment is shown");
    let q = queue(&app).await;
    assert_eq!(
        q.iter().find(|c| id(c) == id(&spam)).map(|c| c["status"].clone()),
        Some(json!("hidden_by_filter"))
    );
    // Deleting a queued comment takes it out of the queue.
    let (st, _) =
        app.call(Method::DELETE, &format!("/v1/comments/{}", id(&spam)), Some(&app.user(90)), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    assert!(!queue(&app).await.iter().any(|c| id(c) == id(&spam)));
    app.stop().await;
}

/// Top pages and feed previews keep ranked candidates and comment records cached; a status
/// change or a delete must still take effect on the very next read, on every reader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moderation_and_deletes_show_at_once_in_top_pages_and_previews() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let a = comment(&app, 70, 1, "the first thoughtful remark").await;
    let b = comment(&app, 71, 1, "a second thoughtful remark").await;
    let ids = |items: &[Value]| items.iter().map(id).collect::<Vec<_>>();
    let previews = |v: Value| ids(v["preview_comments"].as_array().expect("previews"));
    // Readers fill the caches (ranking, records) first; comment_count reaches 2 through the
    // aggregator, and only then are previews computed.
    app.wait_until(|| async { app.view(90, 1).await["comment_count"] == json!(2) }).await;
    for viewer in [90, 91] {
        assert_eq!(ids(&list(&app, viewer, 1, "top").await).len(), 2);
        assert_eq!(previews(app.view(viewer, 1).await).len(), 2);
    }
    // Hidden by a moderator: gone for everyone at once (the author still sees it, shadowed).
    let (st, _) = moderate(&app, &a, "hide").await;
    assert_eq!(st, StatusCode::OK);
    for viewer in [90, 91] {
        assert_eq!(ids(&list(&app, viewer, 1, "top").await), vec![id(&b)], "top for {viewer}");
        assert!(!previews(app.view(viewer, 1).await).contains(&id(&a)), "preview for {viewer}");
    }
    assert!(ids(&list(&app, 70, 1, "top").await).contains(&id(&a)), "its author still sees it");
    // Approved: back at once.
    let (st, _) = moderate(&app, &a, "approve").await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(ids(&list(&app, 90, 1, "top").await).len(), 2);
    // Deleted by its author: gone from the top page and the previews at once.
    let (st, _) =
        app.call(Method::DELETE, &format!("/v1/comments/{}", id(&b)), Some(&app.user(71)), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    for viewer in [90, 91] {
        assert!(!ids(&list(&app, viewer, 1, "top").await).contains(&id(&b)), "top for {viewer}");
        assert!(!previews(app.view(viewer, 1).await).contains(&id(&b)), "preview for {viewer}");
    }
    app.stop().await;
}

/// A post registered again with another author: its new author takes over the comments
/// written before (deletes them, sees held ones with their status, approves them), and the
/// old author loses that power.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_registered_post_hands_its_comments_to_the_new_author() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(42, 7, false).await;
    let (st, _) = app.call(Method::PUT, "/v1/me/restricts/20", Some(&app.user(7)), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let held = comment(&app, 20, 42, "a restricted one").await;
    let plain = comment(&app, 21, 42, "a plain one").await;
    let other = comment(&app, 22, 42, "another plain one").await;
    app.post(42, 8, false).await;
    let (old, new) = (app.user(7), app.user(8));
    let (st, v) = app.call(Method::DELETE, &format!("/v1/comments/{}", id(&plain)), Some(&old), None).await;
    assert_error(st, &v, 403, "forbidden");
    assert!(!list(&app, 7, 42, "newest").await.iter().any(|c| id(c) == id(&held)), "hidden from 7 now");
    let (st, v) =
        app.call(Method::POST, &format!("/v1/comments/{}/approve", id(&held)), Some(&old), None).await;
    assert_error(st, &v, 404, "not_found");
    let seen = list(&app, 8, 42, "newest").await;
    let c = seen.iter().find(|c| id(c) == id(&held)).expect("the new author sees the held comment");
    assert_eq!(c["status"], "restricted");
    let (st, v) =
        app.call(Method::POST, &format!("/v1/comments/{}/approve", id(&held)), Some(&new), None).await;
    assert_eq!((st, v["status"].as_str()), (StatusCode::OK, Some("visible")), "{v}");
    let (st, _) = app.call(Method::DELETE, &format!("/v1/comments/{}", id(&other)), Some(&new), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    app.stop().await;
}

/// Pin or unpin `comments` of `post` all at once (released by a barrier); the statuses.
async fn race_pins(app: &std::sync::Arc<TestApp>, post: u64, comments: &[String], pin: bool) -> Vec<u16> {
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(comments.len()));
    let tasks: Vec<_> = comments
        .iter()
        .map(|c| {
            let (app, barrier, c) = (app.clone(), barrier.clone(), c.clone());
            tokio::spawn(async move {
                let m = if pin { Method::PUT } else { Method::DELETE };
                let path = format!("/v1/posts/{post}/pins/{c}");
                barrier.wait().await;
                app.call(m, &path, Some(&app.user(7)), None).await.0.as_u16()
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("join"));
    }
    out
}

/// Concurrent pins and unpins, many times over: every acknowledged change takes effect and
/// the cap of three holds. 50 trials of each race catch a change lost once in 15 races with
/// a probability of 97%.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_acknowledged_pin_and_unpin_takes_effect() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = std::sync::Arc::new(TestApp::start(dir.path()).await);
    // Posts five at a time (each post's races stay its own): the trials, not their order,
    // are what counts.
    use futures::StreamExt;
    futures::stream::iter(1..=50u64)
        .for_each_concurrent(5, |post| {
            let app = app.clone();
            async move {
                app.post(post, 7, false).await;
                let mut cs = Vec::new();
                for k in 0..5u64 {
                    cs.push(id(
                        &comment(&app, 100 + post * 10 + k, post, &format!("comment {k} on {post}")).await
                    ));
                }
                let pinned = |v: Vec<Value>| -> Vec<String> {
                    let mut p: Vec<String> = v.iter().filter(|c| c["pinned"] == true).map(id).collect();
                    p.sort();
                    p
                };
                let two = race_pins(&app, post, &cs[..2], true).await;
                assert_eq!(two, [204, 204], "post {post}");
                let mut want = cs[..2].to_vec();
                want.sort();
                assert_eq!(pinned(list(&app, 9, post, "top").await), want, "post {post}: both pins");
                let three = race_pins(&app, post, &cs[2..], true).await;
                let mut sorted = three.clone();
                sorted.sort();
                assert_eq!(sorted, [204, 409, 409], "post {post}: one more fits under the cap");
                let winner = cs[2..].iter().zip(&three).find(|(_, s)| **s == 204).map(|(c, _)| c.clone());
                want.extend(winner);
                want.sort();
                assert_eq!(pinned(list(&app, 9, post, "top").await), want, "post {post}: the cap held");
                let unpins = race_pins(&app, post, &want[..2], false).await;
                assert_eq!(unpins, [204, 204], "post {post}");
                assert_eq!(
                    pinned(list(&app, 9, post, "top").await),
                    want[2..].to_vec(),
                    "post {post}: both unpins"
                );
            }
        })
        .await;
}

/// A reply to `parent` on `post` by `user`.
async fn reply(app: &TestApp, user: u64, post: u64, parent: &Value, text: &str) -> Value {
    let body = json!({"text": text, "parent_id": id(parent)}).to_string();
    let (st, v) = app
        .call(Method::POST, &format!("/v1/posts/{post}/comments"), Some(&app.user(user)), Some(&body))
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    v
}

/// Every order of `post` shows `viewer` exactly `want`, and the previews nothing else.
async fn only_shown(app: &TestApp, viewer: u64, post: u64, want: &[String]) {
    for order in ["top", "newest", "oldest"] {
        assert_eq!(list(app, viewer, post, order).await.iter().map(id).collect::<Vec<_>>(), want, "{order}");
    }
    let previews = app.view(viewer, post).await["preview_comments"].clone();
    let previews: Vec<String> = previews.as_array().expect("previews").iter().map(id).collect();
    assert!(previews.iter().all(|p| want.contains(p)), "previews {previews:?}");
}

/// A deleted parent shows as a placeholder in every order and in previews while it has a
/// visible reply, goes with its last one (also after a restart), and never stands over
/// replies hidden from the viewer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placeholder_shows_everywhere_while_it_has_visible_replies_and_no_longer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let parent = comment(&app, 70, 1, "a parent to be deleted").await;
    let answer = reply(&app, 71, 1, &parent, "an ordinary answer").await;
    let other = comment(&app, 72, 1, "a comment that stays").await;
    app.wait_until(|| async { app.view(90, 1).await["comment_count"] == json!(3) }).await;
    let (st, _) =
        app.call(Method::DELETE, &format!("/v1/comments/{}", id(&parent)), Some(&app.user(70)), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let ids = |items: &[Value]| items.iter().map(id).collect::<Vec<_>>();
    let previews = |v: Value| ids(v["preview_comments"].as_array().expect("previews"));
    for order in ["top", "newest", "oldest"] {
        let items = list(&app, 90, 1, order).await;
        let p =
            items.iter().find(|c| id(c) == id(&parent)).unwrap_or_else(|| panic!("{order}: no placeholder"));
        assert_eq!((p["status"].as_str(), p["text"].as_str()), (Some("deleted"), Some("")), "{order}");
    }
    assert!(previews(app.view(90, 1).await).contains(&id(&parent)), "previews show the placeholder");
    // The last reply goes: so does the placeholder, everywhere, and for good.
    let (st, _) =
        app.call(Method::DELETE, &format!("/v1/comments/{}", id(&answer)), Some(&app.user(71)), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    only_shown(&app, 90, 1, &[id(&other)]).await;
    app.stop_for_restart().await;
    let app = TestApp::start(dir.path()).await;
    only_shown(&app, 90, 1, &[id(&other)]).await;
    // A placeholder over a held reply only: shown to none but who can see that reply.
    let (st, _) = app.call(Method::PUT, "/v1/me/restricts/20", Some(&app.user(7)), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let lone = comment(&app, 73, 1, "a parent of a held reply").await;
    reply(&app, 20, 1, &lone, "a restricted answer").await;
    let (st, _) =
        app.call(Method::DELETE, &format!("/v1/comments/{}", id(&lone)), Some(&app.user(73)), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    for order in ["top", "newest", "oldest"] {
        assert!(!ids(&list(&app, 90, 1, order).await).contains(&id(&lone)), "{order}: reveals a held reply");
        assert!(ids(&list(&app, 20, 1, order).await).contains(&id(&lone)), "{order}: the reply's author");
    }
    app.stop().await;
}

/// A block covers the blocker's comments on anyone's post: no reply to them, no reply under
/// them, no like of them, so no notification either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_user_cannot_reply_to_or_like_the_blockers_comments() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let (m, rex) = (30u64, 31u64);
    let top = comment(&app, m, 1, "the blocker's comment").await;
    let other = comment(&app, 32, 1, "someone else's comment").await;
    let answer = reply(&app, m, 1, &other, "the blocker's reply").await;
    let (st, _) = app.call(Method::PUT, &format!("/v1/me/blocks/{rex}"), Some(&app.user(m)), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    for parent in [&top, &answer] {
        let body = json!({"text": "a reply from rex", "parent_id": id(parent)}).to_string();
        let (st, v) = app.call(Method::POST, "/v1/posts/1/comments", Some(&app.user(rex)), Some(&body)).await;
        assert_error(st, &v, 403, "forbidden");
    }
    for liked in [&top, &answer] {
        let path = format!("/v1/comments/{}/like", id(liked));
        let (st, v) = app.call(Method::PUT, &path, Some(&app.user(rex)), None).await;
        assert_error(st, &v, 403, "forbidden");
    }
    // Others' comments stay open to rex: a top-level comment by someone who did not block
    // rex may be answered directly, even with the blocker's reply beneath it.
    let body = json!({"text": "rex answers 32", "parent_id": id(&other)}).to_string();
    let (st, v) = app.call(Method::POST, "/v1/posts/1/comments", Some(&app.user(rex)), Some(&body)).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let (st, v) = app.call(Method::GET, "/v1/me/notifications", Some(&app.user(m)), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let from_rex = v["items"].as_array().expect("items").iter().any(|n| {
        n["actors"].as_array().is_some_and(|a| a.iter().any(|x| x.as_str() == Some(&format!("user{rex}"))))
    });
    assert!(!from_rex, "the blocker was notified of rex: {v}");
    app.stop().await;
}

/// A block refuses new likes, never the undoing of earlier ones: a like left standing would
/// go on counting and naming the blocked user on the blocker's post and comments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_user_can_still_undo_their_earlier_likes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let (commenter, rex) = (30u64, 31u64);
    let theirs = comment(&app, commenter, 1, "the commenter's comment").await;
    let others = comment(&app, 32, 1, "someone else's comment").await;
    app.like(rex, 1, true).await;
    for liked in [&theirs, &others] {
        let (st, v) = app
            .call(Method::PUT, &format!("/v1/comments/{}/like", id(liked)), Some(&app.user(rex)), None)
            .await;
        assert_eq!(st, StatusCode::OK, "{v}");
    }
    app.wait_count(7, 1, 1).await;
    // The post's author and the commenter both block rex.
    for blocker in [7, commenter] {
        let (st, _) =
            app.call(Method::PUT, &format!("/v1/me/blocks/{rex}"), Some(&app.user(blocker)), None).await;
        assert_eq!(st, StatusCode::NO_CONTENT);
    }
    assert_eq!(app.like(rex, 1, false).await, (false, true));
    for liked in [&theirs, &others] {
        let path = format!("/v1/comments/{}/like", id(liked));
        let (st, v) = app.call(Method::DELETE, &path, Some(&app.user(rex)), None).await;
        assert_eq!((st, &v), (StatusCode::OK, &json!({"liked": false, "changed": true})));
        // Liking again is still refused.
        let (st, v) = app.call(Method::PUT, &path, Some(&app.user(rex)), None).await;
        assert_error(st, &v, 403, "forbidden");
    }
    let (st, v) = app.call(Method::PUT, "/v1/posts/1/like", Some(&app.user(rex)), None).await;
    assert_error(st, &v, 403, "forbidden");
    app.wait_count(7, 1, 0).await;
    let (st, v) = app.call(Method::GET, "/v1/posts/1/likers", Some(&app.user(7)), None).await;
    assert_eq!((st, &v["items"]), (StatusCode::OK, &json!([])), "{v}");
    app.stop().await;
}

/// The post's author (7) pins comment `c` of post 1.
async fn pin(app: &TestApp, c: &Value) -> (StatusCode, Value) {
    app.call(Method::PUT, &format!("/v1/posts/1/pins/{}", id(c)), Some(&app.user(7)), None).await
}

/// A deleted comment gives its pin slot back, whoever deletes it: with three pins, deleting
/// a pinned comment leaves room for another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_pinned_comment_frees_its_pin_slot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let mut cs = Vec::new();
    for u in 10..15u64 {
        cs.push(comment(&app, u, 1, &format!("comment number {u}")).await);
    }
    for c in &cs[..3] {
        assert_eq!(pin(&app, c).await.0, StatusCode::NO_CONTENT);
    }
    let (st, v) = pin(&app, &cs[3]).await;
    assert_error(st, &v, 409, "conflict");
    // Deleted by its own author, then by the post's author.
    for (c, next, by) in [(&cs[0], &cs[3], 10), (&cs[1], &cs[4], 7)] {
        let (st, v) =
            app.call(Method::DELETE, &format!("/v1/comments/{}", id(c)), Some(&app.user(by)), None).await;
        assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
        let (st, v) = pin(&app, next).await;
        assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
    }
    let (_, v) = app.call(Method::GET, "/v1/posts/1/comments?limit=3", Some(&app.user(5)), None).await;
    let pinned: Vec<String> =
        v["items"].as_array().expect("items").iter().filter(|c| c["pinned"] == true).map(id).collect();
    assert_eq!(pinned, [id(&cs[2]), id(&cs[3]), id(&cs[4])]);
    app.stop().await;
}

/// A comment a moderator hides gives its pin slot back, as a deleted one does, and shows as
/// pinned to no one: not to readers, its author or the moderators.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_comment_a_moderator_hides_frees_its_pin_slot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let mut cs = Vec::new();
    for u in 10..14u64 {
        cs.push(comment(&app, u, 1, &format!("comment number {u}")).await);
    }
    for c in &cs[..3] {
        assert_eq!(pin(&app, c).await.0, StatusCode::NO_CONTENT);
    }
    let (st, v) = moderate(&app, &cs[1], "hide").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let (st, v) = pin(&app, &cs[3]).await;
    assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
    let pinned =
        |items: Vec<Value>| -> Vec<String> { items.iter().filter(|c| c["pinned"] == true).map(id).collect() };
    let want = [id(&cs[0]), id(&cs[2]), id(&cs[3])];
    for viewer in [5u64, 11, 7] {
        assert_eq!(pinned(list(&app, viewer, 1, "top").await), want, "viewer {viewer}");
    }
    let (_, v) = app.call(Method::GET, "/v1/posts/1/comments?limit=100", Some(&app.service()), None).await;
    assert_eq!(pinned(v["items"].as_array().expect("items").clone()), want, "{v}");
    // The post's author cannot pin it again while it is hidden.
    let (st, v) = pin(&app, &cs[1]).await;
    assert_error(st, &v, 404, "not_found");
    app.stop().await;
}

/// A pinned comment that reports made pending keeps its pin slot (a wave of reports does not
/// cost the author their pins): it is not shown while pending, a fourth pin is refused, and
/// once the post's author approves it, it is back among the pinned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_comment_reports_hold_keeps_its_pin_slot_until_approved() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let mut cs = Vec::new();
    for u in 10..14u64 {
        cs.push(comment(&app, u, 1, &format!("comment number {u}")).await);
    }
    for c in &cs[..3] {
        assert_eq!(pin(&app, c).await.0, StatusCode::NO_CONTENT);
    }
    for reporter in 40..45u64 {
        report(&app, reporter, &id(&cs[1])).await;
    }
    let pinned =
        |items: Vec<Value>| -> Vec<String> { items.iter().filter(|c| c["pinned"] == true).map(id).collect() };
    app.wait_until(|| async { pinned(list(&app, 5, 1, "top").await) == [id(&cs[0]), id(&cs[2])] }).await;
    let (st, v) = pin(&app, &cs[3]).await;
    assert_error(st, &v, 409, "conflict");
    let (st, v) = app
        .call(Method::POST, &format!("/v1/comments/{}/approve", id(&cs[1])), Some(&app.user(7)), None)
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let want = [id(&cs[0]), id(&cs[1]), id(&cs[2])];
    for viewer in [5u64, 11, 7] {
        assert_eq!(pinned(list(&app, viewer, 1, "top").await), want, "viewer {viewer}");
    }
    app.stop().await;
}

/// The posts of a feed page as `viewer` sees them (the batched route), by post ID.
async fn feed(app: &TestApp, viewer: u64, posts: &[u64]) -> Vec<Value> {
    let ids: Vec<String> = posts.iter().map(u64::to_string).collect();
    let path = format!("/v1/posts?ids={}", ids.join(","));
    let (st, v) = app.call(Method::GET, &path, Some(&app.user(viewer)), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let got = v["posts"].as_array().expect("posts").clone();
    assert_eq!(got.len(), posts.len(), "{v}");
    got
}

/// (comment_count, preview comment IDs) of a post view.
fn counted(post: &Value) -> (i64, Vec<String>) {
    let previews = post["preview_comments"].as_array().expect("preview_comments");
    (post["comment_count"].as_i64().expect("comment_count"), previews.iter().map(id).collect())
}

/// A held comment is an ordinary comment to its author on every route (shadow visibility):
/// counted in the `comment_count` they see and among their `preview_comments`, on one post
/// and on a feed page, where their comment lists show it too. Nobody else sees or counts it,
/// the post's author included. Deleted, it no longer counts for its author; approved, it
/// counts once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_comment_counts_and_previews_for_its_author_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    for p in 1..=4 {
        app.post(p, 7, false).await;
    }
    let (st, _) = app
        .call(Method::PUT, "/v1/me/hidden-words", Some(&app.user(7)), Some(r#"{"words":["rubbish"]}"#))
        .await;
    assert_eq!(st, StatusCode::OK);
    // Post 1 and 2: a held comment of user 11 among visible ones; post 3: only a held one;
    // post 4: none.
    let held1 = comment(&app, 11, 1, "what rubbish is this").await;
    let held2 = comment(&app, 11, 2, "more rubbish, truly").await;
    let held3 = comment(&app, 11, 3, "rubbish all the way down").await;
    let open1 = comment(&app, 10, 1, "a fine post").await;
    let open2 = comment(&app, 10, 2, "a fine photo").await;
    for c in [&held1, &held2, &held3] {
        assert!(
            list(&app, 11, c["post_id"].as_str().expect("post").parse().expect("id"), "newest")
                .await
                .iter()
                .any(|x| id(x) == id(c) && x["status"] == "visible")
        );
    }
    // Written after the held comments on the same posts: once counted, the held ones are past
    // the counters too.
    app.wait_until(|| async { feed(&app, 12, &[1, 2]).await.iter().all(|p| p["comment_count"] == 1) }).await;
    let page = [1, 2, 3, 4];
    let (h1, h2, h3, o1, o2) = (id(&held1), id(&held2), id(&held3), id(&open1), id(&open2));

    // Its author: counted and previewed, on the single-post route and on the feed page.
    let mine = feed(&app, 11, &page).await;
    let (n, pv) = counted(&mine[0]);
    assert_eq!(n, 2, "post 1: {:?}", mine[0]);
    assert!(pv.contains(&h1) && pv.contains(&o1), "post 1 previews: {pv:?}");
    let (n, pv) = counted(&mine[1]);
    assert_eq!((n, pv.contains(&h2) && pv.contains(&o2)), (2, true), "post 2: {:?}", mine[1]);
    assert_eq!(counted(&mine[2]), (1, vec![h3.clone()]), "post 3, only a held comment");
    assert_eq!(counted(&mine[3]), (0, vec![]), "post 4");
    let shown = mine[2]["preview_comments"][0].clone();
    assert_eq!(shown["status"], "visible", "shown as an ordinary comment: {shown}");
    for (p, want) in [(1u64, &mine[0]), (3, &mine[2])] {
        assert_eq!(counted(&app.view(11, p).await), counted(want), "GET /v1/posts/{p}");
    }

    // Anyone else, the post's author included: neither counted nor previewed.
    for viewer in [12, 7] {
        let theirs = feed(&app, viewer, &page).await;
        assert_eq!(counted(&theirs[0]), (1, vec![o1.clone()]), "viewer {viewer}, post 1");
        assert_eq!(counted(&theirs[1]), (1, vec![o2.clone()]), "viewer {viewer}, post 2");
        assert_eq!(counted(&theirs[2]), (0, vec![]), "viewer {viewer}, post 3");
        assert_eq!(counted(&app.view(viewer, 3).await), (0, vec![]), "viewer {viewer}, GET post 3");
    }

    // Hidden by a moderator, it stays shadowed for its author, as in their comment list.
    let (st, _) = moderate(&app, &held3, "hide").await;
    assert_eq!(st, StatusCode::OK);
    assert!(list(&app, 11, 3, "top").await.iter().any(|x| id(x) == h3));
    assert_eq!(counted(&app.view(11, 3).await), (1, vec![h3.clone()]));
    assert_eq!(counted(&app.view(12, 3).await), (0, vec![]));

    // Deleted by its author: no longer counted or previewed for them either.
    for c in [&held1, &held3] {
        let (st, v) =
            app.call(Method::DELETE, &format!("/v1/comments/{}", id(c)), Some(&app.user(11)), None).await;
        assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
    }
    let mine = feed(&app, 11, &page).await;
    assert_eq!(counted(&mine[0]), (1, vec![o1.clone()]), "post 1 after the delete");
    assert_eq!(counted(&mine[2]), (0, vec![]), "post 3 after the delete");
    assert_eq!(counted(&app.view(11, 3).await), (0, vec![]));

    // Approved: counted for everyone, once for its author.
    let (st, _) = moderate(&app, &held2, "approve").await;
    assert_eq!(st, StatusCode::OK);
    app.wait_until(|| async { app.view(12, 2).await["comment_count"] == 2 }).await;
    let (n, pv) = counted(&app.view(11, 2).await);
    assert_eq!((n, pv.iter().filter(|c| **c == h2).count()), (2, 1), "{pv:?}");
    app.stop().await;
}

/// The replies under `parent` as `viewer` sees them.
async fn replies(app: &TestApp, viewer: u64, parent: &Value) -> Vec<Value> {
    let path = format!("/v1/comments/{}/replies?limit=100", id(parent));
    let (st, v) = app.call(Method::GET, &path, Some(&app.user(viewer)), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["items"].as_array().expect("items").clone()
}

/// The `reply_count` of `parent` on every route that shows it to `viewer`: the post's
/// comment lists (each order), its previews on the single-post route and on a feed page.
async fn reply_counts(app: &TestApp, viewer: u64, parent: &Value) -> Vec<(String, i64)> {
    let post: u64 = parent["post_id"].as_str().expect("post_id").parse().expect("post id");
    let count = |items: &[Value], route: &str| -> (String, i64) {
        let c = items.iter().find(|c| id(c) == id(parent)).unwrap_or_else(|| panic!("{route}: no parent"));
        (route.to_string(), c["reply_count"].as_i64().expect("reply_count"))
    };
    let mut out = Vec::new();
    for order in ["top", "newest", "oldest"] {
        out.push(count(&list(app, viewer, post, order).await, order));
    }
    let single = app.view(viewer, post).await;
    out.push(count(single["preview_comments"].as_array().expect("previews"), "post preview"));
    let page = feed(app, viewer, &[post]).await;
    out.push(count(page[0]["preview_comments"].as_array().expect("previews"), "feed preview"));
    out
}

/// (comment_count on the single-post route, on a feed page) of `post` for `viewer`.
async fn comment_counts(app: &TestApp, viewer: u64, post: u64) -> (i64, i64) {
    let single = app.view(viewer, post).await["comment_count"].as_i64().expect("comment_count");
    let page = feed(app, viewer, &[post, post + 1]).await;
    (single, page[0]["comment_count"].as_i64().expect("comment_count"))
}

/// A held reply is an ordinary reply to its author on every route, as a held top-level
/// comment is: counted in the post's `comment_count` and its parent's `reply_count` they see
/// (lists, previews, feed), and listed among the parent's replies as visible. Nobody else
/// sees or counts it: the parent's author, the post's author, anyone. Under a parent others
/// cannot see, a reply counts for no one (as a visible one would not). Deleted, it no longer
/// counts for its author; approved, it counts once, for everyone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_reply_counts_for_its_author_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    let (post_author, parent_author, replier, other) = (7, 10, 11, 12);
    for p in 1..=3 {
        app.post(p, post_author, false).await;
    }
    let (st, _) = app
        .call(
            Method::PUT,
            "/v1/me/hidden-words",
            Some(&app.user(post_author)),
            Some(r#"{"words":["rubbish"]}"#),
        )
        .await;
    assert_eq!(st, StatusCode::OK);
    let parent = comment(&app, parent_author, 1, "a fine post").await;
    let held = reply(&app, replier, 1, &parent, "what rubbish is this").await;
    let open = reply(&app, other, 1, &parent, "agreed, a fine post").await;
    let mine = replies(&app, replier, &parent).await;
    let shown = mine.iter().find(|r| id(r) == id(&held)).expect("its author finds the held reply");
    assert_eq!(shown["status"], "visible", "shown as an ordinary reply: {shown}");
    assert_eq!(mine.len(), 2, "{mine:?}");
    for viewer in [other, parent_author, post_author] {
        let theirs: Vec<String> = replies(&app, viewer, &parent).await.iter().map(id).collect();
        assert_eq!(theirs, [id(&open)], "viewer {viewer}");
    }
    // Written after the held reply: once counted, the held one is past the counters too.
    app.wait_until(|| async { app.view(other, 1).await["comment_count"] == 2 }).await;

    let all = |routes: Vec<(String, i64)>, want: i64| routes.iter().all(|(_, n)| *n == want);
    let got = reply_counts(&app, replier, &parent).await;
    assert!(all(got.clone(), 2), "its author counts it under the parent: {got:?}");
    assert_eq!(comment_counts(&app, replier, 1).await, (3, 3), "its author counts it on the post");
    for viewer in [other, parent_author, post_author] {
        let got = reply_counts(&app, viewer, &parent).await;
        assert!(all(got.clone(), 1), "viewer {viewer}: {got:?}");
        assert_eq!(comment_counts(&app, viewer, 1).await, (2, 2), "viewer {viewer}");
    }

    // Under their own held comment (ordinary to them too), their held reply counts for them
    // alone, as the parent does.
    let held_parent = comment(&app, replier, 2, "rubbish, all of it").await;
    let under = reply(&app, replier, 2, &held_parent, "rubbish indeed").await;
    assert!(replies(&app, replier, &held_parent).await.iter().any(|r| id(r) == id(&under)));
    assert_eq!(comment_counts(&app, replier, 2).await, (2, 2), "the held comment and its reply");
    let got = reply_counts(&app, replier, &held_parent).await;
    assert!(all(got.clone(), 1), "under their own held comment: {got:?}");
    for viewer in [other, parent_author, post_author] {
        assert_eq!(comment_counts(&app, viewer, 2).await, (0, 0), "viewer {viewer}");
    }

    // Deleted by its author: no longer counted for them either.
    let (st, v) = app
        .call(Method::DELETE, &format!("/v1/comments/{}", id(&held)), Some(&app.user(replier)), None)
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
    let got = reply_counts(&app, replier, &parent).await;
    assert!(all(got.clone(), 1), "after the delete: {got:?}");
    assert_eq!(comment_counts(&app, replier, 1).await, (2, 2));

    // Approved: counted for everyone, once for its author.
    let again = reply(&app, replier, 1, &parent, "rubbish, said again").await;
    assert_eq!(comment_counts(&app, replier, 1).await, (3, 3));
    let (st, _) = moderate(&app, &again, "approve").await;
    assert_eq!(st, StatusCode::OK);
    app.wait_until(|| async { app.view(other, 1).await["comment_count"] == 3 }).await;
    app.wait_until(|| async { all(reply_counts(&app, other, &parent).await, 2) }).await;
    assert_eq!(comment_counts(&app, replier, 1).await, (3, 3));
    let got = reply_counts(&app, replier, &parent).await;
    assert!(all(got.clone(), 2), "approved, counted once: {got:?}");
    app.stop().await;
}

/// The replies under a viewer's own held top-level comment count for that viewer as if the
/// comment were visible: it is an ordinary comment to them, and so is its thread. Held by
/// reports after two replies came (its author's and another user's), it keeps counting for
/// its author with both replies, in the post's `comment_count` and its `reply_count`, on
/// every route. Others count neither it nor its replies, and apart from the post's author
/// (who reviews it) do not see it; approved, the thread counts once, for everyone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_under_a_reported_comment_count_for_its_author_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    let (post_author, author, replier, other) = (7, 11, 12, 13);
    for p in 1..=2 {
        app.post(p, post_author, false).await;
    }
    let all = |routes: Vec<(String, i64)>, want: i64| routes.iter().all(|(_, n)| *n == want);
    let top = comment(&app, author, 1, "a thoughtful remark").await;
    reply(&app, author, 1, &top, "adding to my own remark").await;
    reply(&app, replier, 1, &top, "a fair point").await;
    app.wait_until(|| async { app.view(other, 1).await["comment_count"] == 3 }).await;
    assert_eq!(comment_counts(&app, author, 1).await, (3, 3), "before the reports");
    for reporter in 80..85 {
        report(&app, reporter, &id(&top)).await;
    }
    app.wait_until(|| async {
        app.view(other, 1).await["comment_count"] == 0
            && counted(&app.view(author, 1).await).1.contains(&id(&top))
    })
    .await;
    assert_eq!(replies(&app, author, &top).await.len(), 2, "both replies listed for its author");
    assert_eq!(comment_counts(&app, author, 1).await, (3, 3), "the held comment and its replies");
    let got = reply_counts(&app, author, &top).await;
    assert!(all(got.clone(), 2), "its replies, under the held comment: {got:?}");
    for viewer in [replier, other, post_author] {
        assert_eq!(counted(&app.view(viewer, 1).await), (0, vec![]), "viewer {viewer}");
        assert_eq!(comment_counts(&app, viewer, 1).await, (0, 0), "viewer {viewer}");
    }
    for viewer in [replier, other] {
        assert!(list(&app, viewer, 1, "newest").await.is_empty(), "viewer {viewer}");
    }

    // Approved: counted for everyone, once for its author.
    let (st, _) = moderate(&app, &top, "approve").await;
    assert_eq!(st, StatusCode::OK);
    app.wait_until(|| async { app.view(other, 1).await["comment_count"] == 3 }).await;
    app.wait_until(|| async { all(reply_counts(&app, other, &top).await, 2) }).await;
    assert_eq!(comment_counts(&app, author, 1).await, (3, 3), "approved");
    let got = reply_counts(&app, author, &top).await;
    assert!(all(got.clone(), 2), "approved, counted once: {got:?}");
    app.stop().await;
}

/// A clean reply under its author's own comment held by a hidden word is not held itself,
/// but others do not see it, the parent being hidden from them: its author counts it, in
/// the post's `comment_count` and the held comment's `reply_count`, on every route. Nobody
/// else counts either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_reply_under_a_filtered_comment_counts_for_its_author_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    let (post_author, author, other) = (7, 11, 13);
    for p in 1..=2 {
        app.post(p, post_author, false).await;
    }
    let (st, _) = app
        .call(
            Method::PUT,
            "/v1/me/hidden-words",
            Some(&app.user(post_author)),
            Some(r#"{"words":["zorble"]}"#),
        )
        .await;
    assert_eq!(st, StatusCode::OK);
    let filtered = comment(&app, author, 1, "what a zorble").await;
    let under = reply(&app, author, 1, &filtered, "a clean follow-up").await;
    assert_eq!(under["status"], "visible", "{under}");
    app.wait_until(|| async { counted(&app.view(author, 1).await).1.contains(&id(&filtered)) }).await;
    assert_eq!(comment_counts(&app, author, 1).await, (2, 2), "the held comment and its reply");
    let got = reply_counts(&app, author, &filtered).await;
    assert!(got.iter().all(|(_, n)| *n == 1), "the clean reply, under the held comment: {got:?}");
    for viewer in [other, post_author] {
        assert_eq!(comment_counts(&app, viewer, 1).await, (0, 0), "viewer {viewer}");
        assert!(list(&app, viewer, 1, "newest").await.is_empty(), "viewer {viewer}");
    }
    app.stop().await;
}

/// A report of `comment` by `user` (202).
async fn report(app: &TestApp, user: u64, comment: &str) {
    let path = format!("/v1/comments/{comment}/reports");
    let (st, v) = app.call(Method::POST, &path, Some(&app.user(user)), Some(r#"{"reason":"spam"}"#)).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
}

/// The hiding report of a comment races a moderator's approval of it, many times over: four
/// reports queue a visible comment, then the fifth reporter and the moderator are released
/// together. Whatever the interleaving, a comment left pending is in the review queue, held
/// by reports: the status and the queue entry are written together, and the hold applies only
/// to a comment still visible when it is written. (Either end is a serial outcome: approved
/// and out of the queue, approved and queued again by the later report, or held again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_report_racing_an_approval_never_leaves_a_pending_comment_out_of_the_queue() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = std::sync::Arc::new(TestApp::start(dir.path()).await);
    let mut pending = 0;
    for trial in 0..30u64 {
        let post = 1000 + trial;
        app.post(post, 7, false).await;
        let c = comment(&app, 2000 + trial, post, "an ordinary looking comment").await;
        let cid = id(&c);
        for u in 80..84u64 {
            report(&app, u, &cid).await;
        }
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(2));
        let reporting = {
            let (app, barrier, cid) = (app.clone(), barrier.clone(), cid.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                report(&app, 84, &cid).await;
            })
        };
        let approving = {
            let (app, barrier, c) = (app.clone(), barrier.clone(), c.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let (st, v) = moderate(&app, &c, "approve").await;
                assert_eq!(st, StatusCode::OK, "{v}");
            })
        };
        reporting.await.expect("join");
        approving.await.expect("join");
        let (st, v) = app
            .call(Method::GET, &format!("/v1/posts/{post}/comments?order=newest"), Some(&app.service()), None)
            .await;
        assert_eq!(st, StatusCode::OK, "{v}");
        let status = v["items"][0]["status"].as_str().expect("status").to_string();
        let queued = queue(&app).await.into_iter().find(|x| id(x) == cid);
        if status == "pending" {
            pending += 1;
            let item = queued.unwrap_or_else(|| panic!("trial {trial}: pending, not in the review queue"));
            assert_eq!(item["held_by"], "reports", "trial {trial}: {item}");
        } else {
            assert_eq!(status, "visible", "trial {trial}");
        }
    }
    eprintln!("trials that ended pending: {pending} of 30");
}

/// A commenter's own held comments count for them in their post views, also when their
/// earlier pages were read while they had nothing held (what is known of that is forgotten
/// when something of theirs is held, whether at creation or by a moderator later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_comments_count_for_their_author_after_pages_read_with_nothing_held() {
    let dir = tempfile::tempdir().expect("tempdir");
    let owned = TestApp::start(dir.path()).await;
    let app = &owned;
    let count = move |post| async move { app.view(11, post).await["comment_count"].as_i64() };
    app.post(1, 7, false).await;
    app.post(2, 7, false).await;
    let (st, _) = app
        .call(Method::PUT, "/v1/me/hidden-words", Some(&app.user(7)), Some(r#"{"words":["rubbish"]}"#))
        .await;
    assert_eq!(st, StatusCode::OK);
    let parent = comment(app, 10, 1, "a fine post").await;
    let mine = comment(app, 11, 1, "a fine post too").await;
    app.wait_until(|| async { app.view(12, 1).await["comment_count"] == 2 }).await;
    for _ in 0..3 {
        assert_eq!((count(1).await, count(2).await), (Some(2), Some(0)), "nothing of 11's held");
    }

    // Held at creation: a top-level comment, then a reply.
    comment(app, 11, 2, "rubbish, this").await;
    assert_eq!(count(2).await, Some(1), "their held comment counts for them");
    reply(app, 11, 1, &parent, "more rubbish").await;
    assert_eq!(count(1).await, Some(3), "and their held reply");
    assert_eq!(app.view(12, 2).await["comment_count"], 0, "for them alone");

    // Held later: a moderator hides their visible comment; to them it still counts.
    let (st, v) = moderate(app, &mine, "hide").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    app.wait_until(|| async { app.view(12, 1).await["comment_count"] == 1 }).await;
    for _ in 0..3 {
        assert_eq!(count(1).await, Some(3));
    }
    // Approved: it counts for everyone, and for them once.
    let (st, v) = moderate(app, &mine, "approve").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    app.wait_until(|| async { app.view(12, 1).await["comment_count"] == 2 }).await;
    app.wait_until(|| async { count(1).await == Some(3) }).await;
    owned.stop().await;
}

/// Poll the `comment_count` `viewer` sees of `post`, on the single-post route and on a feed
/// page, until `stop`: every value seen.
fn watch_count(
    app: std::sync::Arc<TestApp>,
    viewer: u64,
    post: u64,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Vec<i64>> {
    tokio::spawn(async move {
        let mut seen = Vec::new();
        while !stop.load(std::sync::atomic::Ordering::Acquire) {
            seen.push(app.view(viewer, post).await["comment_count"].as_i64().expect("count"));
            seen.push(feed(&app, viewer, &[post]).await[0]["comment_count"].as_i64().expect("count"));
        }
        seen
    })
}

/// Run `change` while the author's view of the post is polled, wait until everyone else sees
/// `others` (the aggregator committed the change), keep polling a moment, and return every
/// count the author saw.
async fn author_counts_around<F, Fut>(
    app: &std::sync::Arc<TestApp>,
    author: u64,
    post: u64,
    others: i64,
    change: F,
) -> Vec<i64>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watchers: Vec<_> = (0..2).map(|_| watch_count(app.clone(), author, post, stop.clone())).collect();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    change().await;
    app.wait_until(|| async { app.view(common::OBSERVER, post).await["comment_count"] == others }).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Release);
    let mut seen = Vec::new();
    for w in watchers {
        seen.extend(w.await.expect("join"));
    }
    seen
}

/// The author of a comment sees it counted whether it is held or not, so approving or holding
/// it never moves the `comment_count` they see (on a post and on a feed page), neither while
/// the counters catch up with the change nor after: not when the post's author approves it
/// (no dip), reports hold it with a reply under it (never counted twice), a moderator
/// approves it, or hides it; nor when the post's author approves their held reply. Everyone
/// else sees each change once the counters have it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn approvals_and_holds_never_move_their_authors_counts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = std::sync::Arc::new(TestApp::start(dir.path()).await);
    let (post_author, author, replier) = (7, 11, 12);
    app.post(1, post_author, false).await;
    // The post's author restricts the author: their comments wait for the post author's
    // approval.
    let path = format!("/v1/me/restricts/{author}");
    let (st, _) = app.call(Method::PUT, &path, Some(&app.user(post_author)), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let open = comment(&app, 10, 1, "a fine post").await;
    let mine = comment(&app, author, 1, "a thoughtful remark").await;
    app.wait_until(|| async { app.view(common::OBSERVER, 1).await["comment_count"] == 1 }).await;
    assert_eq!(app.view(author, 1).await["comment_count"], 2);
    let never_moves = |seen: Vec<i64>, want: i64, what: &str| {
        let moved: Vec<&i64> = seen.iter().filter(|n| **n != want).collect();
        assert!(moved.is_empty(), "{what}: the author saw {moved:?} among {} counts of {want}", seen.len());
    };

    let approve = |c: Value| {
        let app = app.clone();
        async move {
            let path = format!("/v1/comments/{}/approve", id(&c));
            let (st, v) = app.call(Method::POST, &path, Some(&app.user(post_author)), None).await;
            assert_eq!(st, StatusCode::OK, "{v}");
        }
    };
    let seen = author_counts_around(&app, author, 1, 2, || approve(mine.clone())).await;
    never_moves(seen, 2, "approved by the post's author");

    reply(&app, replier, 1, &mine, "a fair point").await;
    app.wait_until(|| async { app.view(common::OBSERVER, 1).await["comment_count"] == 3 }).await;
    let seen = author_counts_around(&app, author, 1, 1, || async {
        for reporter in 80..85 {
            report(&app, reporter, &id(&mine)).await;
        }
    })
    .await;
    never_moves(seen, 3, "held by reports, with a reply");

    let seen = author_counts_around(&app, author, 1, 3, || async {
        let (st, v) = moderate(&app, &mine, "approve").await;
        assert_eq!(st, StatusCode::OK, "{v}");
    })
    .await;
    never_moves(seen, 3, "approved by a moderator");
    let seen = author_counts_around(&app, author, 1, 1, || async {
        let (st, v) = moderate(&app, &mine, "hide").await;
        assert_eq!(st, StatusCode::OK, "{v}");
    })
    .await;
    never_moves(seen, 3, "hidden by a moderator");

    let held_reply = reply(&app, author, 1, &open, "and another thought").await;
    assert_eq!(app.view(author, 1).await["comment_count"], 4, "their held reply counts for them");
    let seen = author_counts_around(&app, author, 1, 2, || approve(held_reply.clone())).await;
    never_moves(seen, 4, "their reply approved by the post's author");
}
