//! A scale-out node configured as a platform team deploys it: Redis over TLS with an ACL user
//! (`rediss://`, `cache.redis_ca_file`) and NATS over TLS with a user and password (`tls://`,
//! `stream.nats_ca_file`), each a server this test starts with certificates made for it, and
//! the machine's PostgreSQL. Fails, never skips, when a server cannot be started.
#![cfg(feature = "scaleout")]

use likewise_app::Application;
use likewise_app::config::{Config, Overrides};
use likewise_core::ids::{PostId, UserId};
use likewise_core::like::LikeAction;
use likewise_core::model::{CommentsPolicy, PostMeta};
use likewise_scaleout::postgres::testing::TestShards;
use likewise_scaleout::tls::testing::{
    NATS_PASSWORD, NATS_USER, REDIS_PASSWORD, REDIS_USER, ScratchDir, TestServer,
};
use likewise_service::ServiceError;
use std::time::{Duration, Instant};

/// The configuration file of a node on `shards`, Redis `redis` with `redis_password` and NATS.
fn config(
    dir: &ScratchDir,
    shards: &TestShards,
    redis: &TestServer,
    redis_password: &str,
    nats: &TestServer,
) -> Config {
    let prefix = format!("t{:016x}", rand::random::<u64>());
    let urls: Vec<String> = shards.urls.iter().map(|u| format!("{u:?}")).collect();
    let file = dir.path().join("likewise.toml");
    let toml = format!(
        "[store]\nbackend = \"postgres\"\npostgres_shards = [{shards}]\npostgres_pool_size = 4\n\
         [cache]\nredis_url = \"rediss://{REDIS_USER}:{redis_password}@localhost:{rport}/0\"\n\
         redis_ca_file = {rca:?}\nredis_prefix = \"{prefix}\"\n\
         [stream]\nnats_url = \"tls://{NATS_USER}:{NATS_PASSWORD}@localhost:{nport}\"\n\
         nats_ca_file = {nca:?}\nprefix = \"{prefix}\"\n\
         [aggregator]\nwindow_ms = 20\n[limits]\ncomments_per_minute = 1\ncomment_burst = 2\n\
         [auth]\nsecret = \"test-secret-0123456789abcdef\"\n",
        shards = urls.join(", "),
        rport = redis.port,
        rca = redis.ca.display().to_string(),
        nport = nats.port,
        nca = nats.ca.display().to_string(),
    );
    std::fs::write(&file, toml).expect("write config");
    let overrides =
        Overrides { listen: Some("127.0.0.1:0".into()), role: None, data_dir: Some(dir.path().join("data")) };
    Config::load(Some(&file), &overrides).expect("the configuration loads")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn likes_counts_and_the_comment_rate_limit_work_with_redis_and_nats_over_tls() {
    let (redis, nats) = (TestServer::redis(), TestServer::nats_with_password());
    let shards = TestShards::create(2).await;
    let dir = ScratchDir::new("app-tls");
    let cfg = config(&dir, &shards, &redis, REDIS_PASSWORD, &nats);
    let app = Application::build(&cfg).await.expect("the node starts over TLS");
    let svc = app.service();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(app.run_until_stopped(async move {
        let _ = stopped.await;
    }));

    let post = PostId(42);
    let meta = PostMeta { author: UserId(7), hide_like_count: false, comments: CommentsPolicy::Everyone };
    svc.upstream.put_post(post, meta).await.expect("put post");
    for user in 1..=5 {
        let r = svc.likes.set_post_like(UserId(user), post, LikeAction::Like).await.expect("like");
        assert!(r.liked && r.changed);
    }
    assert!(svc.posts.post_view(UserId(3), post).await.expect("view").viewer_has_liked, "own like");
    // The count is the aggregator's: outbox -> relay -> JetStream -> consumer -> PostgreSQL
    // and Redis, and the new value over the cluster bus.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let count = svc.posts.post_view(UserId(9), post).await.expect("view").like_count;
        if count == Some(5) {
            break;
        }
        assert!(Instant::now() < deadline, "the count reached {count:?}, not 5");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Two comments in a burst, the third is limited by the shared (Redis) limiter.
    for text in ["first", "second"] {
        svc.comments.create(UserId(3), post, text, None, None).await.expect("comment");
    }
    match svc.comments.create(UserId(3), post, "third", None, None).await {
        Err(ServiceError::RateLimited(_)) => {}
        other => panic!("the third comment in a minute is limited, got {other:?}"),
    }

    let _ = stop.send(());
    run.await.expect("join").expect("a clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_redis_password_stops_start_up_with_a_clear_message() {
    let (redis, nats) = (TestServer::redis(), TestServer::nats_with_password());
    let shards = TestShards::create(1).await;
    let dir = ScratchDir::new("app-tls");
    let cfg = config(&dir, &shards, &redis, "not-the-password", &nats);
    let e = match Application::build(&cfg).await {
        Ok(_) => panic!("a node started with a wrong Redis password"),
        Err(e) => format!("{e:#}"),
    };
    assert!(e.contains(&format!("Redis refused the credentials for user {REDIS_USER}")), "{e}");
    assert!(!e.contains("not-the-password"), "the password is never shown: {e}");
}
