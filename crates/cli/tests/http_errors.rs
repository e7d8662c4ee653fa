//! Every error carries the JSON error body of docs/api.md, `{"error", "message"}`: also the ones
//! hyper answers before a request reaches the router (a request line or header it cannot
//! parse, a request target or header section past its limits), sent here over a raw socket;
//! query-string errors name the parameter in our words; a body that is not UTF-8 is a 400
//! like other malformed JSON; a body declared larger than the limit is a 413 before it is sent.

mod common;

use common::{TestApp, test_config};
use hyper::Method;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A response read off the socket: status, head (lowercased) and body.
struct Raw {
    status: u16,
    head: String,
    body: Vec<u8>,
}

/// Send `request` on a new connection (written while the answer is read: the server may
/// answer before the client has sent it all) and read the response until the server closes.
async fn exchange(app: &TestApp, request: Vec<u8>) -> Raw {
    let addr = app.base.trim_start_matches("http://").to_string();
    let stream = TcpStream::connect(&addr).await.expect("connect");
    let (mut rd, mut wr) = stream.into_split();
    let writer = tokio::spawn(async move {
        // The server may stop reading once it has answered: a failed write is expected.
        let _ = wr.write_all(&request).await;
        wr
    });
    let mut bytes = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), async {
        let mut buf = [0u8; 8192];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => bytes.extend_from_slice(&buf[..n]),
            }
            // One response is all that is asked for; stop once it is complete.
            if complete(&bytes) {
                break;
            }
        }
    })
    .await;
    assert!(read.is_ok(), "no complete response: {}", String::from_utf8_lossy(&bytes));
    drop(writer);
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let (head, _) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no response head: {text:?}"));
    let body = bytes[head.len() + 4..].to_vec();
    let status = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{head}"));
    Raw { status, head: head.to_ascii_lowercase(), body }
}

/// True when `bytes` hold a whole response with a `content-length` body.
fn complete(bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(bytes).to_ascii_lowercase();
    let Some((head, _)) = text.split_once("\r\n\r\n") else { return false };
    let len = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    len.is_some_and(|len| bytes.len() >= head.len() + 4 + len)
}

/// Assert `r` is a `status` with the JSON error body of kind `kind`; its message.
fn assert_json_error(r: &Raw, status: u16, kind: &str) -> String {
    let body = String::from_utf8_lossy(&r.body);
    assert_eq!(r.status, status, "{}\n\n{body}", r.head);
    assert!(r.head.contains("\r\ncontent-type: application/json"), "{}", r.head);
    assert!(r.head.contains(&format!("\r\ncontent-length: {}", r.body.len())), "{}", r.head);
    let v: serde_json::Value =
        serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("not JSON ({e}): {body:?}"));
    assert_eq!(v["error"].as_str(), Some(kind), "{v}");
    let message = v["message"].as_str().unwrap_or_default().to_string();
    assert!(!message.is_empty(), "{v}");
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_hyper_refuses_before_the_router_get_the_json_error_body() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start_with(test_config(dir.path())).await;

    let long_target = format!("GET /v1/posts/{} HTTP/1.1\r\nHost: x\r\n\r\n", "1".repeat(70_000));
    assert_json_error(&exchange(&app, long_target.into_bytes()).await, 414, "too_large");

    let mut huge_header = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    huge_header.extend(std::iter::repeat_n(b'a', 1 << 20));
    huge_header.extend_from_slice(b"\r\n\r\n");
    assert_json_error(&exchange(&app, huge_header).await, 431, "too_large");

    let bad_line = b"GET /healthz HTTP/1.1 extra\r\nHost: x\r\n\r\n".to_vec();
    assert_json_error(&exchange(&app, bad_line).await, 400, "invalid");

    let control = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\n\r\n".to_vec();
    assert_json_error(&exchange(&app, control).await, 400, "invalid");

    // The router's own answers on the same server are untouched.
    let ok = exchange(&app, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec()).await;
    assert_eq!(ok.status, 200, "{}", ok.head);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_parameter_given_twice_is_named_in_the_400() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start_with(test_config(dir.path())).await;
    let token = app.user(5);
    let req = format!(
        "GET /v1/posts/1/likers?limit=1&limit=2 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
         Connection: close\r\n\r\n"
    );
    let message = assert_json_error(&exchange(&app, req.into_bytes()).await, 400, "invalid");
    assert!(message.contains("limit") && message.contains("more than once"), "{message}");
    assert!(!message.contains("Failed to deserialize"), "{message}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_is_not_utf8_is_a_400_like_other_malformed_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start_with(test_config(dir.path())).await;
    let token = app.user(5);
    let send = |body: &[u8]| {
        let mut req = format!(
            "PUT /v1/me/settings HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(body);
        req
    };
    let not_utf8 = exchange(&app, send(b"{\"hide_like_counts\":\"\xff\xfe\"}")).await;
    assert!(assert_json_error(&not_utf8, 400, "invalid").contains("UTF-8"));
    let truncated = exchange(&app, send(b"{\"hide_like_counts\":")).await;
    assert_json_error(&truncated, 400, "invalid");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_declared_over_the_limit_is_refused_before_it_is_sent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start_with(test_config(dir.path())).await;
    let (user, service) = (app.user(5), app.service());
    // Every route that takes a body, each with a declared length past its limit and only 10
    // bytes of it sent: the answer must not wait for the rest (nor for the request timeout).
    let routes = [
        ("PUT", "/v1/me/settings", 99_999_999, &user),
        ("PUT", "/v1/me/settings", 70_000, &user),
        ("POST", "/v1/posts/1/comments", 70_000, &user),
        ("PUT", "/v1/me/notification-settings", 70_000, &user),
        ("POST", "/v1/comments/1/reports", 70_000, &user),
        ("POST", "/v1/comments/1/appeal", 70_000, &user),
        ("PUT", "/v1/me/hidden-words", 2_000_000, &user),
        ("PUT", "/v1/users/5", 70_000, &service),
        ("PUT", "/v1/posts/1", 70_000, &service),
        ("POST", "/v1/moderation/comments/1", 70_000, &service),
    ];
    for (method, path, declared, token) in routes {
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nContent-Length: {declared}\r\n\r\n{{\"a\": \"b\"}}"
        );
        let started = std::time::Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(2), exchange(&app, req.into_bytes()))
            .await
            .unwrap_or_else(|_| panic!("{method} {path} declaring {declared} bytes: no answer within 2 s"));
        assert_json_error(&r, 413, "too_large");
        assert!(started.elapsed() < Duration::from_secs(2), "{method} {path}: {:?}", started.elapsed());
    }
    app.stop().await;
}

/// A client that sends its whole request before reading (as most HTTP clients do) gets the
/// answer the server gave before reading the body, a 413 over the limit or a 401 without a
/// token, rather than a reset: the server drains input for a moment before it closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_given_before_the_body_is_read_reaches_a_client_still_sending_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start_with(test_config(dir.path())).await;
    let user = app.user(5);
    let addr = app.base.trim_start_matches("http://").to_string();
    let body = format!(r#"{{"pad":"{}"}}"#, "x".repeat(1 << 20));
    for (auth, status, kind) in [
        (format!("Authorization: Bearer {user}\r\n"), 413, "too_large"),
        (String::new(), 401, "unauthenticated"),
    ] {
        for round in 0..5 {
            let req = format!(
                "PUT /v1/me/settings HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\n\
                 Content-Length: {}\r\n\r\n{body}",
                body.len()
            );
            let mut stream = TcpStream::connect(&addr).await.expect("connect");
            let wrote = tokio::time::timeout(Duration::from_secs(10), stream.write_all(req.as_bytes())).await;
            assert!(matches!(wrote, Ok(Ok(()))), "round {round}: the body could not be sent: {wrote:?}");
            let mut bytes = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut bytes)).await;
            assert!(matches!(read, Ok(Ok(_))), "round {round}: the answer was lost: {read:?}");
            let text = String::from_utf8_lossy(&bytes);
            assert!(text.starts_with(&format!("HTTP/1.1 {status} ")), "round {round}: {text}");
            assert!(text.contains(&format!(r#""error":"{kind}""#)), "round {round}: {text}");
            // The connection closes after such an answer, and the answer says so.
            assert!(text.to_ascii_lowercase().contains("\r\nconnection: close\r\n"), "round {round}: {text}");
        }
    }
    // A pooling client sends its next request on a new connection, not on the closing one.
    let huge = format!(r#"{{"author_id":"5","pad":"{}"}}"#, "x".repeat(100_000));
    let service = app.service();
    for round in 0..10 {
        let (st, v) = app.call(Method::PUT, "/v1/posts/2", Some(&service), Some(&huge)).await;
        assert_eq!((st.as_u16(), v["error"].as_str()), (413, Some("too_large")), "round {round}: {v}");
        let (st, v) = app.call(Method::GET, "/v1/posts/1/likers?limit=0", Some(&user), None).await;
        assert_eq!((st.as_u16(), v["error"].as_str()), (400, Some("invalid")), "round {round}: {v}");
    }
    // A small body refused before it is read says so too, and the pool moves on.
    for round in 0..10 {
        let (st, head, v) =
            app.call_full(Method::PUT, "/v1/posts/2", Some("forged"), Some(r#"{"author_id":"5"}"#)).await;
        assert_eq!((st.as_u16(), v["error"].as_str()), (401, Some("unauthenticated")), "round {round}: {v}");
        assert_eq!(
            head.get("connection").map(|v| v.as_bytes()),
            Some(&b"close"[..]),
            "round {round}: {head:?}"
        );
        let (st, _) = app.call(Method::GET, "/v1/posts/1/likers?limit=0", Some(&user), None).await;
        assert_eq!(st.as_u16(), 400, "round {round}");
    }
    // A client that sends a small body after its head (as Python's http.client does): the
    // answer came before the body, and it says close.
    let mut stream = TcpStream::connect(&addr).await.expect("connect");
    let head = "POST /v1/posts/1/comments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer forged\r\n\
                Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n";
    stream.write_all(head.as_bytes()).await.expect("head");
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
        .await
        .expect("answer")
        .expect("read");
    let text = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 401 "), "{text}");
    assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
    // A body read whole keeps the connection open.
    let (st, head, _) =
        app.call_full(Method::PUT, "/v1/posts/2", Some(&service), Some(r#"{"author_id":"5"}"#)).await;
    assert_eq!(st.as_u16(), 200);
    assert!(head.get("connection").is_none(), "{head:?}");
    app.stop().await;
}
