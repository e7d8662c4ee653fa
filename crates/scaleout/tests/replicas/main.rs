//! Read replicas on a real streaming replica (`store.postgres_replicas`), started by the test
//! (`cluster.rs`): reads are served by the replica while it is fresh; a like reaches the reads
//! within the lag bound; a comment's author reads their fresh comment although the replica
//! lacks it; a replica whose replay is paused stops serving once the bound has passed, and the
//! primary answers correctly; a stopped replica costs no read error, and reads return to it
//! once it is back.
//!
//! Which server answered is checked twice: by the store's own count of replica reads, and by
//! `pg_stat_statements` on each server, since every read the test makes runs exactly one of
//! the statements [`served`] counts.

mod cluster;

use cluster::Cluster;
use likewise_core::comment::status::CommentStatus;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::like::{LikeAction, LikeOp, Target, TargetKind};
use likewise_core::write::{CommentOp, CommentOutcome, CommentRecord};
use likewise_engine::Stores;
use likewise_engine::group_commit::GroupCommitOptions;
use likewise_scaleout::postgres::{PgOptions, PgStore, ReplicaStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The lag bound of the test's store.
const MAX_LAG: Duration = Duration::from_secs(2);
const DB: &str = "likewise";

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connecting {url}: {e}"));
    tokio::spawn(conn);
    client
}

/// Calls of the read statements the test makes (likers pages, the viewer-liked lookup, a
/// post's comment page) that `server` ran.
async fn served(server: &tokio_postgres::Client) -> i64 {
    server
        .query_one(
            "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
             WHERE query NOT LIKE '%pg_stat_statements%'
               AND (query LIKE 'SELECT win, page, users, times FROM liker_pages%'
                    OR query LIKE 'SELECT target FROM user_likes WHERE user_id = $1 AND kind = $2 AND target%'
                    OR query LIKE '%FROM comments WHERE post_id = $1 AND parent IS NULL%')",
            &[],
        )
        .await
        .expect("pg_stat_statements")
        .get(0)
}

fn status(store: &PgStore) -> ReplicaStatus {
    store.replica_status(0).expect("shard 0 has a replica")
}

/// Poll `ok` every 10 ms until it holds; panics after `limit`. Returns the time it took.
async fn wait_for(what: &str, limit: Duration, ok: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < limit, "waited {limit:?} for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    start.elapsed()
}

fn like(user: u64) -> LikeOp {
    LikeOp {
        target: Target::post(42),
        user: UserId(user),
        action: LikeAction::Like,
        target_author: UserId(9),
        post: 42,
        ts_ms: likewise_engine::now_ms(),
        trace: None,
    }
}

async fn likers(stores: &Stores) -> Vec<u64> {
    let page = stores.likes.likers(Target::post(42), None, 10).await.expect("no read error");
    page.iter().map(|l| l.user.0).collect()
}

async fn comments(stores: &Stores, post: u64) -> Vec<CommentId> {
    let page = stores.comments.top_level(PostId(post), true, None, 10).await.expect("no read error");
    page.iter().map(|c| c.id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_go_to_a_fresh_replica_and_to_the_primary_otherwise() {
    let cluster = Arc::new(tokio::task::spawn_blocking(Cluster::start).await.expect("cluster"));
    let admin = connect(&cluster.url(&cluster.primary, "postgres")).await;
    admin.batch_execute(&format!("CREATE DATABASE {DB}")).await.expect("database");
    let primary = connect(&cluster.url(&cluster.primary, DB)).await;
    primary.batch_execute("CREATE EXTENSION pg_stat_statements").await.expect("pg_stat_statements");
    let store = PgStore::connect(&PgOptions {
        shards: vec![cluster.url(&cluster.primary, DB)],
        replicas: vec![cluster.url(&cluster.replica, DB)],
        replica_max_lag: MAX_LAG,
        pool_size: 4,
        ..PgOptions::default()
    })
    .expect("store");
    store.migrate().await.expect("migrate");
    let migrated = Instant::now();
    let stores = likewise_scaleout::from_postgres(store.clone(), GroupCommitOptions::default());

    // (a) Once the replica is known fresh as of a time after the migration (so it has the
    // tables), the reads are its.
    let took = wait_for("the replica to be fresh after the migration", Duration::from_secs(20), || {
        let s = status(&store);
        s.serving && s.lag.is_some_and(|lag| lag < migrated.elapsed())
    })
    .await;
    eprintln!("replica fresh after the migration in {took:?}");
    let replica = connect(&cluster.url(&cluster.replica, DB)).await;
    let (p0, r0, s0) = (served(&primary).await, served(&replica).await, status(&store));
    assert!(likers(&stores).await.is_empty());
    assert_eq!(stores.likes.liked_among(UserId(1), TargetKind::Post, &[42]).await.expect("liked"), [false]);
    assert!(comments(&stores, 42).await.is_empty());
    assert_eq!(status(&store).reads - s0.reads, 3, "the store sent the three reads to the replica");
    assert_eq!(served(&replica).await - r0, 3, "the replica ran them");
    assert_eq!(served(&primary).await - p0, 0, "the primary ran none");

    // (b) A like committed on the primary reaches the reads within the bound.
    stores.writer.submit(like(1)).await.expect("like");
    let written = Instant::now();
    let s1 = status(&store);
    let mut polls = 0;
    let visible = loop {
        polls += 1;
        if likers(&stores).await == [1] {
            break written.elapsed();
        }
        assert!(written.elapsed() < MAX_LAG, "a like not read {MAX_LAG:?} after its commit");
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let by_replica = status(&store).reads - s1.reads;
    eprintln!("like read after {visible:?} ({polls} reads, {by_replica} by the replica)");
    assert!(by_replica >= 1, "the reads went to the replica: {:?}", status(&store));

    // (c) Replay paused: the replica is fresh only as of the pause.
    replica.batch_execute("SELECT pg_wal_replay_pause()").await.expect("pause replay");
    let paused = Instant::now();
    // Its author reads the comment just written, from the primary: the replica lacks it.
    let mine =
        match stores.writer.submit_comment(CommentOp::Create(comment(43), None)).await.expect("comment") {
            likewise_engine::group_commit::Committed { outcome: CommentOutcome::Done(Some(r)), .. } => r.id,
            other => panic!("a create answered {:?}", other.outcome),
        };
    let s2 = status(&store);
    assert_eq!(comments(&stores, 43).await, [mine], "the author sees their comment");
    assert_eq!(status(&store).reads, s2.reads, "read on the primary");
    assert!(comments(&stores, 44).await.is_empty());
    assert_eq!(
        status(&store).reads,
        s2.reads + 1,
        "another post's page, {:?} after the pause, is still read on the replica",
        paused.elapsed()
    );
    let on_replica: i64 = replica
        .query_one("SELECT count(*) FROM comments WHERE post_id = 43", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(on_replica, 0, "the replica has not replayed the comment");
    stores.writer.submit(like(2)).await.expect("like");
    wait_for("the paused replica to stop serving", MAX_LAG + Duration::from_secs(2), || {
        !status(&store).serving
    })
    .await;
    eprintln!("paused replica stopped serving {:?} after the pause", paused.elapsed());
    let (p3, r3, s3) = (served(&primary).await, served(&replica).await, status(&store));
    assert_eq!(likers(&stores).await, [2, 1], "the primary answers with the new like");
    assert_eq!(stores.likes.liked_among(UserId(1), TargetKind::Post, &[42]).await.expect("liked"), [false]);
    assert_eq!(comments(&stores, 43).await, [mine]);
    assert_eq!(status(&store).reads, s3.reads, "no read went to the stale replica");
    assert_eq!(served(&replica).await, r3, "the replica ran none");
    assert_eq!(served(&primary).await - p3, 3, "the primary ran all three");
    replica.batch_execute("SELECT pg_wal_replay_resume()").await.expect("resume replay");
    let back =
        wait_for("the resumed replica to serve", Duration::from_secs(10), || status(&store).serving).await;
    eprintln!("resumed replica serving again after {back:?}");
    let s4 = status(&store);
    assert_eq!(likers(&stores).await, [2, 1]);
    assert_eq!(status(&store).reads, s4.reads + 1, "read on the replica again");

    // (d) The replica stops: no read fails, the primary answers; it serves again once back.
    drop(replica);
    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.stop_server(&c.replica)).await.expect("stop the replica");
    let s5 = status(&store);
    for _ in 0..20 {
        assert_eq!(likers(&stores).await, [2, 1]);
        assert_eq!(comments(&stores, 43).await, [mine]);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let s6 = status(&store);
    assert!(!s6.serving, "{s6:?}");
    eprintln!("replica stopped: {} reads fell back after an error on it", s6.fallbacks - s5.fallbacks);
    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.start_server(&c.replica)).await.expect("restart the replica");
    let back =
        wait_for("the restarted replica to serve", Duration::from_secs(20), || status(&store).serving).await;
    eprintln!("restarted replica serving after {back:?}");
    let replica = connect(&cluster.url(&cluster.replica, DB)).await;
    let (r7, s7) = (served(&replica).await, status(&store));
    assert_eq!(likers(&stores).await, [2, 1]);
    assert_eq!(status(&store).reads, s7.reads + 1, "the store reads the replica again");
    assert_eq!(served(&replica).await - r7, 1, "and the replica ran the read");
    stores.writer.close();
}

fn comment(post: u64) -> CommentRecord {
    CommentRecord {
        id: CommentId(0),
        post: PostId(post),
        author: UserId(3),
        post_author: UserId(9),
        parent: None,
        reply_to_user: None,
        status: CommentStatus::Visible,
        text: "first!".into(),
        simhash: 0,
    }
}
