//! Moving buckets on real shards while two nodes write: every acknowledged like and comment
//! ends on exactly one shard, the one the catalog names; moves stopped at any step resume.

use super::*;
use crate::postgres::placement::Placement;
use crate::postgres::test_ops::{comment, like};
use crate::postgres::testing::TestShards;
use likewise_core::ids::{CommentId, PostId};
use likewise_core::like::Target;
use likewise_core::ports::{CommentReader, LikeReader};
use likewise_core::write::{CommentOutcome, WriteOp, WriteOutcome};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Posts 1..=POSTS, each in its own bucket (the bucket count is 4,096).
const POSTS: u64 = 24;

/// Three shards whose catalog places every bucket on shards 0 and 1: the third was just added.
async fn two_and_a_new_one() -> TestShards {
    let t = TestShards::create(3).await;
    t.client(0)
        .await
        .batch_execute(
            "UPDATE placement SET shard = bucket % 2; UPDATE placement_catalog SET version = version + 1",
        )
        .await
        .expect("place on two shards");
    t
}

async fn node(t: &TestShards) -> Arc<PgStore> {
    let s = t.store().await;
    s.watch_placement(Duration::from_millis(50));
    Arc::new(s)
}

/// What one writer had acknowledged: each like key's last acknowledged state, and the
/// comments created (with their posts).
#[derive(Default)]
struct Acked {
    likes: HashMap<(Target, u64), (u64, bool)>,
    comments: Vec<(CommentId, u64)>,
    tops: Vec<(CommentId, u64)>,
    /// Operations answered with an error.
    failed: usize,
}

/// A refused write committed nothing: it is not acknowledged. Only a lost connection during
/// a commit leaves the outcome unknown, which this test's servers never do.
fn failed(acked: &mut Acked, e: &likewise_core::StoreError) {
    acked.failed += 1;
    assert!(!matches!(e, likewise_core::StoreError::OutcomeUnknown { .. }), "an unknown outcome: {e}");
    assert!(acked.failed < 60, "writes keep failing: {e}");
}

/// A node's writer until `stop`: batches of likes and unlikes of posts and comments by its
/// own users (a key is only ever written by one writer, in order), and comments and replies.
async fn writer(s: Arc<PgStore>, me: u64, stop: Arc<AtomicBool>) -> Acked {
    let mut acked = Acked::default();
    let mut round = 0u64;
    while !stop.load(Ordering::Acquire) || round < 3 {
        round += 1;
        let mut ops = Vec::new();
        let mut keys = HashSet::new();
        for u in 0..12u64 {
            let user = me * 100_000 + u;
            let post = (u * 7 + round * 5) % POSTS + 1;
            let target = match acked.comments.iter().rev().find(|(_, p)| *p == post) {
                Some((c, _)) if round.is_multiple_of(3) => Target::comment(c.0),
                _ => Target::post(post),
            };
            if keys.insert((target, user)) {
                let on = !acked.likes.get(&(target, user)).is_some_and(|(_, on)| *on);
                ops.push(((target, user, post, on), like(target, post, user, on)));
            }
        }
        let post = round % POSTS + 1;
        // Replies go under a top-level comment (the first of the pair each round).
        let parent = acked.tops.iter().rev().find(|(_, p)| *p == post).map(|(c, _)| *c);
        let creates = [(post, None), (post, parent)];
        let mut batch: Vec<WriteOp> = ops.iter().map(|(_, op)| op.clone()).collect();
        batch.extend(creates.iter().map(|(p, parent)| comment(*p, *parent, me)));
        // Each operation hears its own part's result: a shard's part can commit while
        // another's fails, and only what was answered `Ok` is acknowledged.
        let out = s.apply_each_async(&batch).await;
        for (((target, user, post, on), _), o) in ops.iter().zip(&out) {
            match o {
                Ok(WriteOutcome::Like(_)) => {
                    acked.likes.insert((*target, *user), (*post, *on));
                }
                Ok(other) => panic!("a like answered {other:?}"),
                Err(e) => failed(&mut acked, e),
            }
        }
        for ((p, parent), o) in creates.iter().zip(&out[ops.len()..]) {
            match o {
                Ok(WriteOutcome::Comment(CommentOutcome::Done(Some(r)))) => {
                    acked.comments.push((r.id, *p));
                    if parent.is_none() {
                        acked.tops.push((r.id, *p));
                    }
                }
                // A reply under a parent of another post never happens here.
                Ok(other) => panic!("a create answered {other:?}"),
                Err(e) => failed(&mut acked, e),
            }
        }
    }
    acked
}

/// Every acknowledged like and comment is on exactly one shard, the one the catalog names;
/// nothing unacknowledged or unliked is anywhere; reads through a node agree.
async fn check(t: &TestShards, s: &PgStore, acked: &[Acked]) {
    let p = s.load_placement().await.expect("catalog");
    let mut like_rows: HashMap<(i16, i64, i64), Vec<usize>> = HashMap::new();
    let mut comment_rows: HashMap<i64, Vec<usize>> = HashMap::new();
    for shard in 0..3 {
        let c = t.client(shard).await;
        for r in c.query("SELECT kind, target, user_id FROM likes", &[]).await.expect("likes") {
            like_rows.entry((r.get(0), r.get(1), r.get(2))).or_default().push(shard);
        }
        for r in c.query("SELECT id FROM comments", &[]).await.expect("comments") {
            comment_rows.entry(r.get(0)).or_default().push(shard);
        }
    }
    let mut want_likers: HashMap<Target, HashSet<u64>> = HashMap::new();
    let mut liked = 0;
    for a in acked {
        for ((target, user), (post, on)) in &a.likes {
            let key = (i16::from(target.kind.code()), target.id as i64, *user as i64);
            let found = like_rows.get(&key).cloned().unwrap_or_default();
            if *on {
                liked += 1;
                assert_eq!(found, vec![p.shard_of_post(PostId(*post))], "like {key:?} of post {post}");
                want_likers.entry(*target).or_default().insert(*user);
            } else {
                assert!(found.is_empty(), "unliked {key:?} still on shards {found:?}");
            }
        }
        for (id, post) in &a.comments {
            let found = comment_rows.get(&(id.0 as i64)).cloned().unwrap_or_default();
            assert_eq!(found, vec![p.shard_of_post(PostId(*post))], "comment {id:?} of post {post}");
            assert_eq!(s.shard_of_comment(*id), p.shard_of_post(PostId(*post)));
        }
    }
    assert!(liked > 50, "the writers liked too little to tell: {liked}");
    let acked_likes: usize = acked.iter().map(|a| a.likes.values().filter(|(_, on)| *on).count()).sum();
    assert_eq!(like_rows.len(), acked_likes, "rows nobody acknowledged");
    let ids: Vec<CommentId> = acked.iter().flat_map(|a| a.comments.iter().map(|(c, _)| *c)).collect();
    assert_eq!(comment_rows.len(), ids.len(), "comments nobody acknowledged");
    let read = s.comments(&ids).await.expect("read comments");
    assert!(read.iter().all(Option::is_some), "every comment reads through the node");
    for (target, users) in want_likers {
        let likers = s.likers(target, None, 10_000).await.expect("likers");
        let got: HashSet<u64> = likers.iter().map(|l| l.user.0).collect();
        assert_eq!(got, users, "likers of {target:?}");
    }
}

fn buckets_on(p: &Placement, shard: usize) -> Vec<u32> {
    (1..=POSTS as u32).filter(|b| p.shards_of_buckets()[*b as usize] as usize == shard).collect()
}

/// Two nodes write while the buckets of every post move, half from each shard, to the new
/// third shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn buckets_move_to_a_new_shard_while_two_nodes_write() {
    let t = two_and_a_new_one().await;
    let (a, b, mover) = (node(&t).await, node(&t).await, node(&t).await);
    let stop = Arc::new(AtomicBool::new(false));
    let writers = [(a.clone(), 1), (b.clone(), 2)].map(|(s, me)| tokio::spawn(writer(s, me, stop.clone())));
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The writers go on between the bulk copy and the fence: the catch-up must carry what
    // they write then (likes, unlikes, comments), or `check` finds it missing.
    let opts = MoveOptions {
        grace: Duration::from_millis(200),
        drain: false,
        pause_after_bulk: Duration::from_millis(300),
        ..MoveOptions::default()
    };
    let p = mover.placement();
    let version = p.version;
    for source in [0, 1] {
        let report = mover.move_buckets(&buckets_on(&p, source), 2, &opts).await.expect("move");
        assert_eq!((report.source, report.target), (source, 2));
        assert!(report.rows > report.under_fence && report.caught_up > 0, "{report:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let logged: i64 =
        t.client(0).await.query_one("SELECT count(*) FROM bucket_changes", &[]).await.expect("log").get(0);
    assert_eq!(logged, 0, "a finished move leaves no change log");
    stop.store(true, Ordering::Release);
    let mut acked = Vec::new();
    for w in writers {
        acked.push(w.await.expect("writer"));
    }
    let p = mover.load_placement().await.expect("catalog");
    assert_eq!(p.version, version + 2);
    assert!(buckets_on(&p, 0).is_empty() && buckets_on(&p, 1).is_empty());
    assert_eq!(buckets_on(&p, 2).len(), POSTS as usize, "the new shard holds every post");
    for shard in [0, 1] {
        let n: i64 =
            t.client(shard).await.query_one("SELECT count(*) FROM likes", &[]).await.expect("n").get(0);
        assert_eq!(n, 0, "shard {shard} kept rows of moved buckets");
    }
    check(&t, &a, &acked).await;
    check(&t, &b, &acked).await;
    let journal: i64 =
        t.client(0).await.query_one("SELECT count(*) FROM bucket_moves", &[]).await.expect("journal").get(0);
    assert_eq!(journal, 0, "finished moves leave the journal");
}

/// A move stopped after each of its steps (as a crash there would) and resumed, while a node
/// writes: the same guarantees.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_move_stopped_at_any_step_resumes() {
    let t = two_and_a_new_one().await;
    let (a, mover) = (node(&t).await, node(&t).await);
    let stop = Arc::new(AtomicBool::new(false));
    let w = tokio::spawn(writer(a.clone(), 1, stop.clone()));
    let p = mover.placement();
    let on_0 = buckets_on(&p, 0);
    let steps = [Step::Journaled, Step::BulkCopied, Step::Copied, Step::Marked, Step::Switched];
    for (k, step) in steps.into_iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let group: Vec<u32> = on_0.iter().copied().skip(k * 2).take(2).collect();
        let opts = MoveOptions {
            grace: Duration::from_millis(100),
            drain: false,
            stop_after: Some(step),
            ..MoveOptions::default()
        };
        let e = mover.move_buckets(&group, 2, &opts).await.expect_err("stopped");
        assert!(e.to_string().contains("stopped after"), "{e}");
        let resumed = mover
            .resume_moves(&MoveOptions {
                grace: Duration::from_millis(100),
                drain: false,
                ..MoveOptions::default()
            })
            .await
            .expect("resume");
        assert_eq!(resumed.iter().flat_map(|r| r.buckets.clone()).collect::<Vec<_>>(), group, "{step:?}");
        let now = mover.placement();
        assert!(group.iter().all(|b| now.shards_of_buckets()[*b as usize] == 2), "{step:?}");
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    stop.store(true, Ordering::Release);
    let acked = w.await.expect("writer");
    check(&t, &a, &[acked]).await;
}

#[test]
fn a_plan_evens_the_buckets_out_in_groups() {
    let legacy = crate::postgres::placement::Legacy { shards: 2, comment_max: 0, item_max: 0 };
    let p = Placement::initial(2, legacy, 1);
    let moves = plan(&p, 3, 16);
    let mut held = [2048usize, 2048, 0];
    for (group, to) in &moves {
        assert!(!group.is_empty() && group.len() <= 16);
        let from = p.shards_of_buckets()[group[0] as usize] as usize;
        assert!(
            group.iter().all(|b| p.shards_of_buckets()[*b as usize] as usize == from),
            "one source a move"
        );
        held[from] -= group.len();
        held[*to] += group.len();
    }
    assert_eq!(held, [1366, 1365, 1365]);
    assert_eq!(moves.len(), 86);
    let moved: HashSet<u32> = moves.iter().flat_map(|(g, _)| g.clone()).collect();
    assert_eq!(moved.len(), 1365, "no bucket moves twice");
    assert!(plan(&p, 2, 16).is_empty(), "nothing to even out");
}

/// A node that writes nothing still reads the new catalog: its watcher does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_node_reads_a_switched_catalog_within_the_interval() {
    let t = two_and_a_new_one().await;
    let (idle, mover) = (node(&t).await, node(&t).await);
    let before = idle.placement().version;
    let opts = MoveOptions { grace: Duration::from_millis(10), drain: false, ..MoveOptions::default() };
    mover.move_buckets(&[3], 2, &opts).await.expect("move");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(idle.placement().version, before + 1);
    assert_eq!(idle.shard_of_post(PostId(3)), 2);
}

/// A comment create retried under its `Idempotency-Key` after its post's bucket moved finds
/// the key on the new shard: the first comment is answered again, no second one is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_moves_with_its_comment() {
    use likewise_core::comment::idempotency::{IdempotencyKey, Keyed};
    let t = two_and_a_new_one().await;
    let s = node(&t).await;
    let post = 5u64;
    let WriteOp::Comment(likewise_core::write::CommentOp::Create(record, _)) = comment(post, None, 40) else {
        unreachable!()
    };
    let keyed = Keyed {
        caller: likewise_core::ids::UserId(40),
        key: IdempotencyKey::parse(b"retry-me-across-a-move").expect("key"),
        fingerprint: [7; 16],
    };
    let create = || WriteOp::KeyedComment(record.clone(), None, keyed.clone());
    let first = match s.apply_async(&[create()]).await.expect("create").pop() {
        Some(WriteOutcome::Comment(CommentOutcome::Done(Some(r)))) => r.id,
        other => panic!("{other:?}"),
    };
    let bucket = s.placement().bucket_of(post);
    let opts = MoveOptions { grace: Duration::from_millis(10), drain: false, ..MoveOptions::default() };
    s.move_buckets(&[bucket], 2, &opts).await.expect("move");
    assert_eq!(s.shard_of_post(PostId(post)), 2);
    match s.apply_async(&[create()]).await.expect("retry").pop() {
        Some(WriteOutcome::Comment(CommentOutcome::Replayed(r))) => assert_eq!(r.comment.id, first),
        other => panic!("the retry made {other:?}"),
    }
    let page = s.top_level(PostId(post), true, None, 10).await.expect("page");
    assert_eq!(page.iter().map(|c| c.id).collect::<Vec<_>>(), vec![first], "one comment");
}

/// Writes made while a bucket is copied draw the source's sequences on: the target's are
/// set past them again under the fence, so positions it hands out after the move (own-likes
/// order, IDs, page numbers) are above those of every row and event of the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_target_sequences_pass_what_the_source_drew_during_the_copy() {
    let t = two_and_a_new_one().await;
    let (s, writer_node) = (node(&t).await, node(&t).await);
    let post = 6u64;
    let bucket = s.placement().bucket_of(post);
    let source = s.shard_of_post(PostId(post));
    let opts = MoveOptions {
        grace: Duration::from_millis(10),
        drain: false,
        // Long enough for the 20 commits below to land inside it on a loaded machine (400 ms
        // was not: one landed under the fence instead).
        pause_after_bulk: Duration::from_millis(2_000),
        ..MoveOptions::default()
    };
    let src = t.client(source).await;
    let writes = tokio::spawn(async move {
        // Once the bucket is being copied (logging), like it from 20 users, one commit each.
        loop {
            let logging: bool = src
                .query_one("SELECT EXISTS (SELECT 1 FROM bucket_fences WHERE logging)", &[])
                .await
                .expect("fences")
                .get(0);
            if logging {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        for u in 0..20u64 {
            writer_node.apply_async(&[like(Target::post(post), post, 70_000 + u, true)]).await.expect("like");
        }
    });
    let report = s.move_buckets(&[bucket], 2, &opts).await.expect("move");
    writes.await.expect("writes");
    assert!(report.caught_up >= 20, "{report:?}");
    let drawn: i64 = t
        .client(source)
        .await
        .query_one("SELECT coalesce(max(seq), 0) FROM outbox", &[])
        .await
        .expect("outbox")
        .get(0);
    let next: i64 =
        t.client(2).await.query_one("SELECT last_value FROM outbox_seq_seq", &[]).await.expect("seq").get(0);
    assert!(
        next >= drawn,
        "the target's outbox sequence ({next}) is behind the source's last event ({drawn})"
    );
}

/// A store of its own whose pools hold at most 4 connections per shard: `limit_idle` reaches
/// every one of them.
async fn small_pools(t: &TestShards) -> PgStore {
    let s = PgStore::connect(&crate::postgres::PgOptions {
        shards: t.urls.clone(),
        pool_size: 4,
        ..crate::postgres::PgOptions::default()
    })
    .expect("connect");
    s.load_placement().await.expect("catalog");
    s
}

/// Give every connection of `s`'s pools the idle-in-transaction limit `limit`, in place of the
/// service's 30 s (a session setting, kept while a connection is pooled).
async fn limit_idle(s: &PgStore, limit: &str) {
    for shard in 0..s.shard_count() {
        let mut held = Vec::new();
        for _ in 0..4 {
            let c = s.conn(shard).await.expect("conn");
            c.batch_execute(&format!("SET idle_in_transaction_session_timeout = '{limit}'"))
                .await
                .expect("set");
            held.push(c);
        }
    }
}

/// Post 5's bucket (on shard 1) with a like, and a test session holding the target's
/// (shard 2's) `likes` locked in an open transaction: a move of the bucket to shard 2 then
/// waits in its bulk copy, its snapshot of the source open and idle.
async fn stalled_target(t: &TestShards, s: &PgStore) -> (u32, tokio_postgres::Client) {
    let post = 5u64;
    let bucket = s.placement().bucket_of(post);
    assert_eq!(s.shard_of_post(PostId(post)), 1);
    s.apply_async(&[like(Target::post(post), post, 71, true)]).await.expect("like");
    let locker = t.client(2).await;
    locker.batch_execute("BEGIN; LOCK TABLE likes IN ACCESS EXCLUSIVE MODE").await.expect("lock likes");
    (bucket, locker)
}

/// The source (shard 1) session of a stalled move, once it is idle in its transaction.
async fn idle_mover_on_source(t: &TestShards) -> (tokio_postgres::Client, i32) {
    let c = t.client(1).await;
    for _ in 0..1500 {
        let pid: Option<i32> = c
            .query_opt(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
                 AND state = 'idle in transaction'",
                &[],
            )
            .await
            .expect("activity")
            .map(|r| r.get(0));
        if let Some(pid) = pid {
            return (c, pid);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no mover transaction became idle on the source");
}

/// A move whose transactions sit idle longer than the limit the service sets on its
/// connections (30 s; 200 ms here) completes: the server ends no mover session for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_outlasts_the_services_idle_in_transaction_limit() {
    let t = two_and_a_new_one().await;
    let s = small_pools(&t).await;
    limit_idle(&s, "200ms").await;
    let (bucket, locker) = stalled_target(&t, &s).await;
    let opts = MoveOptions { grace: Duration::from_millis(10), drain: false, ..MoveOptions::default() };
    let group = [bucket];
    let (moved, ()) = tokio::join!(s.move_buckets(&group, 2, &opts), async {
        let (c, pid) = idle_mover_on_source(&t).await;
        // Until the session has been idle five times the limit, or the server ended it.
        loop {
            let long: Option<bool> = c
                .query_opt(
                    "SELECT clock_timestamp() - state_change > interval '1 s' FROM pg_stat_activity
                     WHERE pid = $1 AND state = 'idle in transaction'",
                    &[&pid],
                )
                .await
                .expect("activity")
                .map(|r| r.get(0));
            if long != Some(false) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        locker.batch_execute("COMMIT").await.expect("unlock");
    });
    let report = moved.expect("the move completes");
    assert_eq!(report.rows, 1 + report.under_fence, "{report:?}");
    assert_eq!(s.shard_of_post(PostId(5)), 2);
    let n: i64 = t.client(2).await.query_one("SELECT count(*) FROM likes", &[]).await.expect("n").get(0);
    assert_eq!(n, 1, "the like moved");
}

/// A move whose source session is lost midway (the server ends it) is resumed by the mover
/// itself, once, with a message saying why, and completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_whose_session_is_lost_is_resumed_by_the_mover() {
    let t = two_and_a_new_one().await;
    let s = small_pools(&t).await;
    let (bucket, locker) = stalled_target(&t, &s).await;
    let opts = MoveOptions { grace: Duration::from_millis(10), drain: false, ..MoveOptions::default() };
    let mut told = Vec::new();
    let mut tell = |line: String| told.push(line);
    let group = [bucket];
    let (moved, ()) = tokio::join!(s.move_buckets_resuming(&group, 2, &opts, 2, &mut tell), async {
        let (c, pid) = idle_mover_on_source(&t).await;
        let ended: bool =
            c.query_one("SELECT pg_terminate_backend($1)", &[&pid]).await.expect("terminate").get(0);
        assert!(ended);
        locker.batch_execute("COMMIT").await.expect("unlock");
    });
    let report = moved.expect("the move completes");
    assert_eq!((report.buckets.clone(), report.source, report.target), (vec![bucket], 1, 2), "{report:?}");
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(told[0].contains("resuming the move (retry 1 of 2)"), "{told:?}");
    assert_eq!(s.shard_of_post(PostId(5)), 2);
    for (shard, want) in [(1, 0), (2, 1)] {
        let n: i64 =
            t.client(shard).await.query_one("SELECT count(*) FROM likes", &[]).await.expect("n").get(0);
        assert_eq!(n, want, "shard {shard}");
    }
    let journal: i64 =
        t.client(0).await.query_one("SELECT count(*) FROM bucket_moves", &[]).await.expect("journal").get(0);
    assert_eq!(journal, 0);
}

/// The journal tells the buckets in a move now from those a run has switched already (their
/// old rows not dropped yet): `shards status` shows the first as in progress, not both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_tells_buckets_in_a_move_from_switched_ones() {
    let t = two_and_a_new_one().await;
    let s = node(&t).await;
    assert_eq!(s.journaled_moves().await.expect("journal"), JournaledMoves::default());
    let on_0 = buckets_on(&s.placement(), 0);
    let stopped = |step| MoveOptions { drain: false, stop_after: Some(step), ..MoveOptions::default() };
    for (group, step) in [(&on_0[0..3], Step::Switched), (&on_0[3..5], Step::BulkCopied)] {
        let e = s.move_buckets(group, 2, &stopped(step)).await.expect_err("stopped");
        assert!(e.to_string().contains("stopped after"), "{e}");
    }
    assert_eq!(s.journaled_moves().await.expect("journal"), JournaledMoves { moving: 2, switched: 3 });
    s.resume_moves(&MoveOptions { grace: Duration::from_millis(10), drain: false, ..MoveOptions::default() })
        .await
        .expect("resume");
    assert_eq!(s.journaled_moves().await.expect("journal"), JournaledMoves::default());
}

/// The aggregator's backlog is drained before the fence, while the buckets still take writes:
/// an aggregator a second behind (played here by the test, which applies the source's outbox
/// by moving the consumer's offset) is waited for with no write refused, and the fence then
/// holds the buckets' writes only for the events of its last moments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_aggregator_is_waited_for_before_the_fence() {
    let t = two_and_a_new_one().await;
    let s = node(&t).await;
    let post = 7u64;
    let source = s.shard_of_post(PostId(post));
    let bucket = s.placement().bucket_of(post);
    for u in 0..10u64 {
        s.apply_async(&[like(Target::post(post), post, 72_000 + u, true)]).await.expect("like");
    }
    let consumer =
        likewise_core::ports::cluster::shard_consumer(likewise_core::counter::COUNTERS_CONSUMER, source);
    let home = t.client(s.offset_shard(&consumer).expect("home")).await;
    let src = t.client(source).await;
    let lag = Duration::from_secs(1);
    let aggregator = tokio::spawn(async move {
        // A second after the move starts, the outbox so far is applied; whether the buckets
        // were fenced by then tells whether their writes waited for it.
        loop {
            let listed: bool = src
                .query_one("SELECT EXISTS (SELECT 1 FROM bucket_fences)", &[])
                .await
                .expect("fences")
                .get(0);
            if listed {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(lag).await;
        let fenced: bool = src
            .query_one("SELECT EXISTS (SELECT 1 FROM bucket_fences WHERE NOT logging)", &[])
            .await
            .expect("fences")
            .get(0);
        let last: i64 =
            src.query_one("SELECT coalesce(max(seq), 0) FROM outbox", &[]).await.expect("outbox").get(0);
        home.execute(
            "INSERT INTO consumer_offsets (consumer, upto) VALUES ($1, $2)
             ON CONFLICT (consumer) DO UPDATE SET upto = EXCLUDED.upto",
            &[&consumer, &last],
        )
        .await
        .expect("offset");
        fenced
    });
    let opts = MoveOptions { grace: Duration::from_millis(10), ..MoveOptions::default() };
    let report = s.move_buckets(&[bucket], 2, &opts).await.expect("move");
    let fenced_while_behind = aggregator.await.expect("aggregator");
    eprintln!("a move behind an aggregator {lag:?} late held writes {:?}", report.fenced_for);
    assert!(!fenced_while_behind, "the buckets' writes were refused while the aggregator caught up");
    assert_eq!(s.shard_of_post(PostId(post)), 2);
}

/// The relay publishes outbox rows as their transactions commit, so a row can reach the
/// stream after a row with a higher `seq`: here the moving post's like drew the lower `seq`,
/// but the relay (played by the test) published the other post's row first, and the source's
/// aggregator (played by moving its offset) has applied only that one. The drain must wait
/// for the like's row: taking the stream position of the outbox's last row let the move copy
/// a counter without the like, and the aggregator then applied it on the old shard, so the
/// count on the new one stayed a like short of its rows. Once the aggregator has applied the
/// row, the move completes with the like in the counter it copied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_waits_for_a_row_relayed_after_a_later_one() {
    let t = two_and_a_new_one().await;
    let s = PgStore::connect(&crate::postgres::PgOptions {
        shards: t.urls.clone(),
        pool_size: 8,
        stream_positions: true,
        ..crate::postgres::PgOptions::default()
    })
    .expect("connect");
    s.load_placement().await.expect("catalog");
    let (moving, other) = (7u64, 9u64);
    let source = s.shard_of_post(PostId(moving));
    assert_eq!(s.shard_of_post(PostId(other)), source);
    let bucket = s.placement().bucket_of(moving);
    s.apply_async(&[like(Target::post(moving), moving, 73_001, true)]).await.expect("like");
    s.apply_async(&[like(Target::post(other), other, 73_002, true)]).await.expect("like");
    let src = t.client(source).await;
    // Published out of `seq` order: the other post's later row first.
    src.batch_execute(&format!(
        "UPDATE outbox SET stream_seq = CASE WHEN part = {other} THEN 1 ELSE 2 END",
        other = other % crate::stream::PARTITIONS
    ))
    .await
    .expect("relay");
    let consumer =
        likewise_core::ports::cluster::shard_consumer(likewise_core::counter::COUNTERS_CONSUMER, source);
    let home = t.client(s.offset_shard(&consumer).expect("home")).await;
    let applied = |upto: i64| {
        let (home, consumer) = (&home, consumer.clone());
        async move {
            home.execute(
                "INSERT INTO consumer_offsets (consumer, upto) VALUES ($1, $2)
                 ON CONFLICT (consumer) DO UPDATE SET upto = EXCLUDED.upto",
                &[&consumer, &upto],
            )
            .await
            .expect("offset");
        }
    };
    applied(1).await;
    let opts = MoveOptions {
        grace: Duration::from_millis(10),
        drain_timeout: Duration::from_millis(300),
        ..MoveOptions::default()
    };
    let e = s.move_buckets(&[bucket], 2, &opts).await.expect_err("moved before the like was applied");
    assert!(e.to_string().contains("did not apply"), "{e}");
    assert_eq!(s.shard_of_post(PostId(moving)), source);
    // The aggregator applies the like's row; the move is started again and completes.
    src.execute(
        "INSERT INTO counters (kind, target, field, value) VALUES (1, $1, $2, 1)",
        &[&(moving as i64), &i16::from(likewise_core::counter::CounterField::Likes.code())],
    )
    .await
    .expect("counter");
    applied(2).await;
    s.resume_moves(&opts).await.expect("resume");
    assert_eq!(s.shard_of_post(PostId(moving)), 2);
    let counts =
        likewise_core::ports::CounterStore::counts(&s, &[Target::post(moving)]).await.expect("counts");
    assert_eq!(counts[0].likes, 1, "the counter on the new shard");
}

/// After a move, the old shard's aggregator still finds the moved posts among its hottest and
/// recounts them. Its offset is not kept on their new shard, so it used to count every event
/// there as pending and report a false drift (here -3), which its next commit refused as
/// misplaced, failing the whole step. It refuses the recount instead; the new shard's
/// aggregator finds no drift.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_shards_aggregator_does_not_recount_a_moved_post() {
    use likewise_core::ports::CounterStore;
    let t = two_and_a_new_one().await;
    let s = node(&t).await;
    let post = 7u64;
    let source = s.shard_of_post(PostId(post));
    let bucket = s.placement().bucket_of(post);
    let opts = MoveOptions { grace: Duration::from_millis(10), drain: false, ..MoveOptions::default() };
    s.move_buckets(&[bucket], 2, &opts).await.expect("move");
    for u in 0..3u64 {
        s.apply_async(&[like(Target::post(post), post, 74_000 + u, true)]).await.expect("like");
    }
    // The new shard's aggregator applied them.
    let consumer = |shard| {
        likewise_core::ports::cluster::shard_consumer(likewise_core::counter::COUNTERS_CONSUMER, shard)
    };
    let c = s.conn(2).await.expect("conn");
    let head: i64 = c.query_one("SELECT max(seq) FROM outbox", &[]).await.expect("head").get(0);
    c.batch_execute(&format!(
        "INSERT INTO counters (kind, target, field, value) VALUES (1, {post}, {likes}, 3);
         INSERT INTO consumer_offsets (consumer, upto) VALUES ('{consumer}', {upto})",
        likes = likewise_core::counter::CounterField::Likes.code(),
        consumer = consumer(2),
        upto = crate::postgres::outbox::position(head as u64, 0),
    ))
    .await
    .expect("applied");
    let r = s.recount_likes(&consumer(2), Target::post(post)).await.expect("recount");
    assert_eq!((r.rows, r.counter, r.drift()), (3, 3, 0));
    let old = s.recount_likes(&consumer(source), Target::post(post)).await;
    assert!(old.is_err(), "the old shard's aggregator recounted a moved post: {old:?}");
}

/// A bucket moves between a shard still holding `likes` and `user_likes` in their layouts of
/// before migration 26 (columns in another order) and one holding the new layouts, both
/// ways: the rows arrive column by column, whatever the order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_moves_between_shards_holding_likes_in_different_layouts() {
    let t = two_and_a_new_one().await;
    let s = node(&t).await;
    let post = 6u64;
    let source = s.shard_of_post(PostId(post));
    t.client(source)
        .await
        .batch_execute(
            "DROP TABLE likes, user_likes;
             CREATE TABLE likes (kind smallint NOT NULL, target bigint NOT NULL, user_id bigint NOT NULL,
                                 post_id bigint, liked_at bigint NOT NULL, paged boolean NOT NULL DEFAULT false,
                                 PRIMARY KEY (kind, target, user_id));
             CREATE INDEX likes_unpaged_by_time ON likes (kind, target, liked_at DESC, user_id DESC)
                 WHERE NOT paged;
             CREATE TABLE user_likes (user_id bigint NOT NULL, kind smallint NOT NULL, target bigint NOT NULL,
                                      liked_at bigint, PRIMARY KEY (user_id, kind, target));",
        )
        .await
        .expect("the old layouts");
    let ops: Vec<WriteOp> = (1..=20u64).map(|u| like(Target::post(post), post, u, true)).collect();
    s.apply_async(&ops).await.expect("likes");
    s.settle().await.expect("reverse index");
    let rows = |shard: usize| {
        let t = &t;
        async move {
            let c = t.client(shard).await;
            let likes: Vec<(i16, i64, i64, i64, Option<i64>)> = c
                .query(
                    "SELECT kind, target, user_id, liked_at, post_id FROM likes WHERE target = $1 ORDER BY user_id",
                    &[&(post as i64)],
                )
                .await
                .expect("likes")
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
                .collect();
            likes
        }
    };
    let want: Vec<(i16, i64, i64, i64, Option<i64>)> =
        (1..=20i64).map(|u| (1, post as i64, u, 1_800_000_000_000 + u, None)).collect();
    assert_eq!(rows(source).await, want);
    let bucket = s.placement().bucket_of(post);
    let opts = MoveOptions { grace: Duration::from_millis(10), drain: false, ..MoveOptions::default() };
    // Old layout to new, then back.
    for to in [2, source] {
        s.move_buckets(&[bucket], to, &opts).await.expect("move");
        s.refresh_placement().await.expect("catalog");
        assert_eq!(s.shard_of_post(PostId(post)), to);
        assert_eq!(rows(to).await, want, "on shard {to}");
        let likers = s.likers(Target::post(post), None, 100).await.expect("likers");
        assert_eq!(likers.len(), 20);
    }
}
