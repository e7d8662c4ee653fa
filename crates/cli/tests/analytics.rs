//! `likewise export analytics`, end to end through the binary: engagement through the API,
//! the server stopped, the export run as a process, and the Parquet file read back by pyarrow
//! (`tests/support/analytics_reader.py`), a reader independent of the writer. The sums must
//! match what the API acknowledged: likes minus unlikes per post equal its like rows, comments
//! what was created, the visible-comment delta the post's comment count, unique viewers the
//! distinct viewers within the HyperLogLog's error. Then beside a live node: the embedded
//! store held by a running `serve` is read through it (`GET /v1/analytics/hourly`), and a
//! scale-out deployment's event stream is read while it runs.

mod common;

use common::TestApp;
use hyper::{Method, StatusCode};
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Run `likewise export analytics ARGS --data-dir DIR`.
fn export(data_dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_likewise"))
        .args(["export", "analytics"])
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .output()
        .expect("run likewise export analytics")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Read a file with pyarrow: schema, rows, order, per-post sums.
fn read(file: &Path) -> Value {
    common::python::ensure_packages();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/analytics_reader.py");
    let out = Command::new("python3").arg(script).arg(file).output().expect("python3");
    assert!(out.status.success(), "reader failed: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("reader JSON")
}

/// The one file an export wrote to `dir`.
fn the_file(dir: &Path) -> PathBuf {
    let files: Vec<PathBuf> =
        std::fs::read_dir(dir).expect("out dir").map(|e| e.expect("entry").path()).collect();
    assert_eq!(files.len(), 1, "one file, no leftovers: {files:?}");
    files.into_iter().next().expect("file")
}

/// RFC 3339 of now plus `hours`.
fn now_plus(hours: i64) -> String {
    (OffsetDateTime::now_utc() + time::Duration::hours(hours)).format(&Rfc3339).expect("format")
}

async fn comment(app: &TestApp, user: u64, post: u64, text: &str) -> Value {
    let body = serde_json::json!({ "text": text }).to_string();
    let (st, v) = app
        .call(Method::POST, &format!("/v1/posts/{post}/comments"), Some(&app.user(user)), Some(&body))
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_sums_match_the_like_rows_comments_and_distinct_viewers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = Arc::new(TestApp::start(dir.path()).await);
    for p in 1..=4 {
        app.post(p, 7, false).await;
    }
    // Likes, unlikes and likes again; a retried like changes nothing and is no event.
    let mut rows: HashSet<(u64, u64)> = HashSet::new();
    let (mut created, mut removed) = (BTreeMap::<u64, i64>::new(), BTreeMap::<u64, i64>::new());
    for u in 1000..1060u64 {
        for p in 1..=4u64 {
            if (u + p) % 3 == 0 {
                continue;
            }
            let mut ops = vec![true, true];
            if u % 4 == 0 || p == 4 {
                ops.push(false);
            }
            if u % 8 == 0 && p != 4 {
                ops.push(true);
            }
            for like in ops {
                let (_, changed) = app.like(u, p, like).await;
                if changed {
                    *if like { &mut created } else { &mut removed }.entry(p).or_default() += 1;
                    if like {
                        rows.insert((u, p))
                    } else {
                        rows.remove(&(u, p))
                    };
                }
            }
        }
    }
    // Comments on posts 1 and 2, one deleted by its author, and likes on one of them.
    let (mut comments, mut visible) = (BTreeMap::<u64, i64>::new(), BTreeMap::<u64, i64>::new());
    let mut first = None;
    let words = ["ridge", "harbour", "lantern", "meadow", "granite", "orchard", "tide", "ember"];
    for (i, u) in (1000..1012u64).enumerate() {
        for p in [1u64, 2] {
            let t =
                format!("The {} at dawn, seen by {u} ({}) on post {p}", words[i % words.len()], i * 7 + 3);
            let v = comment(&app, u, p, &t).await;
            *comments.entry(p).or_default() += 1;
            if v["status"] == "visible" {
                *visible.entry(p).or_default() += 1;
            }
            if first.is_none() && v["status"] == "visible" {
                first = Some((u, v["comment_id"].as_str().expect("id").to_string()));
            }
        }
    }
    let (author, cid) = first.expect("a visible comment on post 1");
    for u in [2001u64, 2002, 2003] {
        let (st, v) =
            app.call(Method::PUT, &format!("/v1/comments/{cid}/like"), Some(&app.user(u)), None).await;
        assert_eq!(st, StatusCode::OK, "{v}");
    }
    let (st, v) =
        app.call(Method::DELETE, &format!("/v1/comments/{cid}/like"), Some(&app.user(2003)), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let (st, v) =
        app.call(Method::DELETE, &format!("/v1/comments/{cid}"), Some(&app.user(author)), None).await;
    assert!(st.is_success(), "{st} {v}");
    *visible.entry(1).or_default() -= 1;
    // Views: many distinct viewers on post 1, a few on 2 and 3, each viewing twice; none on 4.
    let viewers: BTreeMap<u64, u64> = [(1u64, 600u64), (2, 40), (3, 3)].into();
    let mut tasks = Vec::new();
    for (&p, &n) in &viewers {
        for w in 0..4u64 {
            let app = app.clone();
            tasks.push(tokio::spawn(async move {
                for i in (w..n).step_by(4) {
                    let token = app.user(50_000 + p * 10_000 + i);
                    for _ in 0..2 {
                        let (st, _) =
                            app.call(Method::POST, &format!("/v1/posts/{p}/views"), Some(&token), None).await;
                        assert_eq!(st, StatusCode::NO_CONTENT);
                    }
                }
            }));
        }
    }
    for t in tasks {
        t.await.expect("join");
    }
    // The API's truth before stopping: like rows and visible comments per post.
    for p in 1..=4u64 {
        let want = rows.iter().filter(|(_, q)| *q == p).count() as i64;
        app.wait_count(7, p, want).await;
        let v = visible.get(&p).copied().unwrap_or(0);
        app.wait_until(|| async { app.view(7, p).await["comment_count"].as_i64() == Some(v) }).await;
    }
    let since = now_plus(-1);
    let until = now_plus(2);
    Arc::into_inner(app).expect("sole owner").stop().await;

    let out_dir = dir.path().join("out");
    let out = export(
        dir.path(),
        &["--since", &since, "--until", &until, "--out", out_dir.to_str().expect("utf-8")],
    );
    assert!(out.status.success(), "export failed: {}", text(&out.stderr));
    assert!(!text(&out.stderr).contains("warning"), "{}", text(&out.stderr));
    let file = the_file(&out_dir);
    let name = file.file_name().and_then(|n| n.to_str()).expect("name");
    assert!(name.starts_with("likewise-analytics-") && name.ends_with(".parquet"), "{name}");
    let r = read(&file);
    assert_eq!(r["schema"]["post_id"], "uint64", "{r}");
    assert_eq!(r["schema"]["hour"], "timestamp[ms, tz=UTC]", "{r}");
    for c in ["likes", "unlikes", "comments", "unique_viewers"] {
        assert_eq!(r["schema"][c], "int64", "{r}");
    }
    assert_eq!(r["sorted_unique"], true, "rows sorted by (hour, post), one per pair: {r}");
    assert_eq!(r["whole_hours"], true, "{r}");
    for p in 1..=4u64 {
        let got = &r["posts"][p.to_string()];
        let n = |c: &str| got[c].as_i64().unwrap_or_else(|| panic!("post {p} {c}: {r}"));
        let like_rows = rows.iter().filter(|(_, q)| *q == p).count() as i64;
        assert_eq!(n("likes") - n("unlikes"), like_rows, "post {p}: {got}");
        assert_eq!(n("likes"), created.get(&p).copied().unwrap_or(0), "post {p}: {got}");
        assert_eq!(n("unlikes"), removed.get(&p).copied().unwrap_or(0), "post {p}: {got}");
        assert_eq!(n("comments"), comments.get(&p).copied().unwrap_or(0), "post {p}: {got}");
        assert_eq!(n("comments_visible_delta"), visible.get(&p).copied().unwrap_or(0), "post {p}: {got}");
        let (likes, unlikes) = if p == 1 { (3, 1) } else { (0, 0) };
        assert_eq!((n("comment_likes"), n("comment_unlikes")), (likes, unlikes), "post {p}: {got}");
        let distinct = viewers.get(&p).copied().unwrap_or(0) as f64;
        let uv = n("unique_viewers") as f64;
        // 0.8% standard error; a run across an hour boundary counts a viewer in each hour.
        let hours = n("view_hours").max(1) as f64;
        assert!(
            uv >= distinct * 0.97 && uv <= distinct * 1.03 * hours,
            "post {p}: {uv} unique viewers for {distinct} distinct ({got})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_without_activity_gives_a_valid_file_with_no_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    app.like(1001, 1, true).await;
    app.wait_count(7, 1, 1).await;
    app.stop().await;
    let out_dir = dir.path().join("empty");
    let out = export(
        dir.path(),
        &["--since", "2020-01-01", "--until", "2020-01-02", "--out", out_dir.to_str().expect("utf-8")],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("wrote 0 rows"), "{}", text(&out.stdout));
    let file = the_file(&out_dir);
    assert_eq!(
        file.file_name().and_then(|n| n.to_str()),
        Some("likewise-analytics-20200101T00Z-20200102T00Z.parquet")
    );
    let r = read(&file);
    assert_eq!(r["rows"], 0, "{r}");
    assert_eq!(r["schema"].as_object().map(|s| s.len()), Some(9), "{r}");
    assert_eq!(r["schema"]["unique_viewers"], "int64", "{r}");
    // The same store over a range that covers the like: one row (the data is there).
    let out_dir = dir.path().join("now");
    let out = export(
        dir.path(),
        &["--since", &now_plus(-1), "--until", &now_plus(2), "--out", out_dir.to_str().expect("utf-8")],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r = read(&the_file(&out_dir));
    assert_eq!(r["rows"], 1, "{r}");
    assert_eq!(r["posts"]["1"]["likes"], 1, "{r}");
}

#[test]
fn bad_flags_fail_with_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_dir = dir.path().join("out");
    let out = out_dir.to_str().expect("utf-8");
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, b"not a directory").expect("write");
    let under_file = blocker.join("out");
    let pg = dir.path().join("pg.toml");
    std::fs::write(
        &pg,
        "[store]\nbackend = \"postgres\"\npostgres_shards = [\"postgres://postgres@127.0.0.1/likewise_no_such_db\"]\n\
         [cache]\nredis_url = \"redis://127.0.0.1:6379\"\n[stream]\nnats_url = \"nats://127.0.0.1:4222\"\n\
         [auth]\nsecret = \"analytics-test-secret\"\n",
    )
    .expect("write");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--since", "2026-12-04T12:00:00Z", "--until", "2026-12-04T10:00:00Z", "--out", out],
            "must be later",
        ),
        (vec!["--since", "2026-12-04", "--until", "2026-12-04", "--out", out], "must be later"),
        (
            vec!["--since", "2026-12-04T10:05:00Z", "--until", "2026-12-04T10:50:00Z", "--out", out],
            "same hour",
        ),
        (
            vec!["--since", "last tuesday", "--until", "2026-12-04", "--out", out],
            "--since \"last tuesday\" is not a time",
        ),
        (vec!["--since", "2026-12-01", "--until", "2026-12-04T25:00:00Z", "--out", out], "--until"),
        (vec!["--since", "2026-12-01", "--until", "2026-12-04"], "--out"),
        (vec!["--until", "2026-12-04", "--out", out], "--since"),
        (
            vec![
                "--since",
                "2026-12-01",
                "--until",
                "2026-12-04",
                "--out",
                under_file.to_str().expect("utf-8"),
            ],
            "cannot create the output directory",
        ),
        (
            vec![
                "--since",
                "2026-12-01",
                "--until",
                "2026-12-04",
                "--out",
                out,
                "--config",
                pg.to_str().expect("utf-8"),
            ],
            "likewise_no_such_db",
        ),
        (vec!["--since", "2024-01-01", "--until", "2026-12-04", "--out", out], "more than 8784 hours"),
    ];
    for (args, want) in cases {
        let o = export(dir.path(), &args);
        let err = text(&o.stderr);
        assert!(!o.status.success(), "{args:?} succeeded: {}", text(&o.stdout));
        assert!(err.contains(want), "{args:?}: want {want:?} in: {err}");
    }
    assert!(!out_dir.exists(), "no output for a refused command");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_reaching_behind_the_retained_log_warns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = common::test_config(dir.path());
    let app = TestApp::start_with(cfg.clone()).await;
    app.post(1, 7, false).await;
    for u in 1001..=1005 {
        app.like(u, 1, true).await;
    }
    app.wait_count(7, 1, 5).await;
    app.stop().await;
    // What the aggregator does past `aggregator.retain_events`: drop the oldest events.
    let stores = likewise_store::open(&cfg.store_config()).expect("open");
    let removed = stores.events.truncate(3).await.expect("truncate");
    stores.close().expect("close");
    drop(stores);
    assert!((1..5).contains(&removed), "{removed}");
    let out_dir = dir.path().join("out");
    let out = export(
        dir.path(),
        &["--since", &now_plus(-1), "--until", &now_plus(2), "--out", out_dir.to_str().expect("utf-8")],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("warning: the event log retains events from"),
        "{}",
        text(&out.stderr)
    );
    let r = read(&the_file(&out_dir));
    assert_eq!(r["posts"]["1"]["likes"], 5 - removed, "{r}");
}

/// A free local port (bound, then released for the server to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// Run `likewise export analytics ARGS` with `envs`.
fn export_env(args: &[&str], envs: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_likewise"))
        .args(["export", "analytics"])
        .args(args)
        .envs(envs.iter().copied())
        .output()
        .expect("run likewise export analytics")
}

/// Per-post sums of a file, as the reader reports them.
fn sums(file: &Path) -> Value {
    read(file)["posts"].clone()
}

async fn ok(
    c: &common::proc::Client,
    base: &str,
    m: Method,
    path: &str,
    user: u64,
    service: bool,
    body: &str,
) {
    let (st, v) = c.call(base, m, path, user, service, body).await.expect("call");
    assert!((200..300).contains(&st), "{path}: {st} {v}");
}

/// On a node: post 1 (author 7) gets `likes` likes from users 1001.., the first of them
/// removed again, and two comments.
async fn engage(c: &common::proc::Client, base: &str, first_user: u64, likes: u64) {
    let post = r#"{"author_id": "7", "hide_like_count": false, "comments": "everyone"}"#;
    ok(c, base, Method::PUT, "/v1/posts/1", 7, true, post).await;
    for u in first_user..first_user + likes {
        ok(c, base, Method::PUT, "/v1/posts/1/like", u, false, "").await;
    }
    ok(c, base, Method::DELETE, "/v1/posts/1/like", first_user, false, "").await;
    for u in [first_user, first_user + 1] {
        ok(
            c,
            base,
            Method::POST,
            "/v1/posts/1/comments",
            u,
            false,
            r#"{"text": "a fine morning for a walk"}"#,
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_beside_a_running_node_reads_through_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().to_str().expect("utf-8").to_string();
    let listen = format!("127.0.0.1:{}", free_port());
    let mut node = common::proc::start_with(&["serve", "--data-dir", &data, "--listen", &listen], &[]);
    let c = common::proc::Client::new();
    engage(&c, &node.base, 1001, 6).await;
    let (since, until) = (now_plus(-1), now_plus(2));
    // The node of this data directory is found at server.listen, and its secret signs the token.
    let envs = [("LIKEWISE__SERVER__LISTEN", listen.as_str()), ("LIKEWISE__AUTH__SECRET", common::SECRET)];
    let live = dir.path().join("live");
    let out = export_env(
        &["--data-dir", &data, "--since", &since, "--until", &until, "--out", live.to_str().expect("utf-8")],
        &envs,
    );
    assert!(out.status.success(), "export beside the node failed: {}", text(&out.stderr));
    assert!(text(&out.stderr).contains("reading through the running node"), "{}", text(&out.stderr));
    let got = sums(&the_file(&live));
    assert_eq!(
        (&got["1"]["likes"], &got["1"]["unlikes"], &got["1"]["comments"]),
        (&Value::from(6), &Value::from(1), &Value::from(2)),
        "{got}"
    );

    // The node goes on taking writes; an export with --url and --token sees them.
    engage(&c, &node.base, 2001, 3).await;
    let token =
        c.keys.mint(likewise_core::ids::UserId(1), true, std::time::Duration::from_secs(600)).expect("token");
    let by_url = dir.path().join("by-url");
    let out = export_env(
        &[
            "--data-dir",
            &data,
            "--url",
            &node.base,
            "--token",
            &token,
            "--since",
            &since,
            "--until",
            &until,
            "--out",
            by_url.to_str().expect("utf-8"),
        ],
        &[],
    );
    assert!(out.status.success(), "export with --url failed: {}", text(&out.stderr));
    let live_sums = sums(&the_file(&by_url));
    assert_eq!(live_sums["1"]["likes"], 9, "{live_sums}");
    assert_eq!(live_sums["1"]["comments"], 4, "{live_sums}");

    // A token that is not a service's is refused, and the command says so.
    let user = c
        .keys
        .mint(likewise_core::ids::UserId(1001), false, std::time::Duration::from_secs(600))
        .expect("token");
    let refused = dir.path().join("refused");
    let out = export_env(
        &[
            "--url",
            &node.base,
            "--token",
            &user,
            "--since",
            &since,
            "--until",
            &until,
            "--out",
            refused.to_str().expect("utf-8"),
        ],
        &[],
    );
    assert!(!out.status.success(), "a user's token exported");
    assert!(text(&out.stderr).contains("403"), "{}", text(&out.stderr));

    // Stopped, the store read directly gives the same rows as the node did.
    common::proc::signal(&node.child, "-TERM");
    assert!(node.child.wait().expect("wait").success(), "clean stop");
    let offline = dir.path().join("offline");
    let out = export(
        dir.path(),
        &["--since", &since, "--until", &until, "--out", offline.to_str().expect("utf-8")],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!text(&out.stderr).contains("through the running node"), "{}", text(&out.stderr));
    assert_eq!(sums(&the_file(&offline)), live_sums);
}

/// Two nodes share a secret; the configuration of B's data directory names A's address as
/// `server.listen` (B was started on another). The export must not take A's rows for B's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_found_at_server_listen_that_holds_another_store_is_not_taken() {
    let (a_dir, b_dir) = (tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir"));
    let (a_data, b_data) = (
        a_dir.path().to_str().expect("utf-8").to_string(),
        b_dir.path().to_str().expect("utf-8").to_string(),
    );
    let (a_listen, b_listen) = (format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port()));
    let mut a = common::proc::start_with(&["serve", "--data-dir", &a_data, "--listen", &a_listen], &[]);
    let mut b = common::proc::start_with(&["serve", "--data-dir", &b_data, "--listen", &b_listen], &[]);
    let c = common::proc::Client::new();
    engage(&c, &a.base, 1001, 6).await;
    engage(&c, &b.base, 1001, 2).await;
    let (since, until) = (now_plus(-1), now_plus(2));
    let export_b = |listen: &str, out: &Path| {
        export_env(
            &[
                "--data-dir",
                &b_data,
                "--since",
                &since,
                "--until",
                &until,
                "--out",
                out.to_str().expect("utf-8"),
            ],
            &[("LIKEWISE__SERVER__LISTEN", listen), ("LIKEWISE__AUTH__SECRET", common::SECRET)],
        )
    };
    let wrong = b_dir.path().join("wrong");
    let out = export_b(&a_listen, &wrong);
    assert!(!out.status.success(), "B's export took the rows of A's store");
    assert!(text(&out.stderr).contains("holds another store"), "{}", text(&out.stderr));
    assert!(!wrong.exists(), "a refused export left its directory behind");

    // At B's own address the same command reads B's rows.
    let right = b_dir.path().join("right");
    let out = export_b(&b_listen, &right);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(sums(&the_file(&right))["1"]["likes"], 2);

    for node in [&mut a, &mut b] {
        common::proc::signal(&node.child, "-TERM");
        assert!(node.child.wait().expect("wait").success(), "clean stop");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hourly_route_checks_its_caller_and_its_span() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::start(dir.path()).await;
    app.post(1, 7, false).await;
    app.like(1001, 1, true).await;
    let q = |since: &str, until: &str| format!("/v1/analytics/hourly?since={since}&until={until}");
    let now = q(&now_plus(-1).replace('+', "%2B"), &now_plus(2).replace('+', "%2B"));
    let (st, v) = app.call(Method::GET, &now, None, None).await;
    assert_eq!((st, v["error"].as_str()), (StatusCode::UNAUTHORIZED, Some("unauthenticated")), "{v}");
    let (st, v) = app.call(Method::GET, &now, Some(&app.user(1001)), None).await;
    assert_eq!((st, v["error"].as_str()), (StatusCode::FORBIDDEN, Some("forbidden")), "{v}");
    for (path, want) in [
        ("/v1/analytics/hourly".to_string(), "required"),
        (q("2026-12-04", "2026-12-03"), "must be later"),
        (q("2026-12-04T10:05:00Z", "2026-12-04T10:50:00Z"), "same hour"),
        (q("yesterday", "2026-12-04"), "not a time"),
        (q("2020-01-01", "2026-12-04"), "more than 8784 hours"),
    ] {
        let (st, v) = app.call(Method::GET, &path, Some(&app.service()), None).await;
        assert_eq!((st, v["error"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid")), "{path}: {v}");
        assert!(v["message"].as_str().is_some_and(|m| m.contains(want)), "{path}: {v}");
    }
    let (st, v) = app.call(Method::GET, &now, Some(&app.service()), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{v}");
    assert_eq!((rows[0]["post_id"].as_str(), rows[0]["likes"].as_i64()), (Some("1"), Some(1)), "{v}");
    assert!(v["warning"].is_null(), "{v}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_out_export_reads_the_stream_while_the_deployment_runs() {
    let d = common::deployment::Deployment::new().await;
    let node = d.start("all");
    let c = common::proc::Client::new();
    engage(&c, &node.base, 1001, 5).await;
    // A node whose events live in the stream sends the caller to the command.
    let (st, v) = c
        .call(&node.base, Method::GET, "/v1/analytics/hourly?since=2026-12-01&until=2026-12-02", 1, true, "")
        .await
        .expect("call");
    assert_eq!((st, v["error"].as_str()), (409, Some("conflict")), "{v}");
    let config = d.config.to_str().expect("utf-8").to_string();
    let (since, until) = (now_plus(-1), now_plus(2));
    // The events reach the stream through the relay: wait for them.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut n = 0;
    let got = loop {
        n += 1;
        let out_dir = d.dir.path().join(format!("out-{n}"));
        let out = export_env(
            &[
                "--config",
                &config,
                "--since",
                &since,
                "--until",
                &until,
                "--out",
                out_dir.to_str().expect("utf-8"),
            ],
            &[("LIKEWISE__AUTH__SECRET", common::SECRET)],
        );
        assert!(out.status.success(), "export failed: {}", text(&out.stderr));
        let got = sums(&the_file(&out_dir));
        if got["1"]["comments"] == 2 || std::time::Instant::now() > deadline {
            break got;
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    };
    assert_eq!(
        (&got["1"]["likes"], &got["1"]["unlikes"], &got["1"]["comments"]),
        (&Value::from(5), &Value::from(1), &Value::from(2)),
        "{got}"
    );
    // The node served on throughout.
    let (st, v) = c.call(&node.base, Method::GET, "/v1/posts/1", 1001, false, "").await.expect("call");
    assert_eq!(st, 200, "{v}");
    drop(node);
}
