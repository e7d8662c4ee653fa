//! Appeals, the reasons the review queue gives (`held_by`), and the text rules a commenter
//! meets first (invisible text, hidden words as whole words), through the API.

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

async fn appeal(app: &TestApp, token: &str, c: &Value, body: Option<&str>) -> (StatusCode, Value) {
    app.call(Method::POST, &format!("/v1/comments/{}/appeal", id(c)), Some(token), body).await
}

async fn queued(app: &TestApp, c: &Value) -> Option<Value> {
    let (st, v) = app.call(Method::GET, "/v1/moderation/queue?limit=100", Some(&app.service()), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["items"].as_array().expect("items").iter().find(|x| id(x) == id(c)).cloned()
}

async fn visible_to(app: &TestApp, viewer: u64, post: u64, c: &Value) -> bool {
    let path = format!("/v1/posts/{post}/comments?order=newest&limit=100");
    let (st, v) = app.call(Method::GET, &path, Some(&app.user(viewer)), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["items"].as_array().expect("items").iter().any(|x| id(x) == id(c))
}

async fn moderate(app: &TestApp, c: &Value, action: &str) -> Value {
    let body = json!({ "action": action }).to_string();
    let path = format!("/v1/moderation/comments/{}", id(c));
    let (st, v) = app.call(Method::POST, &path, Some(&app.service()), Some(&body)).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_appealed_held_comment_is_queued_and_approval_restores_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let (st, _) = app
        .call(Method::PUT, "/v1/me/hidden-words", Some(&app.user(7)), Some(r#"{"words":["rubbish"]}"#))
        .await;
    assert_eq!(st, StatusCode::OK);
    let fine = comment(&app, 10, 1, "an ordinary remark").await;
    let held = comment(&app, 11, 1, "I meant rubbish as in the band").await;
    app.wait_until(|| async { app.view(12, 1).await["comment_count"] == 1 }).await;
    let item = queued(&app, &held).await.expect("held comments are queued");
    assert_eq!(
        (&item["held_by"], &item["appealed"], &item["appeal_message"]),
        (&json!("hidden_words"), &json!(false), &Value::Null)
    );

    // Only its author may appeal: anyone else, moderators included, is told it does not exist.
    for token in [app.user(12), app.user(7), app.service()] {
        let (st, v) = appeal(&app, &token, &held, None).await;
        assert_error(st, &v, 404, "not_found");
    }
    let (st, v) = appeal(&app, &app.user(11), &held, Some(r#"{"message":"it is a band name"}"#)).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    let item = queued(&app, &held).await.expect("still queued");
    assert_eq!(
        (&item["held_by"], &item["appealed"], &item["appeal_message"]),
        (&json!("hidden_words"), &json!(true), &json!("it is a band name"))
    );
    let (st, v) = appeal(&app, &app.user(11), &held, None).await;
    assert_error(st, &v, 409, "conflict");

    // Approved: visible to others, counted, and its post's author is notified.
    let v = moderate(&app, &held, "approve").await;
    assert_eq!(v["status"], "visible");
    assert!(visible_to(&app, 12, 1, &held).await);
    assert!(queued(&app, &held).await.is_none(), "decided: out of the queue");
    app.wait_until(|| async { app.view(12, 1).await["comment_count"] == 2 }).await;
    app.wait_until(|| async {
        let (_, v) = app.call(Method::GET, "/v1/me/notifications", Some(&app.user(7)), None).await;
        v["items"].as_array().is_some_and(|items| {
            items.iter().any(|n| n["kind"] == "commented" && n["comment_id"] == json!(id(&held)))
        })
    })
    .await;

    // The same answer for a comment nobody held, which never enters the queue.
    let (st, v) = appeal(&app, &app.user(10), &fine, Some("{}")).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    assert!(queued(&app, &fine).await.is_none());
    let (st, v) = appeal(&app, &app.user(10), &fine, None).await;
    assert_error(st, &v, 409, "conflict");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_says_which_layer_holds_each_comment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let (st, _) = app.call(Method::PUT, "/v1/me/restricts/20", Some(&app.user(7)), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let restricted = comment(&app, 20, 1, "hello from a restricted account").await;
    let spam = comment(&app, 21, 1, "BUY NOW!!!!!!!! cheap-pills.biz www.x.ru http://spam.io").await;
    let reported = comment(&app, 22, 1, "an ordinary looking comment").await;
    let path = format!("/v1/comments/{}/reports", id(&reported));
    let (st, _) = app.call(Method::POST, &path, Some(&app.user(30)), Some(r#"{"reason":"spam"}"#)).await;
    assert_eq!(st, StatusCode::ACCEPTED);
    let item = queued(&app, &reported).await.expect("reported comments are queued");
    assert_eq!((&item["status"], &item["held_by"]), (&json!("visible"), &Value::Null), "reported, not held");
    for u in 31..35u64 {
        let (st, _) = app.call(Method::POST, &path, Some(&app.user(u)), Some(r#"{"reason":"spam"}"#)).await;
        assert_eq!(st, StatusCode::ACCEPTED);
    }
    for (c, status, layer) in [
        (&restricted, "restricted", "restricted"),
        (&spam, "hidden_by_filter", "classifier"),
        (&reported, "pending", "reports"),
    ] {
        let item = queued(&app, c).await.expect("queued");
        assert_eq!(
            (item["status"].as_str(), item["held_by"].as_str()),
            (Some(status), Some(layer)),
            "{item}"
        );
        assert_eq!(item["appealed"], false);
    }

    // Hidden by a moderator, it leaves the queue; the author's appeal brings it back, and the
    // queue says who held it.
    moderate(&app, &reported, "hide").await;
    assert!(queued(&app, &reported).await.is_none());
    let (st, v) = appeal(&app, &app.user(22), &reported, None).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    let item = queued(&app, &reported).await.expect("appealed: queued again");
    assert_eq!(
        (&item["held_by"], &item["appealed"], &item["appeal_message"]),
        (&json!("moderator"), &json!(true), &json!(""))
    );
    assert!(!visible_to(&app, 40, 1, &reported).await, "still hidden until someone decides");
    moderate(&app, &reported, "approve").await;
    assert!(visible_to(&app, 40, 1, &reported).await);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appeal_bodies_are_checked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let c = comment(&app, 10, 1, "a comment").await;
    let token = app.user(10);
    let (st, v) = appeal(&app, &token, &c, Some(r#"{"reason":"x"}"#)).await;
    assert_error(st, &v, 422, "invalid");
    let long = json!({ "message": "x".repeat(1001) }).to_string();
    let (st, v) = appeal(&app, &token, &c, Some(&long)).await;
    assert_error(st, &v, 400, "invalid");
    let (st, v) = app.call(Method::POST, "/v1/comments/999999/appeal", Some(&token), None).await;
    assert_error(st, &v, 404, "not_found");
    let (st, v) = appeal(&app, &token, &c, Some(r#"{"message":"please"}"#)).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invisible_text_is_empty_and_hidden_words_hide_only_their_own_words() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    for blank in ["\u{200b}\u{200b}", " \u{200d}\u{2060} ", "\u{ad}"] {
        let body = json!({ "text": blank }).to_string();
        let (st, v) = app.call(Method::POST, "/v1/posts/1/comments", Some(&app.user(10)), Some(&body)).await;
        assert_error(st, &v, 400, "invalid");
    }
    let words = r#"{"words":["ass","god","to","rubbish"]}"#;
    let (st, _) = app.call(Method::PUT, "/v1/me/hidden-words", Some(&app.user(7)), Some(words)).await;
    assert_eq!(st, StatusCode::OK);
    for (text, hidden) in [
        ("as good as it gets, me too", false),
        ("first class, I pass", false),
        ("what an asssss", true),
        ("what an a$$", true),
        ("rub\u{200b}bish", true),
        ("ｒｕｂｂｉｓｈ", true),
        ("rubbіsh", true),
        ("𝐫𝐮𝐛𝐛𝐢𝐬𝐡", true),
    ] {
        let c = comment(&app, 11, 1, text).await;
        assert_eq!(!visible_to(&app, 12, 1, &c).await, hidden, "{text:?}");
        if hidden {
            let item = queued(&app, &c).await.expect("held comments are queued");
            assert_eq!(item["held_by"], "hidden_words");
        }
    }
    app.stop().await;
}

async fn report(app: &TestApp, user: u64, c: &Value) {
    let path = format!("/v1/comments/{}/reports", id(c));
    let (st, v) = app.call(Method::POST, &path, Some(&app.user(user)), Some(r#"{"reason":"spam"}"#)).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_stands_until_a_fresh_threshold_of_new_reporters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let c = comment(&app, 10, 1, "an opinion some people dislike").await;
    for u in 20..25 {
        report(&app, u, &c).await;
    }
    assert!(!visible_to(&app, 30, 1, &c).await, "five reporters hide it pending review");
    let path = format!("/v1/comments/{}/approve", id(&c));
    let (st, v) = app.call(Method::POST, &path, Some(&app.user(7)), None).await;
    assert_eq!((st, v["status"].as_str()), (StatusCode::OK, Some("visible")), "{v}");
    // One of the five reports again, then one new reporter: the approval stands.
    report(&app, 22, &c).await;
    assert!(visible_to(&app, 30, 1, &c).await, "a repeat report undid the approval");
    report(&app, 25, &c).await;
    assert!(visible_to(&app, 30, 1, &c).await, "one new reporter undid the approval");
    let item = queued(&app, &c).await.expect("a new report queues it");
    assert_eq!((item["status"].as_str(), item["report_count"].as_u64()), (Some("visible"), Some(6)));
    assert!(item["held_by"].is_null(), "{item}");
    // The author's one appeal is still theirs to use.
    let (st, v) = appeal(&app, &app.user(10), &c, None).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    // Four more new reporters make a fresh five since the approval: hidden again.
    for u in 26..29 {
        report(&app, u, &c).await;
        assert!(visible_to(&app, 30, 1, &c).await);
    }
    report(&app, 29, &c).await;
    assert!(!visible_to(&app, 30, 1, &c).await, "five new reporters hide it again");
    let item = queued(&app, &c).await.expect("queued");
    assert_eq!((item["status"].as_str(), item["held_by"].as_str()), (Some("pending"), Some("reports")));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn format_characters_are_dropped_or_refused_wherever_text_enters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    let words = json!({"words": ["scam\u{2060}link"]}).to_string();
    let (st, v) = app.call(Method::PUT, "/v1/me/hidden-words", Some(&app.user(7)), Some(&words)).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    // Hidden words see through every format character, not only the zero-width ones.
    for (u, c) in
        [(10u64, '\u{FFF9}'), (11, '\u{FFFB}'), (12, '\u{13430}'), (13, '\u{0600}'), (14, '\u{2029}')]
    {
        let held = comment(&app, u, 1, &format!("visit scam{c}link today")).await;
        assert!(!visible_to(&app, 30, 1, &held).await, "{c:?} let the hidden word through");
    }
    // Tag characters are not stored; an emoji's joiners are.
    let tagged = comment(&app, 20, 1, "hello\u{E0041}\u{E0042} there").await;
    assert_eq!(tagged["text"], "hello there");
    let coder = comment(&app, 21, 1, "👩\u{200D}💻 all night").await;
    assert_eq!(coder["text"], "👩\u{200D}💻 all night");
    // A name never holds a zero-width space; an appeal never holds an override.
    let body = json!({"username": "al\u{200B}ice", "verified": false}).to_string();
    let (st, v) = app.call(Method::PUT, "/v1/users/50", Some(&app.service()), Some(&body)).await;
    assert_error(st, &v, 400, "invalid");
    let body = json!({"message": "please \u{202E}kool"}).to_string();
    let (st, v) = appeal(&app, &app.user(20), &tagged, Some(&body)).await;
    assert_error(st, &v, 400, "invalid");
    app.stop().await;
}
