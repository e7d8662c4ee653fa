//! Placement on real shards: an upgrade from the schema before placement, and a deployment
//! of more than 64 shards.

use super::*;
use crate::postgres::PgOptions;
use crate::postgres::test_ops::{comment, like};
use crate::postgres::testing::TestShards;
use likewise_core::comment::status::CommentStatus;
use likewise_core::like::Target;
use likewise_core::notify::{Change, NotifKey, NotifKind};
use likewise_core::ports::{CommentReader, LikeReader, NotificationStore};
use likewise_core::write::{CommentOp, CommentOutcome, WriteOp, WriteOutcome};

async fn create(s: &PgStore, post: u64, parent: Option<CommentId>, author: u64) -> CommentId {
    match s.apply_async(&[comment(post, parent, author)]).await.expect("create").pop() {
        Some(WriteOutcome::Comment(CommentOutcome::Done(Some(r)))) => r.id,
        other => panic!("create on {post} answered {other:?}"),
    }
}

async fn liked(s: &PgStore, target: Target, post: u64, user: u64) -> bool {
    match s.apply_async(&[like(target, post, user, true)]).await.expect("like").pop() {
        Some(WriteOutcome::Like(l)) => l.changed,
        other => panic!("like answered {other:?}"),
    }
}

fn add(recipient: u64, post: u64, actor: u64) -> Change {
    let key = NotifKey { recipient: UserId(recipient), post: PostId(post), kind: NotifKind::PostLiked };
    Change::Add { key, actor: UserId(actor), comment: None, ts_ms: 1_000 + actor }
}

/// A deployment of three shards made before placement (through migration 14, IDs naming
/// their shard), upgraded: every old comment, like and inbox item is found where it is, old
/// IDs keep working in writes, and new IDs carry buckets and sort above the old ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_from_modulo_placement_keeps_every_row_reachable() {
    let t = TestShards::create_at(3, 14).await;
    let old = t.connect();
    let e = old.check_schema().await.expect_err("an old schema");
    assert!(e.to_string().contains("likewise migrate"), "{e}");

    // Before: comments, replies, likes of both, and inbox items, written by the old rules.
    let posts: Vec<u64> = (1..=9).chain([4_096, 4_097, 1 << 40]).collect();
    let mut threads = Vec::new();
    for &post in &posts {
        let top = create(&old, post, None, 100 + post).await;
        let reply = create(&old, post, Some(top), 200).await;
        assert_eq!(top.0 % 64, post % 3, "an old-layout ID names its shard");
        // A post like with its post_id, as builds before migration 26 wrote it (this build
        // leaves it NULL, which that schema refuses).
        old.conn(old.shard_of_post(PostId(post)))
            .await
            .expect("conn")
            .execute(
                "INSERT INTO likes (kind, target, user_id, post_id, liked_at) VALUES (1, $1, 300, $1, 1)",
                &[&(post as i64)],
            )
            .await
            .expect("post like");
        assert!(liked(&old, Target::comment(top.0), post, 300).await);
        threads.push((post, top, reply));
    }
    // Inbox items as that schema stored them (one actor row per (item, actor)).
    let mut old_items: Vec<(u64, UserId)> = Vec::new();
    for r in 1..=6u64 {
        let shard = old.shard_of_user(UserId(r));
        let c = old.conn(shard).await.expect("conn");
        let row = c
            .query_one(
                "INSERT INTO notif_items (id, recipient, post_id, kind, comment_id, actor_count, recent, updated_ms)
                 VALUES (nextval('notif_item_seq') * 64 + $1, $2, 1, 1, NULL, 1, ARRAY[$3::bigint], 1000)
                 RETURNING id",
                &[&(shard as i64), &(r as i64), &(500 + r as i64)],
            )
            .await
            .expect("item");
        let id: i64 = row.get(0);
        c.execute(
            "INSERT INTO notif_actors (item, actor, added_ms) VALUES ($1, $2, 1000)",
            &[&id, &(500 + r as i64)],
        )
        .await
        .expect("actor");
        old_items.push((id as u64, UserId(r)));
    }

    // The upgrade.
    let migrated = t.connect().migrate().await.expect("migrate");
    // Every migration after 14, on every shard.
    let after_14: Vec<i32> =
        crate::postgres::migrate::MIGRATIONS.iter().map(|m| m.0).filter(|v| *v > 14).collect();
    assert_eq!(after_14.first(), Some(&15));
    assert!(migrated.iter().all(|(_, v)| v == &after_14), "{migrated:?}");
    let new = t.store().await;
    new.check_schema().await.expect("the upgraded schema");
    let p = new.placement();
    assert!(p.has_catalog());
    assert_eq!(p.buckets(), 4095, "a multiple of 3 shards");
    let newest_old = threads.iter().map(|(_, _, r)| r.0).max().expect("comments");
    assert_eq!(p.legacy().comment_max, newest_old);
    assert_eq!(p.legacy().item_max, old_items.iter().map(|i| i.0).max().expect("items"));
    // Migrating again changes nothing.
    t.connect().migrate().await.expect("migrate again");
    assert_eq!(*t.store().await.placement(), *p);

    for &(post, top, reply) in &threads {
        // Old rows, read and changed through their old IDs.
        let read = new.comments(&[top, reply]).await.expect("read");
        assert_eq!(
            read.iter().map(|r| r.as_ref().map(|r| r.post)).collect::<Vec<_>>(),
            [Some(PostId(post)); 2]
        );
        let replies = new.replies(top, None, 10).await.expect("replies");
        assert_eq!(replies.iter().map(|r| r.id).collect::<Vec<_>>(), vec![reply], "post {post}");
        assert!(!liked(&new, Target::post(post), post, 300).await, "the old post like is found");
        assert!(!liked(&new, Target::comment(top.0), post, 300).await, "the old like is found");
        assert!(liked(&new, Target::comment(top.0), post, 301).await);
        let hold = WriteOp::Comment(CommentOp::SetStatus {
            id: reply,
            status: CommentStatus::Pending,
            actor: UserId(7),
            queue: likewise_core::write::QueueChange::Keep,
        });
        match new.apply_async(&[hold]).await.expect("hold").pop() {
            Some(WriteOutcome::Comment(CommentOutcome::Done(Some(r)))) => {
                assert_eq!(r.status, CommentStatus::Pending)
            }
            other => panic!("holding an old reply answered {other:?}"),
        }
        // New rows beside them: IDs above every old one, carrying the post's bucket.
        let fresh = create(&new, post, Some(top), 201).await;
        assert!(fresh.0 > newest_old);
        assert_eq!(fresh.0 % 4096, post % 4095);
        assert_eq!(new.shard_of_comment(fresh), (post % 3) as usize);
        assert!(liked(&new, Target::comment(fresh.0), post, 300).await);
        let likers = new.likers(Target::comment(top.0), None, 10).await.expect("likers");
        let mut users: Vec<u64> = likers.iter().map(|l| l.user.0).collect();
        users.sort_unstable();
        assert_eq!(users, [300, 301], "post {post}");
    }
    // Old inbox items are found by their IDs; new ones carry the recipient's bucket.
    for (id, r) in &old_items {
        let members = new.notif_members(*id, &[UserId(500 + r.0)]).await.expect("members");
        assert_eq!(members, [true], "{id} of {r:?}");
    }
    let fence = new.fence_notifications("notifier").await.expect("fence");
    // An old actor row is withdrawn by the actor's unlike, as before.
    let key = NotifKey { recipient: UserId(1), post: PostId(1), kind: NotifKind::PostLiked };
    let gone = new
        .apply_notifications(
            "notifier",
            fence,
            1,
            &[Change::Remove { key, actor: UserId(501), comment: None }],
        )
        .await
        .expect("withdraw");
    assert_eq!(gone.iter().map(|i| i.actor_count).collect::<Vec<_>>(), [0]);
    let after: Vec<Change> = (1..=6).map(|r| add(r, 2, 600 + r)).collect();
    let items = new.apply_notifications("notifier", fence, 2, &after).await.expect("notify");
    for it in &items {
        assert!(it.id > p.legacy().item_max);
        assert_eq!(new.shard_of_item(it.id), new.shard_of_user(it.key.recipient));
        assert_eq!(
            new.notif_members(it.id, &[UserId(600 + it.key.recipient.0)]).await.expect("members"),
            [true]
        );
    }
}

/// 66 shards, more than a 6-bit shard field could name: every shard gets posts, and the
/// comments, comment likes and inbox items of posts on shards 64 and 65 are found there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_of_66_shards_places_and_finds_everything() {
    let t = TestShards::create(66).await;
    let s = PgStore::open(&PgOptions { shards: t.urls.clone(), pool_size: 2, ..PgOptions::default() })
        .await
        .expect("open");
    assert_eq!(s.placement().buckets(), 66 * (4096 / 66));
    for shard in [0usize, 1, 63, 64, 65] {
        assert!(s.placement().buckets_on(shard) >= 62, "shard {shard}");
        let post = 1_000 * 66 + shard as u64;
        assert_eq!(s.shard_of_post(PostId(post)), shard);
        let top = create(&s, post, None, 1).await;
        assert_eq!(s.shard_of_comment(top), shard);
        assert!(liked(&s, Target::comment(top.0), post, 2).await);
        let c = t.client(shard).await;
        let rows: i64 = c
            .query_one("SELECT count(*) FROM comments WHERE id = $1", &[&(top.0 as i64)])
            .await
            .expect("count")
            .get(0);
        assert_eq!(rows, 1, "comment {top:?} on shard {shard}");
        assert_eq!(s.comments(&[top]).await.expect("read")[0].as_ref().map(|r| r.post), Some(PostId(post)));
        let fence = s.fence_notifications("notifier").await.expect("fence");
        let items = s
            .apply_notifications("notifier", fence, shard as u64 + 1, &[add(post, post, 3)])
            .await
            .expect("notify");
        assert_eq!(s.shard_of_item(items[0].id), shard);
        assert_eq!(s.notif_members(items[0].id, &[UserId(3)]).await.expect("members"), [true]);
    }
}

/// A shard registered in the catalog (`likewise shards add`) is opened by every node that
/// reads the catalog, configured with the first shards only: the registering node at once,
/// a running one at its next refresh, a new one at its start. Registering it twice, or with a
/// configuration that does not list every registered shard, is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_shard_is_opened_by_every_node_without_a_restart() {
    let t = TestShards::create(2).await;
    let extra = TestShards::create(1).await;
    let (adder, running) = (t.store().await, t.store().await);
    let before = running.placement().version;
    assert_eq!(adder.register_shard(&extra.urls[0]).await.expect("register"), 2);
    assert_eq!(adder.shard_count(), 3);
    assert_eq!(running.shard_count(), 2, "not read yet");
    let p = running.refresh_placement().await.expect("refresh");
    assert_eq!((running.shard_count(), p.version), (3, before + 1));
    let started = t.store().await;
    assert_eq!(started.shard_count(), 3);
    for s in [&adder, &running, &started] {
        let db: String = s
            .conn(2)
            .await
            .expect("shard 2")
            .query_one("SELECT current_database()", &[])
            .await
            .expect("q")
            .get(0);
        assert!(extra.urls[0].ends_with(&format!("/{db}")), "{db} is not {}", extra.urls[0]);
    }
    let e = started.register_shard(&extra.urls[0]).await.expect_err("registered twice");
    assert!(e.to_string().contains("registers this URL already"), "{e}");
    // A node configured with one shard fewer than the catalog still opens them all.
    let first_only = PgStore::connect(&PgOptions {
        shards: vec![t.urls[0].clone()],
        pool_size: 2,
        ..PgOptions::default()
    })
    .expect("connect");
    let e = first_only.load_placement().await.expect_err("shard 1 is neither listed nor registered");
    assert!(e.to_string().contains("registered"), "{e}");
}
