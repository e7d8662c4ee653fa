//! The authorization matrix: every route of the API against every kind of caller, each cell
//! asserting the documented status. Callers: anonymous, a malformed token, an expired token
//! (signed with the right key), a token signed with another key, another user, the post's
//! author (or the resource's owner), and the service role.
//!
//! Then what a hostile client tries at the edge: scheme spellings and a second
//! `Authorization` header, `nbf` and overlong token lifetimes, bodies not declared JSON,
//! spoofing usernames, non-JSON errors, alternative ID spellings, and CORS.

mod common;

use common::{SECRET, TestApp};
use hyper::{Method, StatusCode};
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use likewise_core::ids::UserId;
use likewise_http::auth::{Claims, TokenKeys};
use serde_json::json;
use std::time::Duration;

const AUTHOR: u64 = 7;
const OTHER: u64 = 8;
const COMMENTER: u64 = 9;

fn expired() -> String {
    let claims = Claims { sub: AUTHOR.to_string(), exp: 1_000, role: None };
    encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(SECRET.as_bytes()))
        .expect("encode")
}

fn foreign() -> String {
    TokenKeys::new(b"some-other-secret-0123456789")
        .mint(UserId(AUTHOR), true, Duration::from_secs(600))
        .expect("mint")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_refuses_callers_without_a_valid_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(42, AUTHOR, false).await;
    let routes: &[(Method, &str, Option<&str>)] = &[
        (Method::PUT, "/v1/users/5", Some(r#"{"username":"eve"}"#)),
        (Method::PUT, "/v1/users/5/follows/6", None),
        (Method::DELETE, "/v1/users/5/follows/6", None),
        (Method::GET, "/v1/posts?ids=42", None),
        (Method::GET, "/v1/posts/42", None),
        (Method::PUT, "/v1/posts/42", Some(r#"{"author_id":"7"}"#)),
        (Method::PUT, "/v1/posts/42/like", None),
        (Method::DELETE, "/v1/posts/42/like", None),
        (Method::GET, "/v1/posts/42/likers", None),
        (Method::POST, "/v1/posts/42/views", None),
        (Method::GET, "/v1/posts/42/insights", None),
        (Method::GET, "/v1/posts/42/comments", None),
        (Method::POST, "/v1/posts/42/comments", Some(r#"{"text":"hi"}"#)),
        (Method::DELETE, "/v1/comments/1", None),
        (Method::GET, "/v1/comments/1/replies", None),
        (Method::PUT, "/v1/comments/1/like", None),
        (Method::DELETE, "/v1/comments/1/like", None),
        (Method::PUT, "/v1/me/settings", Some(r#"{"hide_like_counts":true}"#)),
        (Method::GET, "/v1/me/settings", None),
        (Method::PUT, "/v1/me/hidden-words", Some(r#"{"words":["x"]}"#)),
        (Method::GET, "/v1/me/notifications", None),
        (Method::GET, "/v1/me/notifications/stream", None),
        (Method::PUT, "/v1/me/blocks/5", None),
        (Method::DELETE, "/v1/me/blocks/5", None),
        (Method::PUT, "/v1/me/restricts/5", None),
        (Method::DELETE, "/v1/me/restricts/5", None),
        (Method::POST, "/v1/comments/1/reports", Some(r#"{"reason":"spam"}"#)),
        (Method::POST, "/v1/comments/1/approve", None),
        (Method::PUT, "/v1/posts/42/pins/1", None),
        (Method::DELETE, "/v1/posts/42/pins/1", None),
        (Method::GET, "/v1/moderation/queue", None),
        (Method::POST, "/v1/moderation/comments/1", Some(r#"{"action":"hide"}"#)),
    ];
    let (expired, foreign) = (expired(), foreign());
    let callers: [(&str, Option<&str>); 4] = [
        ("anonymous", None),
        ("malformed token", Some("not-a-jwt")),
        ("expired token", Some(&expired)),
        ("token signed with another key", Some(&foreign)),
    ];
    for (m, path, body) in routes {
        for (who, token) in &callers {
            let (st, v) = app.call(m.clone(), path, *token, *body).await;
            assert_eq!(st, StatusCode::UNAUTHORIZED, "{who} {m} {path}: {v}");
            assert_eq!(v["error"], "unauthenticated", "{who} {m} {path}: {v}");
        }
    }
    app.stop().await;
}

/// One cell of the matrix: method, path, body, who calls, their token, the expected status.
type Cell<'a> = (Method, String, Option<&'a str>, &'a str, &'a String, u16);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_act_only_as_themselves_and_only_authors_and_the_service_moderate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(42, AUTHOR, false).await;
    let (author, other, commenter, service) =
        (app.user(AUTHOR), app.user(OTHER), app.user(COMMENTER), app.service());
    let (st, c) = app
        .call(Method::POST, "/v1/posts/42/comments", Some(&commenter), Some(r#"{"text":"hello there"}"#))
        .await;
    assert_eq!(st, StatusCode::CREATED, "{c}");
    let cid = c["comment_id"].as_str().expect("id").to_string();

    // (method, path, body, caller, expected status)
    let cells: Vec<Cell> = vec![
        // Upstream data is the service's alone.
        (Method::PUT, "/v1/posts/43".into(), Some(r#"{"author_id":"8"}"#), "user", &other, 403),
        (Method::PUT, "/v1/posts/43".into(), Some(r#"{"author_id":"8"}"#), "service", &service, 200),
        (Method::PUT, "/v1/users/8".into(), Some(r#"{"username":"mallory"}"#), "user", &other, 403),
        (Method::PUT, "/v1/users/8".into(), Some(r#"{"username":"mallory"}"#), "service", &service, 200),
        (Method::PUT, "/v1/users/8/follows/7".into(), None, "user", &other, 403),
        (Method::PUT, "/v1/users/8/follows/7".into(), None, "service", &service, 204),
        // Insights: the post's author only.
        (Method::GET, "/v1/posts/42/insights".into(), None, "other user", &other, 403),
        (Method::GET, "/v1/posts/42/insights".into(), None, "author", &author, 200),
        // Moderation queue and decisions: the service role only.
        (Method::GET, "/v1/moderation/queue".into(), None, "author", &author, 403),
        (Method::GET, "/v1/moderation/queue".into(), None, "service", &service, 200),
        (
            Method::POST,
            format!("/v1/moderation/comments/{cid}"),
            Some(r#"{"action":"approve"}"#),
            "author",
            &author,
            403,
        ),
        // Pins: the post's author only.
        (Method::PUT, format!("/v1/posts/42/pins/{cid}"), None, "other user", &other, 403),
        (Method::PUT, format!("/v1/posts/42/pins/{cid}"), None, "commenter", &commenter, 403),
        (Method::PUT, format!("/v1/posts/42/pins/{cid}"), None, "author", &author, 204),
        (Method::DELETE, format!("/v1/posts/42/pins/{cid}"), None, "author", &author, 204),
        // Approving a comment: the post's author (not another user, not the commenter).
        (Method::POST, format!("/v1/comments/{cid}/approve"), None, "other user", &other, 403),
        (Method::POST, format!("/v1/comments/{cid}/approve"), None, "commenter", &commenter, 403),
        // Deleting a comment: its author or the post's author, nobody else.
        (Method::DELETE, format!("/v1/comments/{cid}"), None, "other user", &other, 403),
        (Method::DELETE, format!("/v1/comments/{cid}"), None, "commenter", &commenter, 204),
    ];
    for (m, path, body, who, token, want) in &cells {
        let (st, v) = app.call(m.clone(), path, Some(token), *body).await;
        assert_eq!(st.as_u16(), *want, "{who} {m} {path}: {v}");
        if *want >= 400 {
            assert!(
                v["error"].is_string() && v["message"].is_string(),
                "{who} {m} {path}: JSON error body {v}"
            );
        }
    }

    // Private state is per token: settings and notifications are the caller's own.
    let (st, _) =
        app.call(Method::PUT, "/v1/me/settings", Some(&author), Some(r#"{"hide_like_counts":true}"#)).await;
    assert_eq!(st, StatusCode::OK);
    let (_, mine) = app.call(Method::GET, "/v1/me/settings", Some(&author), None).await;
    let (_, theirs) = app.call(Method::GET, "/v1/me/settings", Some(&other), None).await;
    assert_eq!(
        (mine["hide_like_counts"].as_bool(), theirs["hide_like_counts"].as_bool()),
        (Some(true), Some(false))
    );
    app.like(COMMENTER, 42, true).await;
    app.wait_until(|| async {
        let (_, v) = app.call(Method::GET, "/v1/me/notifications", Some(&author), None).await;
        v["items"].as_array().is_some_and(|a| !a.is_empty())
    })
    .await;
    let (_, v) = app.call(Method::GET, "/v1/me/notifications", Some(&other), None).await;
    assert_eq!(v["items"].as_array().map(Vec::len), Some(0), "another user's inbox is not mine: {v}");
    app.stop().await;
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs()
}

fn signed(claims: serde_json::Value) -> String {
    encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(SECRET.as_bytes()))
        .expect("encode")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheme_is_case_insensitive_and_two_authorization_headers_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(42, AUTHOR, false).await;
    let t = app.user(OTHER);
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let auth = format!("{scheme} {t}");
        let (st, _, v) = app.raw("GET", "/v1/posts/42", &[("authorization", &auth)], "").await;
        assert_eq!(st, StatusCode::OK, "{scheme}: {v}");
    }
    let (mine, theirs) = (format!("Bearer {t}"), format!("Bearer {}", app.service()));
    let (st, _, v) =
        app.raw("PUT", "/v1/posts/43", &[("authorization", &mine), ("authorization", &theirs)], "").await;
    common::assert_error(st, &v, 400, "invalid");
    let (st, _, v) =
        app.raw("GET", "/v1/posts/42", &[("authorization", &mine), ("authorization", &mine)], "").await;
    common::assert_error(st, &v, 400, "invalid");
    let (st, _, v) = app.raw("GET", "/v1/posts/42", &[("authorization", &format!("Basic {t}"))], "").await;
    common::assert_error(st, &v, 401, "unauthenticated");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nbf_is_honoured_and_tokens_living_longer_than_the_maximum_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = common::test_config(dir.path());
    cfg.auth.max_token_ttl = "2h".into();
    let app = TestApp::start_with(cfg).await;
    app.post(42, AUTHOR, false).await;
    let t = now();
    let cases = [
        (json!({"sub": "8", "exp": t + 600, "nbf": t + 300}), 401, "not yet valid"),
        (json!({"sub": "8", "exp": t + 600, "nbf": t - 10}), 200, "valid since 10 s"),
        (json!({"sub": "8", "exp": t + 300 * 365 * 86_400}), 401, "300 years"),
        (json!({"sub": "8", "exp": t + 3 * 3600}), 401, "longer than auth.max_token_ttl"),
        (json!({"sub": "8", "exp": t + 3600}), 200, "within auth.max_token_ttl"),
    ];
    for (claims, want, what) in cases {
        let auth = format!("Bearer {}", signed(claims));
        // Twice: the verified-token cache must answer as the verification did.
        for _ in 0..2 {
            let (st, _, v) = app.raw("GET", "/v1/posts/42", &[("authorization", &auth)], "").await;
            assert_eq!(st.as_u16(), want, "{what}: {v}");
        }
    }
    // With the default (30 days), a 300-year token is refused as well.
    let dir2 = tempfile::tempdir().expect("tempdir");
    let app2 = TestApp::start(dir2.path()).await;
    let auth = format!("Bearer {}", signed(json!({"sub": "8", "exp": t + 31 * 86_400})));
    let (st, _, v) = app2.raw("GET", "/v1/me/settings", &[("authorization", &auth)], "").await;
    common::assert_error(st, &v, 401, "unauthenticated");
    app2.stop().await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_not_declared_json_are_refused_with_415() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(42, AUTHOR, false).await;
    let auth = format!("Bearer {}", app.user(OTHER));
    let body = r#"{"text":"hello"}"#;
    for ct in [None, Some("text/plain"), Some("application/x-www-form-urlencoded"), Some("application/jsonx")]
    {
        let mut h = vec![("authorization", auth.as_str())];
        if let Some(ct) = ct {
            h.push(("content-type", ct));
        }
        let (st, _, v) = app.raw("POST", "/v1/posts/42/comments", &h, body).await;
        common::assert_error(st, &v, 415, "unsupported_media_type");
        // Routes that take no body refuse one that is not JSON as well.
        let (st, _, v) = app.raw("PUT", "/v1/posts/42/like", &h, "x").await;
        common::assert_error(st, &v, 415, "unsupported_media_type");
    }
    // Two Content-Type headers are not a declaration either.
    let h = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
        ("content-type", "text/plain"),
    ];
    let (st, _, v) = app.raw("POST", "/v1/posts/42/comments", &h, body).await;
    common::assert_error(st, &v, 415, "unsupported_media_type");
    for ct in [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON",
        "application/vnd.likewise+json",
    ] {
        let (st, _, v) = app
            .raw("POST", "/v1/posts/42/comments", &[("authorization", &auth), ("content-type", ct)], body)
            .await;
        assert_eq!(st, StatusCode::CREATED, "{ct}: {v}");
    }
    // No body needs no content type.
    let (st, _, v) = app.raw("PUT", "/v1/posts/42/like", &[("authorization", &auth)], "").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    // A chunked body (no Content-Length) is checked once read.
    let (st, v) = {
        let stream = futures_util::stream::iter(vec![Ok::<_, std::convert::Infallible>(
            hyper::body::Frame::data(bytes::Bytes::from_static(br#"{"text":"chunked"}"#)),
        )]);
        let req = hyper::Request::post(format!("{}/v1/posts/42/comments", app.base))
            .header("authorization", &auth)
            .header("content-type", "text/plain")
            .body(http_body_util::StreamBody::new(stream))
            .expect("request");
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
        let resp = client.request(req).await.expect("send");
        let st = resp.status();
        let b = http_body_util::BodyExt::collect(resp.into_body()).await.expect("body").to_bytes();
        (st, serde_json::from_slice::<serde_json::Value>(&b).unwrap_or_default())
    };
    common::assert_error(st, &v, 415, "unsupported_media_type");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usernames_refuse_bidi_controls_and_invisible_names_and_are_stored_in_nfc() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    let svc = app.service();
    let put = |name: &'static str| {
        let body = json!({ "username": name }).to_string();
        let svc = svc.clone();
        let app = &app;
        async move { app.call(Method::PUT, "/v1/users/20", Some(&svc), Some(&body)).await }
    };
    for bad in [
        "adm\u{202E}nimi",
        "\u{2066}bob",
        "al\u{200F}ice",
        "\u{200B}\u{200B}",
        " \u{200D} ",
        "\u{FEFF}",
        "\u{2800}",
        "al\u{200B}ice",
        "zo\u{200D}e",
        "bob\u{E0041}",
        "x\u{FFF9}y",
    ] {
        let (st, v) = put(bad).await;
        common::assert_error(st, &v, 400, "invalid");
    }
    // NFC: "e" + combining acute is stored as the one character "é".
    let (st, v) = put("Ame\u{301}lie").await;
    assert_eq!((st, v["username"].as_str()), (StatusCode::OK, Some("Am\u{e9}lie")), "{v}");
    // A zero-width joiner inside an emoji sequence is allowed in the name (only there), but no
    // notification text ever carries it (nor any other control or format character).
    let (st, v) = put("zo\u{1F469}\u{200D}\u{1F4BB}").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    app.post(42, AUTHOR, false).await;
    app.like(20, 42, true).await;
    let author = app.user(AUTHOR);
    let items = || async {
        let (st, v) = app.call(Method::GET, "/v1/me/notifications", Some(&author), None).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        v["items"].as_array().cloned().unwrap_or_default()
    };
    app.wait_until(|| async { !items().await.is_empty() }).await;
    let item = items().await[0].clone();
    let text = item["text"].as_str().expect("text");
    assert_eq!(text, "zo\u{1F469}\u{1F4BB} liked your post", "{item}");
    assert!(!text.chars().any(|c| c.is_control() || c == '\u{200D}'), "{text:?}");
    assert_eq!(item["actors"], json!(["zo\u{1F469}\u{1F4BB}"]), "{item}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_has_the_json_body_and_405_says_method_not_allowed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    let auth = format!("Bearer {}", app.user(OTHER));
    for (method, path) in
        [("DELETE", "/v1/posts"), ("POST", "/v1/posts/42/like"), ("FROBNICATE", "/v1/posts/42/like")]
    {
        let (st, _, v) = app.raw(method, path, &[("authorization", &auth)], "").await;
        common::assert_error(st, &v, 405, "method_not_allowed");
    }
    let (st, _, v) = app.raw("GET", "/v1/nowhere", &[], "").await;
    common::assert_error(st, &v, 404, "not_found");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_or_too_large_headers_get_431_with_the_json_body() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    // 150 fields: past the API's 100 (and past hyper's own default of 100, which would
    // answer with an empty body).
    let names: Vec<String> = (0..150).map(|i| format!("x-filler-{i}")).collect();
    let many: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "1")).collect();
    let (st, _, v) = app.raw("GET", "/healthz", &many, "").await;
    common::assert_error(st, &v, 431, "too_large");
    // One 40 KB value: past the API's 32 KB of header fields.
    let big = "a".repeat(40 * 1024);
    let (st, _, v) = app.raw("GET", "/v1/posts/42", &[("x-big", &big)], "").await;
    common::assert_error(st, &v, 431, "too_large");
    // Just under both limits is served as usual.
    let some: Vec<(&str, &str)> = many[..90].to_vec();
    let (st, _, v) = app.raw("GET", "/healthz", &some, "").await;
    assert_eq!(st.as_u16(), 200, "{v}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_in_a_list_are_parsed_exactly_as_path_ids_and_answered_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(42, AUTHOR, false).await;
    app.post(43, AUTHOR, false).await;
    let t = app.user(OTHER);
    for bad in ["42,%2043", "%2042", "42%09", "42,043", "42,+43", "42,,43", "42,"] {
        let (st, v) = app.call(Method::GET, &format!("/v1/posts?ids={bad}"), Some(&t), None).await;
        common::assert_error(st, &v, 400, "invalid");
        // The same spelling in a path is refused too.
        let one = bad.split(',').nth(1).unwrap_or(bad);
        if !one.is_empty() {
            let (st, v) = app.call(Method::GET, &format!("/v1/posts/{one}"), Some(&t), None).await;
            assert_eq!(st.as_u16(), 400, "{one}: {v}");
        }
    }
    let (st, v) = app.call(Method::GET, "/v1/posts?ids=43,42,43,42", Some(&t), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let ids: Vec<&str> =
        v["posts"].as_array().expect("posts").iter().filter_map(|p| p["post_id"].as_str()).collect();
    assert_eq!(ids, ["43", "42"], "{v}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_preflights_are_answered_for_the_configured_origins_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = common::test_config(dir.path());
    cfg.server.cors_origins = vec!["https://app.example.com".into()];
    let app = TestApp::start_with(cfg).await;
    app.post(42, AUTHOR, false).await;
    let preflight = |origin: &'static str| {
        let app = &app;
        async move {
            app.raw(
                "OPTIONS",
                "/v1/posts/42/like",
                &[
                    ("origin", origin),
                    ("access-control-request-method", "PUT"),
                    ("access-control-request-headers", "authorization, content-type"),
                ],
                "",
            )
            .await
        }
    };
    let (st, h, _) = preflight("https://app.example.com").await;
    assert!(st.is_success(), "{st}");
    let header =
        |h: &hyper::HeaderMap, k: &str| h.get(k).and_then(|v| v.to_str().ok()).map(str::to_lowercase);
    assert_eq!(header(&h, "access-control-allow-origin").as_deref(), Some("https://app.example.com"));
    assert!(header(&h, "access-control-allow-methods").is_some_and(|m| m.contains("put")), "{h:?}");
    let allowed = header(&h, "access-control-allow-headers").unwrap_or_default();
    assert!(allowed.contains("authorization") && allowed.contains("content-type"), "{allowed}");
    // Another origin gets no permission.
    let (_, h, _) = preflight("https://evil.example.net").await;
    assert_eq!(header(&h, "access-control-allow-origin"), None, "{h:?}");
    // The actual request carries the header for the allowed origin.
    let auth = format!("Bearer {}", app.user(OTHER));
    let (st, h, v) = app
        .raw(
            "PUT",
            "/v1/posts/42/like",
            &[("authorization", &auth), ("origin", "https://app.example.com")],
            "",
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(header(&h, "access-control-allow-origin").as_deref(), Some("https://app.example.com"));
    assert!(header(&h, "access-control-expose-headers").is_some_and(|e| e.contains("retry-after")), "{h:?}");
    app.stop().await;

    // By default no origin is allowed.
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    let (_, h, _) = app
        .raw(
            "OPTIONS",
            "/v1/posts/42/like",
            &[("origin", "https://app.example.com"), ("access-control-request-method", "PUT")],
            "",
        )
        .await;
    assert_eq!(header(&h, "access-control-allow-origin"), None, "{h:?}");
    app.stop().await;
}
