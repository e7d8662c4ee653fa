//! Replica routing against servers that are not usable replicas. A real streaming replica
//! (lag, pause, stop, restart) is covered by `tests/replicas.rs`.

use crate::postgres::testing::TestShards;
use crate::postgres::{PgOptions, PgStore};
use likewise_core::comment::status::CommentStatus;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::like::{LikeAction, LikeOp, Target, TargetKind};
use likewise_core::ports::{CommentReader, LikeReader};
use likewise_core::write::{CommentOp, CommentOutcome, CommentRecord, WriteOp, WriteOutcome};
use std::sync::atomic::Ordering;
use std::time::Duration;

async fn with_replicas(t: &TestShards, replicas: Vec<String>) -> PgStore {
    with_lag(t, replicas, Duration::from_millis(100)).await
}

async fn with_lag(t: &TestShards, replicas: Vec<String>, max_lag: Duration) -> PgStore {
    PgStore::open(&PgOptions {
        shards: t.urls.clone(),
        pool_size: 4,
        replicas,
        replica_max_lag: max_lag,
        ..PgOptions::default()
    })
    .await
    .expect("connect")
}

/// Stop shard 0's tracker and declare its replica up and fresh as of now: the routing alone
/// decides, with no probe racing the test.
async fn pretend_fresh(s: &PgStore) {
    let replicas = &s.inner.replicas;
    let r = replicas.by_shard[0].as_ref().expect("a replica");
    r.tracker.abort();
    tokio::time::sleep(Duration::from_millis(50)).await;
    fresh_now(s);
    r.state.up.store(true, Ordering::Release);
}

/// Shard 0's replica is fresh as of now.
fn fresh_now(s: &PgStore) {
    let replicas = &s.inner.replicas;
    let r = replicas.by_shard[0].as_ref().expect("a replica");
    r.state.fresh_as_of.store(replicas.clock.now(), Ordering::Release);
}

fn reads(s: &PgStore) -> u64 {
    s.replica_status(0).expect("a replica").reads
}

async fn comment(s: &PgStore, post: u64, parent: Option<CommentId>) -> CommentId {
    let record = CommentRecord {
        id: CommentId(0),
        post: PostId(post),
        author: UserId(3),
        post_author: UserId(7),
        parent,
        reply_to_user: None,
        status: CommentStatus::Visible,
        text: "hello".into(),
        simhash: 1,
    };
    match s.apply_async(&[WriteOp::Comment(CommentOp::Create(record, None))]).await.expect("comment").pop() {
        Some(WriteOutcome::Comment(CommentOutcome::Done(Some(r)))) => r.id,
        other => panic!("a create answered {other:?}"),
    }
}

/// A URL on a port nothing listens on.
fn nowhere() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=disable")
}

async fn like(s: &PgStore, post: u64, user: u64) {
    let op = LikeOp {
        target: Target::post(post),
        user: UserId(user),
        action: LikeAction::Like,
        target_author: UserId(1),
        post,
        ts_ms: likewise_engine::now_ms(),
        trace: None,
    };
    s.apply_async(&[WriteOp::Like(op)]).await.expect("like");
}

/// Every kind of read that may use a replica, answered.
async fn read_everything(s: &PgStore) {
    let likers = s.likers(Target::post(42), None, 10).await.expect("likers");
    assert_eq!(likers.len(), 1);
    let many = s.recent_likers_many(&[Target::post(42)], 10).await.expect("recent likers");
    assert_eq!(many[0].len(), 1);
    assert_eq!(s.liked_among(UserId(5), TargetKind::Post, &[42]).await.expect("liked"), vec![false]);
    assert!(s.liked_ids(UserId(5), TargetKind::Post, 10).await.expect("ids").is_empty());
    assert!(s.top_level(PostId(42), true, None, 10).await.expect("comments").is_empty());
    assert!(s.replies(CommentId(1), None, 10).await.expect("replies").is_empty());
}

#[tokio::test]
async fn more_replicas_than_shards_are_refused_with_a_clear_message() {
    let e = PgStore::connect(&PgOptions {
        shards: vec![nowhere()],
        replicas: vec![nowhere(), nowhere()],
        ..PgOptions::default()
    })
    .err()
    .expect("two replicas for one shard");
    assert!(e.to_string().contains("store.postgres_replicas lists 2 URLs for 1 shards"), "{e}");
    let e = PgStore::connect(&PgOptions {
        shards: vec![nowhere()],
        replicas: vec!["postgres://h/db?sslmode=sometimes".into()],
        ..PgOptions::default()
    })
    .err()
    .expect("a bad sslmode");
    assert!(e.to_string().contains("store.postgres_replicas[0]"), "{e}");
}

/// A replica URL naming a primary (here the shard itself): it has no replay position, so it
/// is never known fresh and never read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_is_not_a_standby_serves_no_reads() {
    let t = TestShards::create(1).await;
    let s = with_replicas(&t, vec![t.urls[0].clone()]).await;
    like(&s, 42, 7).await;
    tokio::time::sleep(Duration::from_millis(300)).await; // 15 probes
    read_everything(&s).await;
    let status = s.replica_status(0).expect("a replica is configured");
    assert!(!status.serving, "{status:?}");
    assert_eq!((status.lag, status.reads, status.fallbacks), (None, 0, 0), "{status:?}");
}

/// A replica nobody answers at: reads are answered by the primary, without an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_replica_costs_no_read() {
    let t = TestShards::create(1).await;
    let s = with_replicas(&t, vec![nowhere()]).await;
    like(&s, 42, 7).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    read_everything(&s).await;
    let status = s.replica_status(0).expect("a replica is configured");
    assert!(!status.serving && status.reads == 0, "{status:?}");
}

/// An empty entry and a list shorter than the shards mean "no replica".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_and_missing_entries_mean_no_replica() {
    let t = TestShards::create(3).await;
    let s = with_replicas(&t, vec![String::new(), nowhere()]).await;
    assert_eq!(s.replica_status(0), None);
    assert!(s.replica_status(1).is_some());
    assert_eq!(s.replica_status(2), None);
}

/// A replica that fails a read it was routed to: the primary answers the same read, the
/// replica is marked down at once, and the next reads do not try it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_replica_read_is_answered_by_the_primary_and_marks_the_replica_down() {
    let t = TestShards::create(1).await;
    let s = with_lag(&t, vec![nowhere()], Duration::from_secs(60)).await;
    like(&s, 42, 7).await;
    pretend_fresh(&s).await;
    assert!(s.replica_status(0).expect("replica").serving);
    let likers = s.likers(Target::post(42), None, 10).await.expect("no error for the caller");
    assert_eq!(likers.iter().map(|l| l.user.0).collect::<Vec<_>>(), vec![7]);
    let status = s.replica_status(0).expect("replica");
    assert!(!status.serving, "marked down: {status:?}");
    assert_eq!((status.reads, status.fallbacks), (0, 1), "{status:?}");
    read_everything(&s).await;
    assert_eq!(s.replica_status(0).expect("replica").fallbacks, 1, "a replica marked down is not tried");
}

/// The shard itself stands in for a replica that is always up to date, so every read routed
/// there succeeds and is counted. A comment write through this store keeps the pages it
/// changed (its post's, its thread's) on the primary until the replica is fresh as of a
/// time after it; other pages keep using the replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_comment_write_keeps_its_pages_on_the_primary_until_the_replica_has_it() {
    let t = TestShards::create(1).await;
    let s = with_lag(&t, vec![t.urls[0].clone()], Duration::from_secs(60)).await;
    pretend_fresh(&s).await;
    s.top_level(PostId(9), true, None, 10).await.expect("page");
    assert_eq!(reads(&s), 1, "an unfenced page is read on the replica");
    let top = comment(&s, 9, None).await;
    let page = s.top_level(PostId(9), true, None, 10).await.expect("page");
    assert_eq!(page.iter().map(|c| c.id).collect::<Vec<_>>(), vec![top]);
    assert_eq!(reads(&s), 1, "the post just written to is read on the primary");
    s.top_level(PostId(10), true, None, 10).await.expect("page");
    s.replies(top, None, 10).await.expect("replies");
    assert_eq!(reads(&s), 3, "another post, and a thread nobody wrote in, use the replica");
    let reply = comment(&s, 9, Some(top)).await;
    let replies = s.replies(top, None, 10).await.expect("replies");
    assert_eq!(replies.iter().map(|c| c.id).collect::<Vec<_>>(), vec![reply]);
    s.top_level(PostId(9), true, None, 10).await.expect("page");
    assert_eq!(reads(&s), 3, "the thread and the post of the reply are read on the primary");
    // The replica has replayed past both writes.
    tokio::time::sleep(Duration::from_millis(2)).await;
    fresh_now(&s);
    s.replies(top, None, 10).await.expect("replies");
    s.top_level(PostId(9), true, None, 10).await.expect("page");
    assert_eq!(reads(&s), 5);
}

/// A replica last known fresh longer ago than the bound serves no reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_staler_than_the_bound_serves_no_reads() {
    let t = TestShards::create(1).await;
    let s = with_lag(&t, vec![t.urls[0].clone()], Duration::from_millis(300)).await;
    like(&s, 42, 7).await;
    pretend_fresh(&s).await;
    s.liked_among(UserId(5), TargetKind::Post, &[42]).await.expect("liked");
    assert_eq!(reads(&s), 1);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert!(!s.replica_status(0).expect("replica").serving);
    read_everything(&s).await;
    assert_eq!(reads(&s), 1, "every read went to the primary");
}

/// A TCP proxy to `to` that forwards until `frozen` is set, then swallows every byte both
/// ways while keeping the connections open: a replica host that hangs (a partition dropping
/// packets), as opposed to one that refuses or resets.
async fn freezing_proxy(to: String, frozen: std::sync::Arc<std::sync::atomic::AtomicBool>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = tokio::net::TcpStream::connect(&to).await else { continue };
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            tokio::spawn(pump(cr, sw, frozen.clone()));
            tokio::spawn(pump(sr, cw, frozen.clone()));
        }
    });
    port
}

/// Copy `from` into `into` until either closes; while `frozen`, read and drop.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut into: tokio::net::tcp::OwnedWriteHalf,
    frozen: std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if !frozen.load(Ordering::Acquire) && into.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// A replica that stops answering mid-way (its connections stay open): the read waits at most
/// `READ_TIMEOUT`, the primary answers it, and the replica is marked down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_hangs_costs_one_timeout_then_the_primary_answers() {
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    let t = TestShards::create(1).await;
    let frozen = Arc::new(AtomicBool::new(false));
    let port = freezing_proxy("127.0.0.1:5432".into(), frozen.clone()).await;
    let db = t.urls[0].rsplit('/').next().expect("db").split('?').next().expect("db").to_string();
    let via_proxy = format!("postgres://postgres@127.0.0.1:{port}/{db}?sslmode=disable");
    let s = with_lag(&t, vec![via_proxy], Duration::from_secs(60)).await;
    like(&s, 42, 7).await;
    pretend_fresh(&s).await;
    let users = |l: Vec<likewise_core::ports::Liker>| l.iter().map(|l| l.user.0).collect::<Vec<_>>();
    assert_eq!(users(s.likers(Target::post(42), None, 10).await.expect("likers")), vec![7]);
    assert_eq!(reads(&s), 1, "read through the proxy while it forwards");
    frozen.store(true, Ordering::Release);
    let started = std::time::Instant::now();
    let likers = tokio::time::timeout(Duration::from_secs(10), s.likers(Target::post(42), None, 10))
        .await
        .expect("the read waited for the hung replica")
        .expect("no error for the caller");
    let took = started.elapsed();
    assert_eq!(users(likers), vec![7]);
    assert!(took >= super::READ_TIMEOUT && took < super::READ_TIMEOUT * 3, "{took:?}");
    let status = s.replica_status(0).expect("replica");
    assert!(!status.serving, "marked down: {status:?}");
    assert_eq!((status.reads, status.fallbacks), (1, 1), "{status:?}");
    let started = std::time::Instant::now();
    read_everything(&s).await;
    assert!(started.elapsed() < super::READ_TIMEOUT, "later reads do not wait for it");
}
