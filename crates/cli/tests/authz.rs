//! The authorization matrix: every route of the API against every kind of caller, each cell
//! asserting the documented status. Callers: anonymous, a malformed token, an expired token
//! (signed with the right key), a token signed with another key, another user, the post's
//! author (or the resource's owner), and the service role.

mod common;

use common::{SECRET, TestApp};
use hyper::{Method, StatusCode};
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use likewise_core::ids::UserId;
use likewise_http::auth::{Claims, TokenKeys};
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
