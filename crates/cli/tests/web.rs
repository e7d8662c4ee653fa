//! The web demo: the page is served by `serve`; the demo-only routes exist only in
//! `likewise demo`, whose seeded world has a viral post with a rounded count.

mod common;

use common::{TestApp, test_config};
use hyper::{Method, StatusCode};
use likewise_app::Application;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_has_the_page_but_no_demo_sign_in() {
    if common::scaled_out() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    let (st, _, _) = app.call_full(Method::GET, "/", None, None).await;
    assert_eq!(st, StatusCode::OK);
    for path in [
        "/moderate",
        "/settings",
        "/web/app.js",
        "/web/common.js",
        "/web/moderate.js",
        "/web/settings.js",
        "/web/app.css",
    ] {
        let (st, _, _) = app.call_full(Method::GET, path, None, None).await;
        assert_eq!(st, StatusCode::OK, "{path}");
    }
    for (m, path) in
        [(Method::GET, "/demo/token?user_id=1"), (Method::GET, "/demo/world"), (Method::POST, "/demo/storm")]
    {
        let (st, v) = app.call(m, path, None, None).await;
        assert_eq!(st, StatusCode::NOT_FOUND, "{path}: {v}");
    }
    app.stop().await;
}

type Client = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Full<bytes::Bytes>,
>;

async fn get(client: &(Client, String), path: &str, token: Option<&str>) -> (StatusCode, Value) {
    use http_body_util::BodyExt;
    let mut req = hyper::Request::get(format!("{}{path}", client.1));
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let resp = client.0.request(req.body(Default::default()).expect("request")).await.expect("send");
    let st = resp.status();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (st, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn demo_seeds_a_world_once_and_signs_in_seeded_users() {
    if common::scaled_out() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    for round in 0..2 {
        let cfg = test_config(dir.path());
        let app = Application::build(&cfg).await.expect("build");
        let world = likewise_app::demo::seed(&app.service()).await.expect("seed");
        let app = app.with_routes(likewise_http::web::demo_routes(world));
        let base = format!("http://{}", app.local_addr());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(app.run_until_stopped(async {
            let _ = rx.await;
        }));
        let client = (
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http(),
            base,
        );
        let (st, w) = get(&client, "/demo/world", None).await;
        assert_eq!(st, StatusCode::OK);
        assert_eq!(w["posts"].as_array().map(Vec::len), Some(30));
        let (st, _) = get(&client, "/demo/token?user_id=999999", None).await;
        assert_eq!(st, StatusCode::NOT_FOUND, "only seeded users");
        let (st, t) = get(&client, "/demo/token?user_id=1", None).await;
        assert_eq!(st, StatusCode::OK);
        assert_eq!(t["username"], "alice");
        let token = t["token"].as_str().expect("token").to_string();
        // The viral post's count converges to "12.3K"-style text.
        let mut text = String::new();
        for _ in 0..100 {
            let (st, v) = get(&client, "/v1/posts?ids=1001", Some(&token)).await;
            assert_eq!(st, StatusCode::OK);
            text = v["posts"][0]["like_count_text"].as_str().unwrap_or("").to_string();
            if text.ends_with('K') {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert_eq!(text, "12.3K", "round {round}");
        if round == 0 {
            moderator_has_something_to_act_on(&client, &token).await;
        }
        let _ = tx.send(());
        task.await.expect("join").expect("clean stop");
    }
}

/// The seeded moderator signs in with the service role, and the world gives every control of
/// the moderator's page something to act on: a held comment of every `held_by` reason, one
/// reported but still shown, an appeal, and a like farm the integrity consumer flags.
async fn moderator_has_something_to_act_on(client: &(Client, String), user_token: &str) {
    let (st, w) = get(client, "/demo/world", None).await;
    assert_eq!(st, StatusCode::OK);
    let moderator = w["moderator"]["user_id"].as_str().expect("a moderator").to_string();
    let (st, t) = get(client, &format!("/demo/token?user_id={moderator}"), None).await;
    assert_eq!(st, StatusCode::OK);
    let token = t["token"].as_str().expect("token").to_string();
    let (st, _) = get(client, "/v1/moderation/queue", Some(user_token)).await;
    assert_eq!(st, StatusCode::FORBIDDEN, "a seeded user is no moderator");
    let (st, q) = get(client, "/v1/moderation/queue?limit=100", Some(&token)).await;
    assert_eq!(st, StatusCode::OK, "{q}");
    let items = q["items"].as_array().expect("items");
    let mut reasons: Vec<String> =
        items.iter().map(|i| i["held_by"].as_str().unwrap_or("none").to_string()).collect();
    reasons.sort();
    reasons.dedup();
    assert_eq!(
        reasons,
        ["classifier", "hidden_words", "moderator", "near_duplicate", "none", "reports", "restricted"],
        "{q}"
    );
    assert!(
        items
            .iter()
            .any(|i| i["appealed"] == true && i["appeal_message"].as_str().is_some_and(|m| !m.is_empty())),
        "an appeal with a message: {q}"
    );
    let mut flags = Value::Null;
    for _ in 0..100 {
        let (st, v) = get(client, "/v1/moderation/integrity", Some(&token)).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        flags = v;
        if flags["items"].as_array().is_some_and(|f| !f.is_empty()) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let flagged: Vec<u64> = flags["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|f| f["user_id"].as_str().and_then(|u| u.parse().ok()).expect("user ID"))
        .collect();
    assert!(!flagged.is_empty(), "the like farm is flagged: {flags}");
    assert!(flagged.iter().all(|u| (800_001..800_025).contains(u)), "only the farm: {flagged:?}");
}
