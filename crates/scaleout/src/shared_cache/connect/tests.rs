//! Redis over TLS with an ACL user: a `redis-server` started by each test (TLS only, the
//! `default` user off, certificates made for the test), the machine's PostgreSQL behind it.
//! Fails, never skips, without redis-server, openssl or PostgreSQL.

use super::*;
use crate::open::{from_postgres, with_shared_cache};
use crate::postgres::testing::TestShards;
use crate::shared_cache::Redis;
use crate::tls::testing::{REDIS_PASSWORD, REDIS_USER, TestServer};
use likewise_core::counter::DeltaBatch;
use likewise_core::ids::UserId;
use likewise_core::like::{LikeAction, LikeOp, Target, TargetKind};
use likewise_engine::group_commit::GroupCommitOptions;

fn options(server: &TestServer, user_info: &str) -> RedisOptions {
    RedisOptions {
        url: format!("rediss://{user_info}localhost:{}/0", server.port),
        ca_file: Some(server.ca.clone()),
        prefix: format!("lwtls:{:016x}", rand::random::<u64>()),
        ..Default::default()
    }
}

fn acl_user() -> String {
    format!("{REDIS_USER}:{REDIS_PASSWORD}@")
}

async fn connect_err(opts: &RedisOptions) -> String {
    match Redis::connect(opts).await {
        Ok(_) => panic!("Redis::connect({opts:?}) succeeded"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn likes_counts_own_likes_and_the_comment_rate_limit_work_over_tls_with_an_acl_user() {
    let server = TestServer::redis();
    let shards = TestShards::create(1).await;
    let redis = Redis::connect(&options(&server, &acl_user())).await.expect("rediss:// with the ACL user");
    let stores =
        with_shared_cache(from_postgres(shards.store().await, GroupCommitOptions::default()), redis.clone());
    let (post, author) = (Target::post(42), UserId(7));

    // Likes, and each viewer's own-likes record, as the service writes them.
    let own = stores.own_likes.clone().expect("own likes in Redis");
    for user in 1..=3 {
        let op = LikeOp {
            target: post,
            user: UserId(user),
            action: LikeAction::Like,
            target_author: author,
            ts_ms: 1,
            post: 42,
            trace: None,
        };
        let c = stores.writer.submit(op).await.expect("like");
        assert!(c.outcome.changed);
        own.record(UserId(user), post, true, c.outcome.event_seq.expect("an event")).await.expect("record");
    }
    // The reverse index is not filled yet (no consumer ran): the answers come from Redis.
    for user in 1..=3 {
        let got = stores.likes.liked_among(UserId(user), TargetKind::Post, &[42, 43]).await.expect("liked");
        assert_eq!(got, vec![true, false], "user {user}'s own like, read back through TLS");
    }
    assert_eq!(
        stores.likes.liked_among(UserId(4), TargetKind::Post, &[42]).await.expect("liked"),
        vec![false]
    );

    // Counts: the aggregator's commit writes Redis, reads are answered from there.
    let events = stores.events.read_after(0, 100).await.expect("events");
    let mut batch = DeltaBatch::new();
    events.iter().for_each(|e| batch.add(e));
    let upto = batch.last_seq().expect("three events");
    stores.counters.apply_deltas("agg", 0, upto, &batch.into_deltas()).await.expect("commit counts");
    assert_eq!(stores.counters.counts(&[post]).await.expect("counts")[0].likes, 3);
    let mut conn = redis.servers.conn_for("");
    let cached: Option<i64> =
        redis::cmd("HGET").arg(redis.key("c:1:42#r0")).arg("l").query_async(&mut conn).await.expect("HGET");
    assert_eq!(cached, Some(3), "the count is in the TLS Redis");

    // The comment rate limit: a burst of 2, then refused.
    let rl = stores.rate_limiter.clone().expect("shared rate limiter");
    assert_eq!(rl.check("comment:1", 2, 1).await.expect("rate"), None);
    assert_eq!(rl.check("comment:1", 2, 1).await.expect("rate"), None);
    assert!(rl.check("comment:1", 2, 1).await.expect("rate").is_some(), "the third comment waits");
    assert_eq!(rl.check("comment:2", 2, 1).await.expect("rate"), None, "limits are per user");

    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}:*", redis.opts.prefix))
        .query_async(&mut conn)
        .await
        .expect("KEYS");
    assert!(keys.iter().any(|k| k.contains(":rl:")), "rate keys in Redis: {keys:?}");
    assert!(keys.len() > 4, "counter replicas, own likes and rate keys: {keys:?}");
    stores.writer.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_fails_at_start_up_with_a_clear_message() {
    let server = TestServer::redis();
    let shards = TestShards::create(1).await;
    let opts = crate::ScaleOutOptions {
        postgres: crate::postgres::PgOptions {
            shards: shards.urls.clone(),
            pool_size: 2,
            ..Default::default()
        },
        redis: options(&server, &format!("{REDIS_USER}:not-the-password@")),
        stream: Default::default(),
        group_commit: GroupCommitOptions::default(),
    };
    let e = match crate::connect(&opts).await {
        Ok(_) => panic!("started with a wrong Redis password"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains(&format!("Redis refused the credentials for user {REDIS_USER}")), "{e}");
    assert!(e.contains(&format!("rediss://{REDIS_USER}:***@localhost:{}", server.port)), "{e}");
    assert!(!e.contains("not-the-password"), "the password is never shown: {e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_password_an_unknown_ca_and_a_ca_without_tls_each_say_what_is_wrong() {
    let server = TestServer::redis();
    let e = connect_err(&options(&server, "")).await;
    assert!(e.contains("requires a user and password"), "{e}");

    let e = connect_err(&RedisOptions {
        ca_file: Some(server.other_ca.clone()),
        ..options(&server, &acl_user())
    })
    .await;
    assert!(e.contains("TLS to Redis at") && e.contains("UnknownIssuer"), "{e}");
    assert!(!e.contains(REDIS_PASSWORD), "{e}");

    let url = format!("rediss://{}127.0.0.1:{}/0", acl_user(), server.port);
    let e = connect_err(&RedisOptions { url, ..options(&server, &acl_user()) }).await;
    assert!(
        e.contains("TLS to Redis at") && e.contains("not valid for name"),
        "the host name is checked: {e}"
    );

    let url = format!("redis://{}localhost:{}/0", acl_user(), server.port);
    let e = connect_err(&RedisOptions { url, ..options(&server, &acl_user()) }).await;
    assert!(e.contains("not a rediss:// URL"), "{e}");

    let missing = server.dir().join("missing.pem");
    let e = connect_err(&RedisOptions { ca_file: Some(missing), ..options(&server, &acl_user()) }).await;
    assert!(e.contains("cache.redis_ca_file") && e.contains("missing.pem"), "{e}");
}

#[test]
fn options_never_show_the_password() {
    let opts = RedisOptions { url: "rediss://app:hunter2@cache:6380/0".into(), ..Default::default() };
    let shown = format!("{opts:?}");
    assert!(shown.contains("rediss://app:***@cache:6380/0") && !shown.contains("hunter2"), "{shown}");
}
