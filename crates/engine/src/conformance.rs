//! The conformance suite every storage engine must pass.
//!
//! Each check is an async function over a freshly opened [`Stores`]. An engine's test module
//! instantiates them all with [`conformance_suite!`], passing an expression that opens a new,
//! empty store (and whatever guard keeps its resources alive).

mod threads;

pub use threads::*;

use crate::Stores;

mod hourly;
mod integrity;
mod keys;
mod notifications;
mod ranks;
pub use hourly::*;
pub use integrity::*;
pub use keys::*;
use likewise_core::comment::appeal::{HeldBy, QueueNote};
use likewise_core::comment::report::ReportOutcome;
use likewise_core::comment::status::CommentStatus;
use likewise_core::counter::{CounterField, CounterKey};
use likewise_core::event::EventKind;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::like::{LikeAction, LikeOp, Target, TargetKind};
use likewise_core::model::{CommentsPolicy, PostMeta, UserProfile, ViewerSettings};
use likewise_core::ports::{Liker, RankChange, RankEntry, ReportReason};
use likewise_core::write::{CommentOp, CommentOutcome, CommentRecord, QueueChange, WriteOp, WriteOutcome};
pub use notifications::*;
pub use ranks::*;

fn op(target: Target, user: u64, action: LikeAction, ts: u64) -> LikeOp {
    LikeOp {
        target,
        user: UserId(user),
        action,
        target_author: UserId(7),
        ts_ms: ts,
        post: target.id,
        trace: None,
    }
}

/// A retried like creates one row and one event.
pub async fn retried_like_changes_once(s: &Stores) {
    let t = Target::post(42);
    let a = s.writer.submit(op(t, 1, LikeAction::Like, 10)).await.expect("like");
    let b = s.writer.submit(op(t, 1, LikeAction::Like, 11)).await.expect("retry");
    assert!(a.outcome.changed && a.outcome.liked);
    assert!(!b.outcome.changed && b.outcome.liked);
    assert!(b.order > a.order);
    let ev = s.events.read_after(0, 10).await.expect("read");
    assert_eq!(ev.len(), 1);
    assert_eq!(s.events.head().await.expect("head"), ev[0].seq);
    assert_eq!(
        (ev[0].kind, ev[0].actor, ev[0].target_author),
        (EventKind::LikeCreated, UserId(1), UserId(7))
    );
    s.settle().await.expect("settle");
    assert_eq!(
        s.likes.liked_among(UserId(1), TargetKind::Post, &[42, 43]).await.expect("liked"),
        vec![true, false]
    );
}

/// Unliking what was never liked changes nothing and emits nothing.
pub async fn unlike_of_missing_row_is_a_no_op(s: &Stores) {
    let c = s.writer.submit(op(Target::post(1), 1, LikeAction::Unlike, 1)).await.expect("unlike");
    assert!(!c.outcome.changed && !c.outcome.liked && c.outcome.event_seq.is_none());
    assert_eq!(s.events.head().await.expect("head"), 0);
}

/// Several ops on one key in one batch resolve in arrival order.
pub async fn one_batch_resolves_each_key_in_arrival_order(s: &Stores) {
    let t = Target::post(5);
    let ops = [
        op(t, 1, LikeAction::Like, 1),
        op(t, 1, LikeAction::Unlike, 2),
        op(t, 1, LikeAction::Like, 3),
        op(t, 1, LikeAction::Like, 4),
        op(t, 2, LikeAction::Unlike, 5),
    ];
    let ops: Vec<WriteOp> = ops.into_iter().map(WriteOp::Like).collect();
    // The engine is driven from a plain thread, as the group committer drives it.
    let engine = s.write_engine.clone();
    let out = tokio::task::spawn_blocking(move || {
        let out = engine.apply(&ops).expect("apply");
        engine.sync().expect("sync");
        out
    })
    .await
    .expect("writer thread");
    let changed: Vec<bool> = out
        .iter()
        .map(|o| match o {
            WriteOutcome::Like(l) => l.changed,
            WriteOutcome::Comment(_) => panic!("a like answered with a comment outcome"),
        })
        .collect();
    assert_eq!(changed, vec![true, true, true, false, false]);
    let ev = s.events.read_after(0, 10).await.expect("events");
    let deltas: Vec<i64> = ev.iter().map(|e| e.delta()).collect();
    assert_eq!(deltas, vec![1, -1, 1]);
    // Positions are opaque but strictly increasing in commit order.
    assert!(ev.windows(2).all(|w| w[0].seq < w[1].seq), "{ev:?}");
    s.settle().await.expect("settle");
    assert_eq!(s.likes.liked_among(UserId(1), TargetKind::Post, &[5]).await.expect("liked"), vec![true]);
    let likers = s.likes.likers(t, None, 10).await.expect("likers");
    assert_eq!(likers, vec![Liker { user: UserId(1), liked_at_ms: 3 }]);
}

/// Likers list newest first and page without repeats.
pub async fn likers_page_newest_first(s: &Stores) {
    let t = Target::post(9);
    for u in 1..=5u64 {
        s.writer.submit(op(t, u, LikeAction::Like, 100 + u)).await.expect("like");
    }
    s.writer.submit(op(t, 3, LikeAction::Unlike, 200)).await.expect("unlike");
    let first = s.likes.likers(t, None, 2).await.expect("page 1");
    assert_eq!(first.iter().map(|l| l.user.0).collect::<Vec<_>>(), vec![5, 4]);
    let second = s.likes.likers(t, first.last().copied(), 10).await.expect("page 2");
    assert_eq!(second.iter().map(|l| l.user.0).collect::<Vec<_>>(), vec![2, 1]);
    assert!(s.likes.likers(Target::post(10), None, 10).await.expect("other").is_empty());
}

/// The newest likers of many targets at once are each target's own newest likers: posts
/// with none, one, a few and many likers (batched together, so the scale-out engine pages
/// them), unlikes among them, a comment, and a target asked for twice.
pub async fn recent_likers_of_many_targets_match_each_list(s: &Stores) {
    let posts: Vec<Target> = (200..208u64).map(Target::post).collect();
    let mut ops = Vec::new();
    for (n, t) in posts.iter().enumerate() {
        for u in 0..(n as u64 * n as u64) {
            // Likes spread over windows of 16 ms, several per window.
            ops.push(op(*t, 1_000 + u, LikeAction::Like, 1_000 + u * 5));
        }
    }
    ops.extend((0..9u64).map(|u| op(Target::comment(900), 50 + u, LikeAction::Like, 10 + u)));
    let mut set = tokio::task::JoinSet::new();
    for o in ops {
        let w = s.writer.clone();
        set.spawn(async move { w.submit(o).await });
    }
    while let Some(r) = set.join_next().await {
        r.expect("join").expect("like");
    }
    for u in [1_000u64, 1_003, 1_040] {
        s.writer.submit(op(posts[7], u, LikeAction::Unlike, 9_000)).await.expect("unlike");
    }
    s.settle().await.expect("settle");
    let mut targets = posts.clone();
    targets.extend([Target::comment(900), posts[7], Target::post(999)]);
    for limit in [1usize, 3, 32] {
        let many = s.likes.recent_likers_many(&targets, limit).await.expect("many");
        assert_eq!(many.len(), targets.len());
        for (t, got) in targets.iter().zip(&many) {
            let want = s.likes.likers(*t, None, limit).await.expect("one");
            assert_eq!(got, &want, "{t:?}, limit {limit}");
        }
    }
    assert_eq!(s.likes.recent_likers_many(&targets, 32).await.expect("many")[7].len(), 32);
    assert!(s.likes.recent_likers_many(&[], 32).await.expect("none").is_empty());
}

/// A user's liked IDs come from the reverse index, per kind.
pub async fn reverse_index_lists_a_users_likes(s: &Stores) {
    for p in [3u64, 1, 2] {
        s.writer.submit(op(Target::post(p), 8, LikeAction::Like, 1)).await.expect("like");
    }
    s.writer.submit(op(Target::comment(77), 8, LikeAction::Like, 1)).await.expect("comment like");
    s.settle().await.expect("settle");
    assert_eq!(s.likes.liked_ids(UserId(8), TargetKind::Post, 10).await.expect("ids"), vec![1, 2, 3]);
    assert_eq!(s.likes.liked_ids(UserId(8), TargetKind::Comment, 10).await.expect("ids"), vec![77]);
    assert_eq!(
        s.likes.liked_among(UserId(8), TargetKind::Comment, &[77, 3]).await.expect("c"),
        vec![true, false]
    );
}

/// Deltas and the consumer offset move together; recount sees rows, counter and pending events.
pub async fn counters_move_with_their_offset(s: &Stores) {
    let t = Target::post(42);
    for u in 1..=3u64 {
        s.writer.submit(op(t, u, LikeAction::Like, u)).await.expect("like");
    }
    let key = CounterKey { target: t, field: CounterField::Likes };
    let pos: Vec<u64> = s.events.read_after(0, 10).await.expect("read").iter().map(|e| e.seq).collect();
    s.counters.apply_deltas("agg", 0, pos[1], &[(key, 2)]).await.expect("apply");
    assert_eq!(s.counters.offset("agg").await.expect("offset"), pos[1]);
    assert_eq!(s.counters.offset("other").await.expect("offset"), 0);
    assert_eq!(s.counters.counts(&[t, Target::post(1)]).await.expect("counts")[0].likes, 2);
    let r = s.counters.recount_likes("agg", t).await.expect("recount");
    assert_eq!((r.rows, r.counter, r.pending, r.drift()), (3, 2, 1, 0));
    // Simulated drift: a counter that is off by 5 is reported as drift of -5.
    s.counters.apply_deltas("agg", pos[1], pos[2], &[(key, 6)]).await.expect("apply");
    let r = s.counters.recount_likes("agg", t).await.expect("recount");
    assert_eq!((r.rows, r.counter, r.pending, r.drift()), (3, 8, 0, -5));
    assert_eq!(s.counters.counted_posts(None, 10).await.expect("posts"), vec![PostId(42)]);
    assert!(s.counters.counted_posts(Some(PostId(42)), 10).await.expect("after").is_empty());
}

/// `apply_deltas` is a compare-and-set on the offset: a window whose start is not the stored
/// offset (applied already by an attempt whose answer was lost, or by another process) writes
/// nothing, neither counters nor offset.
pub async fn a_window_whose_start_moved_is_refused(s: &Stores) {
    let t = Target::post(42);
    for u in 1..=2u64 {
        s.writer.submit(op(t, u, LikeAction::Like, u)).await.expect("like");
    }
    let key = CounterKey { target: t, field: CounterField::Likes };
    let pos: Vec<u64> = s.events.read_after(0, 10).await.expect("read").iter().map(|e| e.seq).collect();
    s.counters.apply_deltas("cas", 0, pos[0], &[(key, 1)]).await.expect("first window");
    // The same window again (its first commit's answer lost) and a stale start: refused.
    assert!(s.counters.apply_deltas("cas", 0, pos[0], &[(key, 1)]).await.is_err());
    assert!(s.counters.apply_deltas("cas", 0, pos[1], &[(key, 2)]).await.is_err());
    assert_eq!(s.counters.offset("cas").await.expect("offset"), pos[0]);
    assert_eq!(s.counters.counts(&[t]).await.expect("counts")[0].likes, 1);
    s.counters.apply_deltas("cas", pos[0], pos[1], &[(key, 1)]).await.expect("next window");
    assert_eq!(s.counters.counts(&[t]).await.expect("counts")[0].likes, 2);
}

/// A post's fresh like count is its counter plus the like events a consumer has not applied:
/// with nothing applied, every like and unlike written so far, and no other target's.
pub async fn fresh_post_likes_include_unapplied_events(s: &Stores) {
    for u in 1..=3u64 {
        s.writer.submit(op(Target::post(42), u, LikeAction::Like, u)).await.expect("like");
    }
    s.writer.submit(op(Target::post(42), 2, LikeAction::Unlike, 4)).await.expect("unlike");
    s.writer.submit(op(Target::post(43), 1, LikeAction::Like, 5)).await.expect("like");
    s.writer.submit(op(Target::comment(42), 9, LikeAction::Like, 6)).await.expect("comment like");
    let posts = [PostId(42), PostId(43), PostId(44)];
    assert_eq!(s.counters.fresh_post_likes("fresh", &posts).await.expect("fresh"), vec![2, 1, 0]);
    assert!(s.counters.fresh_post_likes("fresh", &[]).await.expect("none").is_empty());
}

/// The log reads in order after an offset and truncates a prefix.
pub async fn event_log_reads_and_truncates(s: &Stores) {
    for u in 1..=5u64 {
        s.writer.submit(op(Target::post(1), u, LikeAction::Like, u)).await.expect("like");
    }
    let all: Vec<u64> = s.events.read_after(0, 10).await.expect("read").iter().map(|e| e.seq).collect();
    assert_eq!(all.len(), 5);
    assert!(all.windows(2).all(|w| w[0] < w[1]), "{all:?}");
    let ev = s.events.read_after(all[1], 2).await.expect("read");
    assert_eq!(ev.iter().map(|e| e.seq).collect::<Vec<_>>(), all[2..4].to_vec());
    assert_eq!(s.events.truncate(all[2]).await.expect("truncate"), 3);
    let rest = s.events.read_after(0, 10).await.expect("read");
    assert_eq!(rest.iter().map(|e| e.seq).collect::<Vec<_>>(), all[3..].to_vec());
    assert_eq!(s.events.head().await.expect("head"), all[4]);
}

fn new_comment(parent: Option<CommentId>, author: u64, status: CommentStatus) -> CommentOp {
    CommentOp::Create(
        CommentRecord {
            id: CommentId(0),
            post: PostId(9),
            author: UserId(author),
            post_author: UserId(7),
            parent,
            reply_to_user: None,
            status,
            text: format!("from {author}"),
            simhash: author,
        },
        None,
    )
}

async fn comment(s: &Stores, op: CommentOp) -> CommentOutcome {
    s.writer.submit_comment(op).await.expect("comment op").outcome
}

async fn created(s: &Stores, op: CommentOp) -> CommentId {
    match comment(s, op).await {
        CommentOutcome::Done(Some(r)) => r.id,
        other => panic!("create answered {other:?}"),
    }
}

/// Apply `ops` as one batch of the engine, as the group committer does.
pub(crate) async fn one_batch(s: &Stores, ops: Vec<WriteOp>) -> Vec<WriteOutcome> {
    let engine = s.write_engine.clone();
    tokio::task::spawn_blocking(move || {
        let out = engine.apply(&ops).expect("apply");
        engine.sync().expect("sync");
        out
    })
    .await
    .expect("writer thread")
}

/// Every real comment change makes one event whose delta is its change of visibility; a
/// deleted parent with replies stays as a placeholder, a deleted reply goes.
pub async fn comment_changes_count_once_and_leave_placeholders(s: &Stores) {
    let visible = CommentStatus::Visible;
    let top = created(s, new_comment(None, 1, visible)).await;
    let reply = created(s, new_comment(Some(top), 2, visible)).await;
    let held = created(s, new_comment(Some(top), 3, CommentStatus::Pending)).await;
    let approve =
        CommentOp::SetStatus { id: held, status: visible, actor: UserId(7), queue: QueueChange::Keep };
    assert!(
        matches!(comment(s, approve.clone()).await, CommentOutcome::Done(Some(r)) if r.status == visible)
    );
    assert!(matches!(comment(s, approve).await, CommentOutcome::Done(Some(r)) if r.status == visible));
    let placeholder = match comment(s, CommentOp::Delete { id: top, actor: UserId(1) }).await {
        CommentOutcome::Done(Some(r)) => r,
        other => panic!("deleting a parent answered {other:?}"),
    };
    assert_eq!((placeholder.status, placeholder.text.as_str()), (CommentStatus::Deleted, ""));
    let again = comment(s, CommentOp::Delete { id: top, actor: UserId(1) }).await;
    assert_eq!(again, CommentOutcome::Done(Some(placeholder.clone())));
    assert_eq!(
        comment(s, CommentOp::Delete { id: reply, actor: UserId(2) }).await,
        CommentOutcome::Done(None)
    );
    let gone =
        CommentOp::SetStatus { id: reply, status: visible, actor: UserId(7), queue: QueueChange::Keep };
    assert_eq!(comment(s, gone).await, CommentOutcome::NotFound);
    let ev = s.events.read_after(0, 20).await.expect("events");
    let seen: Vec<(EventKind, u64, i64, u64)> =
        ev.iter().map(|e| (e.kind, e.target.id, e.delta(), e.parent)).collect();
    let (t, r, h) = (top.0, reply.0, held.0);
    use EventKind::*;
    #[rustfmt::skip]
    assert_eq!(seen, vec![
        (CommentCreated, t, 1, 0), (CommentCreated, r, 1, t), (CommentCreated, h, 0, t),
        (CommentStatusChanged, h, 1, t), (CommentDeleted, t, -1, 0), (CommentDeleted, r, -1, t),
    ]);
    assert!(
        ev.iter().all(|e| e.actor != UserId(7) && e.target_author == UserId(7)),
        "actor: the comment's author"
    );
    assert_eq!(s.comments.comments(&[top, reply]).await.expect("read"), vec![Some(placeholder), None]);
    let replies = s.comments.replies(top, None, 10).await.expect("replies");
    assert_eq!(replies.iter().map(|r| r.id).collect::<Vec<_>>(), vec![held]);
}

/// Within one batch, a delete sees the replies the batch created and removed before it.
pub async fn a_batch_sees_its_own_replies_when_deleting_a_parent(s: &Stores) {
    let visible = CommentStatus::Visible;
    let emptied = created(s, new_comment(None, 1, visible)).await;
    let only_reply = created(s, new_comment(Some(emptied), 2, visible)).await;
    let filled = created(s, new_comment(None, 3, visible)).await;
    let out = one_batch(
        s,
        vec![
            WriteOp::Comment(CommentOp::Delete { id: only_reply, actor: UserId(2) }),
            WriteOp::Comment(CommentOp::Delete { id: emptied, actor: UserId(1) }),
            WriteOp::Comment(new_comment(Some(filled), 4, visible)),
            WriteOp::Comment(CommentOp::Delete { id: filled, actor: UserId(3) }),
        ],
    )
    .await;
    let left: Vec<Option<CommentStatus>> = out
        .iter()
        .map(|o| match o {
            WriteOutcome::Comment(CommentOutcome::Done(r)) => r.as_ref().map(|r| r.status),
            other => panic!("a comment op answered {other:?}"),
        })
        .collect();
    assert_eq!(left, vec![None, None, Some(visible), Some(CommentStatus::Deleted)]);
    let stored = s.comments.comments(&[emptied, filled]).await.expect("read");
    assert_eq!(
        stored.iter().map(|r| r.as_ref().map(|r| r.status)).collect::<Vec<_>>(),
        vec![None, Some(CommentStatus::Deleted)]
    );
}

/// A reply and its parent's delete in one batch, in either order: the reply is refused when
/// the delete came first, and the parent stays a placeholder when the reply did. Never a
/// reply under a removed parent.
pub async fn a_reply_and_its_parents_delete_never_leave_an_orphan(s: &Stores) {
    let visible = CommentStatus::Visible;
    let first = created(s, new_comment(None, 1, visible)).await;
    let second = created(s, new_comment(None, 3, visible)).await;
    let out = one_batch(
        s,
        vec![
            WriteOp::Comment(CommentOp::Delete { id: first, actor: UserId(1) }),
            WriteOp::Comment(new_comment(Some(first), 2, visible)),
            WriteOp::Comment(new_comment(Some(second), 4, visible)),
            WriteOp::Comment(CommentOp::Delete { id: second, actor: UserId(3) }),
        ],
    )
    .await;
    let outcome = |k: usize| match &out[k] {
        WriteOutcome::Comment(c) => c.clone(),
        other => panic!("a comment op answered {other:?}"),
    };
    assert_eq!(outcome(1), CommentOutcome::NotFound, "a reply under a parent deleted before it");
    assert!(matches!(outcome(2), CommentOutcome::Done(Some(_))));
    assert!(matches!(outcome(3), CommentOutcome::Done(Some(r)) if r.status == CommentStatus::Deleted));
    let stored = s.comments.comments(&[first, second]).await.expect("read");
    assert_eq!(stored[0], None);
    assert_eq!(stored[1].as_ref().map(|r| r.status), Some(CommentStatus::Deleted));
    assert!(s.comments.replies(first, None, 10).await.expect("replies").is_empty(), "orphan");
    assert_eq!(s.comments.replies(second, None, 10).await.expect("replies").len(), 1);
}

/// A placeholder goes with its last reply, whatever that reply's status, and stays while
/// any reply is left.
pub async fn a_placeholder_goes_with_its_last_reply(s: &Stores) {
    let visible = CommentStatus::Visible;
    let top = created(s, new_comment(None, 1, visible)).await;
    let shown = created(s, new_comment(Some(top), 2, visible)).await;
    let held = created(s, new_comment(Some(top), 3, CommentStatus::Pending)).await;
    comment(s, CommentOp::Delete { id: top, actor: UserId(1) }).await;
    comment(s, CommentOp::Delete { id: shown, actor: UserId(2) }).await;
    let left = s.comments.comments(&[top]).await.expect("read").pop().flatten();
    assert_eq!(left.map(|r| r.status), Some(CommentStatus::Deleted), "a reply is left");
    assert_eq!(
        comment(s, CommentOp::Delete { id: held, actor: UserId(3) }).await,
        CommentOutcome::Done(None)
    );
    assert_eq!(s.comments.comments(&[top]).await.expect("read"), vec![None]);
    assert!(s.comments.top_level(PostId(9), true, None, 10).await.expect("page").is_empty());
    let ev = s.events.read_after(0, 20).await.expect("events");
    let last = ev.last().expect("events");
    assert_eq!((last.kind, last.target.id, last.delta()), (EventKind::CommentDeleted, top.0, 0));
}

/// Upstream data round-trips.
pub async fn upstream_data_round_trips(s: &Stores) {
    let meta = PostMeta { author: UserId(7), hide_like_count: true, comments: CommentsPolicy::Off };
    s.meta.put_post(PostId(1), meta).await.expect("post");
    assert_eq!(s.meta.posts(&[PostId(2), PostId(1)]).await.expect("posts"), vec![None, Some(meta)]);
    let alice = UserProfile { username: "alice".into(), verified: true };
    s.meta.put_user(UserId(1), alice.clone()).await.expect("user");
    assert_eq!(s.meta.users(&[UserId(1), UserId(2)]).await.expect("users"), vec![Some(alice), None]);
    s.meta.set_follow(UserId(1), UserId(3), true).await.expect("follow");
    s.meta.set_follow(UserId(1), UserId(2), true).await.expect("follow");
    s.meta.set_follow(UserId(1), UserId(3), false).await.expect("unfollow");
    assert_eq!(s.meta.followees(UserId(1), 10).await.expect("followees"), vec![UserId(2)]);
    assert!(!s.meta.settings(UserId(1)).await.expect("settings").hide_like_counts);
    s.meta
        .put_settings(UserId(1), ViewerSettings { hide_like_counts: true, ..Default::default() })
        .await
        .expect("put");
    assert!(s.meta.settings(UserId(1)).await.expect("settings").hide_like_counts);
    s.meta.ping().await.expect("ping");
}

/// Blocks and restricts are directed, independent of each other, and can be lifted.
pub async fn blocks_and_restricts_round_trip(s: &Stores) {
    let m = &s.moderation;
    let (a, b, c) = (UserId(1), UserId(2), UserId(3));
    assert!(!m.is_blocked(a, b).await.expect("blocked"));
    m.set_block(a, b, true).await.expect("block");
    assert!(m.is_blocked(a, b).await.expect("blocked"));
    assert!(!m.is_blocked(b, a).await.expect("reverse"), "a block is one-way");
    assert!(!m.is_blocked(a, c).await.expect("other"));
    assert!(!m.is_restricted(a, b).await.expect("restricted"), "a block is not a restrict");
    m.set_restrict(a, c, true).await.expect("restrict");
    assert!(m.is_restricted(a, c).await.expect("restricted"));
    assert!(!m.is_blocked(a, c).await.expect("blocked"), "a restrict is not a block");
    m.set_block(a, b, false).await.expect("unblock");
    m.set_block(a, b, false).await.expect("unblock twice");
    assert!(!m.is_blocked(a, b).await.expect("blocked"));
    m.set_restrict(a, c, false).await.expect("unrestrict");
    assert!(!m.is_restricted(a, c).await.expect("restricted"));
    s.moderation.set_block(UserId(500), UserId(9), true).await.expect("block");
    s.moderation.set_block(UserId(500), UserId(3), true).await.expect("block");
    s.moderation.set_block(UserId(501), UserId(4), true).await.expect("block");
    assert_eq!(s.moderation.blocked_users(UserId(500), 10).await.expect("list"), vec![UserId(3), UserId(9)]);
    assert_eq!(s.moderation.blocked_users(UserId(500), 1).await.expect("list"), vec![UserId(3)]);
}

/// Hidden words are replaced as a whole, per owner, and empty when never set.
pub async fn hidden_words_round_trip(s: &Stores) {
    let m = &s.moderation;
    assert!(m.hidden_words(UserId(1)).await.expect("unset").is_empty());
    let words: Vec<String> = ["spoiler", "ünïcode", "two words"].map(String::from).to_vec();
    m.put_hidden_words(UserId(1), &words).await.expect("put");
    assert_eq!(m.hidden_words(UserId(1)).await.expect("get"), words);
    assert!(m.hidden_words(UserId(2)).await.expect("other owner").is_empty());
    m.put_hidden_words(UserId(1), &["only".to_owned()]).await.expect("replace");
    assert_eq!(m.hidden_words(UserId(1)).await.expect("get"), vec!["only".to_owned()]);
    m.put_hidden_words(UserId(1), &[]).await.expect("clear");
    assert!(m.hidden_words(UserId(1)).await.expect("cleared").is_empty());
}

/// Pins come back in pin order (not ID order), per post, and can be replaced or cleared.
pub async fn pins_keep_their_order(s: &Stores) {
    let m = &s.moderation;
    assert!(m.pins(PostId(1)).await.expect("unset").is_empty());
    let pins = [CommentId(30), CommentId(10), CommentId(20)];
    m.set_pins(PostId(1), &pins).await.expect("pin");
    assert_eq!(m.pins(PostId(1)).await.expect("pins"), pins.to_vec());
    assert!(m.pins(PostId(2)).await.expect("other post").is_empty());
    m.set_pins(PostId(3), &[CommentId(5)]).await.expect("pin another post");
    // One batched read, in the order asked (repeats and posts without pins included).
    let many = m.pins_of(&[PostId(3), PostId(2), PostId(1), PostId(3)]).await.expect("pins_of");
    assert_eq!(many, vec![vec![CommentId(5)], vec![], pins.to_vec(), vec![CommentId(5)]]);
    assert!(m.pins_of(&[]).await.expect("none").is_empty());
    m.set_pins(PostId(1), &[CommentId(10)]).await.expect("replace");
    assert_eq!(m.pins(PostId(1)).await.expect("pins"), vec![CommentId(10)]);
    m.set_pins(PostId(1), &[]).await.expect("clear");
    assert!(m.pins(PostId(1)).await.expect("cleared").is_empty());
}

/// Concurrent pins and unpins of one post each take effect, and the cap holds: of six
/// comments pinned at once, exactly three are acknowledged and those three are the pins;
/// unpinning them all at once leaves none.
pub async fn concurrent_pin_changes_all_take_effect_under_the_cap(s: &Stores) {
    use likewise_core::comment::pins::PinChange;
    let race = |pin: bool, ids: Vec<u64>| {
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(ids.len()));
        let tasks: Vec<_> = ids
            .into_iter()
            .map(|id| {
                let (m, barrier) = (s.moderation.clone(), barrier.clone());
                let rt = tokio::runtime::Handle::current();
                tokio::task::spawn_blocking(move || {
                    barrier.wait();
                    (id, rt.block_on(m.change_pin(PostId(3), CommentId(id), pin)).expect("pin"))
                })
            })
            .collect();
        async move {
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await.expect("join"));
            }
            out
        }
    };
    for round in 0..5u64 {
        let ids: Vec<u64> = (1..=6).map(|k| round * 10 + k).collect();
        let pinned = race(true, ids).await;
        let acked: Vec<CommentId> = pinned
            .iter()
            .filter(|(_, c)| matches!(c, PinChange::Changed(_)))
            .map(|(id, _)| CommentId(*id))
            .collect();
        assert_eq!(acked.len(), 3, "round {round}: {pinned:?}");
        assert!(pinned.iter().all(|(_, c)| !matches!(c, PinChange::Unchanged)), "{pinned:?}");
        let mut stored = s.moderation.pins(PostId(3)).await.expect("pins");
        stored.sort();
        assert_eq!(stored, acked, "round {round}: every acknowledged pin, and only those");
        let unpinned = race(false, acked.iter().map(|c| c.0).collect()).await;
        assert!(unpinned.iter().all(|(_, c)| matches!(c, PinChange::Changed(_))), "{unpinned:?}");
        assert!(s.moderation.pins(PostId(3)).await.expect("pins").is_empty(), "round {round}");
    }
}

/// A reporter counts once per comment, even when reports of one comment race.
pub async fn reports_count_each_reporter_once(s: &Stores) {
    let m = &s.moderation;
    let (c, other) = (CommentId(5), CommentId(6));
    let n = |o: ReportOutcome| (o.counted, o.count);
    assert_eq!(n(m.add_report(c, UserId(1), ReportReason::Spam).await.expect("report")), (true, 1));
    assert_eq!(n(m.add_report(c, UserId(1), ReportReason::Bullying).await.expect("again")), (false, 1));
    assert_eq!(n(m.add_report(c, UserId(2), ReportReason::Other).await.expect("second")), (true, 2));
    assert_eq!(n(m.add_report(other, UserId(1), ReportReason::Spam).await.expect("other")), (true, 1));
    assert_eq!(m.report_counts(&[c, CommentId(99), other]).await.expect("counts"), vec![2, 0, 1]);
    // 20 reporters, each reporting twice, all at once: exactly 20 distinct reports. Blocking
    // threads rather than tasks, so the calls truly overlap even on a current-thread runtime.
    let racing = CommentId(7);
    let tasks: Vec<_> = (0..40u64)
        .map(|i| {
            let m = s.moderation.clone();
            let rt = tokio::runtime::Handle::current();
            tokio::task::spawn_blocking(move || {
                rt.block_on(m.add_report(racing, UserId(100 + i % 20), ReportReason::Spam))
            })
        })
        .collect();
    let mut seen = Vec::new();
    for t in tasks {
        seen.push(t.await.expect("join").expect("report").count);
    }
    assert!(seen.iter().all(|&n| (1..=20).contains(&n)), "{seen:?}");
    assert_eq!(seen.iter().max(), Some(&20));
    assert_eq!(m.report_counts(&[racing]).await.expect("counts"), vec![20]);
}

/// An approval (a hold cleared) weighs the reports so far: later reports count toward a fresh
/// threshold, only those of reporters new to the comment; a hold set again keeps them weighed.
pub async fn an_approval_weighs_the_reports_so_far(s: &Stores) {
    let m = &s.moderation;
    let c = CommentId(8);
    for u in 1..=5 {
        let o = m.add_report(c, UserId(u), ReportReason::Spam).await.expect("report");
        assert_eq!((o.count, o.unreviewed), (u as u32, u as u32));
    }
    m.set_held_by(c, Some(HeldBy::Reports)).await.expect("held");
    m.set_held_by(c, None).await.expect("approved");
    let again = m.add_report(c, UserId(3), ReportReason::Other).await.expect("repeat");
    assert_eq!(again, ReportOutcome { counted: false, count: 5, unreviewed: 0 });
    let new = m.add_report(c, UserId(6), ReportReason::Spam).await.expect("new");
    assert_eq!(new, ReportOutcome { counted: true, count: 6, unreviewed: 1 });
    m.set_held_by(c, Some(HeldBy::Moderator)).await.expect("hidden");
    let more = m.add_report(c, UserId(7), ReportReason::Spam).await.expect("more");
    assert_eq!(more, ReportOutcome { counted: true, count: 7, unreviewed: 2 }, "a hold keeps the weighing");
    assert_eq!(m.report_counts(&[c]).await.expect("counts"), vec![7], "the queue's count is every reporter");
    // Approving a comment never reported writes no count.
    m.set_held_by(CommentId(9), None).await.expect("approve unreported");
    assert_eq!(m.report_counts(&[CommentId(9)]).await.expect("none"), vec![0]);
    let first = m.add_report(CommentId(9), UserId(1), ReportReason::Spam).await.expect("first");
    assert_eq!((first.count, first.unreviewed), (1, 1));
}

/// The review queue lists comment IDs ascending and pages strictly after the cursor.
pub async fn review_queue_pages_in_id_order(s: &Stores) {
    let m = &s.moderation;
    assert!(m.queue(None, 10).await.expect("empty").is_empty());
    for id in [40u64, 10, 30, 20, u64::MAX] {
        m.set_queued(CommentId(id), true).await.expect("queue");
    }
    m.set_queued(CommentId(30), false).await.expect("dequeue");
    m.set_queued(CommentId(50), false).await.expect("dequeue absent");
    let first = m.queue(None, 2).await.expect("page 1");
    assert_eq!(first, vec![CommentId(10), CommentId(20)]);
    let second = m.queue(first.last().copied(), 10).await.expect("page 2");
    assert_eq!(second, vec![CommentId(40), CommentId(u64::MAX)]);
    assert_eq!(m.queue(Some(CommentId(15)), 1).await.expect("between"), vec![CommentId(20)]);
    assert!(m.queue(Some(CommentId(u64::MAX)), 10).await.expect("past the end").is_empty());
}

/// Holds are replaced and cleared; an appeal is recorded once, also when several race.
pub async fn holds_and_appeals_are_recorded_once(s: &Stores) {
    let m = &s.moderation;
    let (c, other) = (CommentId(5), CommentId(u64::MAX));
    assert_eq!(m.queue_notes(&[c]).await.expect("notes"), vec![QueueNote::default()]);
    m.set_held_by(c, Some(HeldBy::Classifier)).await.expect("hold");
    m.set_held_by(c, Some(HeldBy::Moderator)).await.expect("replace");
    m.set_held_by(other, Some(HeldBy::Reports)).await.expect("hold other");
    assert!(m.add_appeal(c, "it was a quote").await.expect("appeal"));
    assert!(!m.add_appeal(c, "again").await.expect("second appeal"), "a second appeal is refused");
    let notes = m.queue_notes(&[other, CommentId(9), c]).await.expect("notes");
    assert_eq!(
        notes,
        vec![
            QueueNote { held_by: Some(HeldBy::Reports), appeal: None },
            QueueNote::default(),
            QueueNote { held_by: Some(HeldBy::Moderator), appeal: Some("it was a quote".into()) },
        ]
    );
    m.set_held_by(c, None).await.expect("clear");
    m.set_held_by(CommentId(9), None).await.expect("clear absent");
    let notes = m.queue_notes(&[c]).await.expect("notes");
    assert_eq!(notes, vec![QueueNote { held_by: None, appeal: Some("it was a quote".into()) }]);
    // Eight appeals of one comment released together: exactly one is recorded.
    let racing = CommentId(7);
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let (m, barrier) = (s.moderation.clone(), barrier.clone());
            let rt = tokio::runtime::Handle::current();
            tokio::task::spawn_blocking(move || {
                barrier.wait();
                rt.block_on(m.add_appeal(racing, &format!("appeal {i}")))
            })
        })
        .collect();
    let mut won = 0;
    for t in tasks {
        won += usize::from(t.await.expect("join").expect("appeal"));
    }
    assert_eq!(won, 1);
}

/// Fingerprints list newest first, per user, at most `limit`, none older than the bound.
pub async fn fingerprints_are_newest_first_and_time_bounded(s: &Stores) {
    let m = &s.moderation;
    for (c, h) in [(100u64, 0xa), (300, 0xc), (200, 0xb), (400, 0xd)] {
        m.add_fingerprint(UserId(1), CommentId(c), h).await.expect("add");
    }
    m.add_fingerprint(UserId(2), CommentId(500), 0xe).await.expect("other user");
    m.add_fingerprint(UserId(0), CommentId(350), 0xf).await.expect("lower user");
    let all = m.fingerprints(UserId(1), CommentId(0), 10).await.expect("all");
    assert_eq!(
        all,
        vec![(CommentId(400), 0xd), (CommentId(300), 0xc), (CommentId(200), 0xb), (CommentId(100), 0xa)]
    );
    let newest = m.fingerprints(UserId(1), CommentId(0), 2).await.expect("limited");
    assert_eq!(newest, vec![(CommentId(400), 0xd), (CommentId(300), 0xc)]);
    // The bound is inclusive: a comment exactly at `since_comment` is not older than it.
    let recent = m.fingerprints(UserId(1), CommentId(200), 10).await.expect("bounded");
    assert_eq!(recent, vec![(CommentId(400), 0xd), (CommentId(300), 0xc), (CommentId(200), 0xb)]);
    assert!(m.fingerprints(UserId(1), CommentId(401), 10).await.expect("none").is_empty());
    assert!(m.fingerprints(UserId(3), CommentId(0), 10).await.expect("no user").is_empty());
}

/// A comment's moderation state is written with it: when the create's commit returns, its
/// author's fingerprint is stored and, for a held comment, its review-queue entry and why it
/// is held, with no other call; a visible comment gets a fingerprint and no queue entry, a
/// reply refused (its parent missing) neither, and a keyed held create likewise, once.
pub async fn a_created_comment_carries_its_moderation_state(s: &Stores) {
    let m = &s.moderation;
    let filtered = CommentStatus::HiddenByFilter;
    let held_op = |author: u64| match new_comment(None, author, filtered) {
        CommentOp::Create(r, _) => CommentOp::Create(r, Some(HeldBy::HiddenWords)),
        other => other,
    };
    let held = created(s, held_op(21)).await;
    let open = created(s, new_comment(None, 22, CommentStatus::Visible)).await;
    let refused = comment(s, new_comment(Some(CommentId(12_345)), 23, CommentStatus::Visible)).await;
    assert_eq!(refused, CommentOutcome::NotFound);
    let keyed = likewise_core::comment::idempotency::Keyed {
        caller: UserId(24),
        key: likewise_core::comment::idempotency::IdempotencyKey::parse(b"held-1").expect("key"),
        fingerprint: [7; 16],
    };
    let CommentOp::Create(rec, _) = new_comment(None, 24, CommentStatus::Restricted) else { unreachable!() };
    let mut keyed_ids = Vec::new();
    for _ in 0..2 {
        let out = s
            .writer
            .submit_keyed_comment(rec.clone(), Some(HeldBy::Restricted), keyed.clone())
            .await
            .expect("keyed create")
            .outcome;
        keyed_ids.push(match out {
            CommentOutcome::Done(Some(r)) => r.id,
            CommentOutcome::Replayed(k) => k.comment.id,
            other => panic!("keyed create answered {other:?}"),
        });
    }
    assert_eq!(keyed_ids[0], keyed_ids[1], "the repeat replays the first create");
    let restricted = keyed_ids[0];
    let mut want = vec![held, restricted];
    want.sort_unstable();
    assert_eq!(m.queue(None, 10).await.expect("queue"), want, "held comments only, each once");
    let notes = m.queue_notes(&[held, restricted, open]).await.expect("notes");
    let held_by: Vec<Option<HeldBy>> = notes.into_iter().map(|n| n.held_by).collect();
    assert_eq!(held_by, vec![Some(HeldBy::HiddenWords), Some(HeldBy::Restricted), None]);
    for (author, id) in [(21, held), (22, open), (24, restricted)] {
        let prints = m.fingerprints(UserId(author), CommentId(0), 10).await.expect("fingerprints");
        assert_eq!(prints, vec![(id, author)], "user {author}'s fingerprint");
    }
    assert!(m.fingerprints(UserId(23), CommentId(0), 10).await.expect("none").is_empty(), "refused reply");
}

/// An author's held replies are listed by author and post while they are held: not their
/// visible replies, nor their held top-level comments, nor anyone else's; an approval, a
/// delete or a hold moves a reply out of or into the list at once.
pub async fn held_replies_are_listed_by_author_while_held(s: &Stores) {
    use CommentStatus::*;
    let c = &s.comments;
    let top = created(s, new_comment(None, 1, Visible)).await;
    let pending = created(s, new_comment(Some(top), 5, Pending)).await;
    let filtered = created(s, new_comment(Some(top), 5, HiddenByFilter)).await;
    let open = created(s, new_comment(Some(top), 5, Visible)).await;
    let restricted = created(s, new_comment(Some(top), 6, Restricted)).await;
    created(s, new_comment(None, 5, HiddenByFilter)).await;
    let held = |author: u64| async move {
        let mut v: Vec<CommentId> = c
            .held_replies_by(UserId(author), &[PostId(9)], 10)
            .await
            .expect("held")
            .iter()
            .map(|r| r.id)
            .collect();
        v.sort_unstable();
        v
    };
    assert_eq!(held(5).await, [pending, filtered]);
    assert_eq!(held(6).await, [restricted]);
    assert!(held(7).await.is_empty());
    assert!(c.held_replies_by(UserId(5), &[PostId(2)], 10).await.expect("other post").is_empty());
    assert_eq!(c.held_replies_by(UserId(5), &[PostId(9)], 1).await.expect("limit").len(), 1);
    let set = |id, status| CommentOp::SetStatus { id, status, actor: UserId(7), queue: QueueChange::Keep };
    comment(s, set(pending, Visible)).await;
    assert_eq!(held(5).await, [filtered], "approved: no longer held");
    comment(s, CommentOp::Delete { id: filtered, actor: UserId(5) }).await;
    assert!(held(5).await.is_empty(), "deleted");
    comment(s, set(open, Pending)).await;
    assert_eq!(held(5).await, [open], "held after it was written");
    let r = &c.held_replies_by(UserId(5), &[PostId(9)], 10).await.expect("held")[0];
    assert_eq!((r.parent, r.status, r.author), (Some(top), Pending, UserId(5)));
}

/// The visible replies under each parent asked about are counted, in the order asked, with
/// no other status counted: a hold, an approval or a delete of a reply moves its parent's
/// count at once. A parent without replies, or missing, counts 0.
pub async fn visible_replies_are_counted_by_parent(s: &Stores) {
    use CommentStatus::*;
    let c = &s.comments;
    let held = created(s, new_comment(None, 1, Pending)).await;
    let open = created(s, new_comment(None, 2, Visible)).await;
    let bare = created(s, new_comment(None, 3, Visible)).await;
    let first = created(s, new_comment(Some(held), 1, Visible)).await;
    created(s, new_comment(Some(held), 4, Visible)).await;
    created(s, new_comment(Some(held), 1, HiddenByFilter)).await;
    created(s, new_comment(Some(open), 4, Visible)).await;
    let counts =
        |parents: Vec<CommentId>| async move { c.visible_reply_counts(&parents).await.expect("counts") };
    assert_eq!(counts(vec![held, open, bare, CommentId(u64::MAX)]).await, [2, 1, 0, 0]);
    assert_eq!(counts(vec![open, held]).await, [1, 2], "in the order asked");
    assert!(counts(Vec::new()).await.is_empty());
    let set = |id, status| CommentOp::SetStatus { id, status, actor: UserId(7), queue: QueueChange::Keep };
    comment(s, set(first, Pending)).await;
    assert_eq!(counts(vec![held]).await, [1], "held: no longer counted");
    comment(s, set(first, Visible)).await;
    assert_eq!(counts(vec![held]).await, [2], "approved");
    comment(s, CommentOp::Delete { id: first, actor: UserId(1) }).await;
    assert_eq!(counts(vec![held]).await, [1], "deleted");
}

/// View sketches round-trip.
pub async fn view_sketches_round_trip(s: &Stores) {
    assert_eq!(s.views.load_views(PostId(1)).await.expect("load"), None);
    s.views.save_views(&[(PostId(1), vec![1, 2, 3]), (PostId(2), vec![9])]).await.expect("save");
    assert_eq!(s.views.load_views(PostId(1)).await.expect("load"), Some(vec![1, 2, 3]));
    s.views.save_views(&[(PostId(1), vec![4])]).await.expect("save");
    assert_eq!(s.views.load_views(PostId(1)).await.expect("load"), Some(vec![4]));
    assert_eq!(s.views.load_views(PostId(2)).await.expect("load"), Some(vec![9]));
}

/// Instantiate every conformance check as a `#[tokio::test]`. `$open` must evaluate to
/// `(Stores, guard)` for a new empty store; the guard is kept alive for the test.
/// A snapshot and its consumer's offset are saved and loaded together; names are separate.
pub async fn snapshots_move_with_their_offset(s: &Stores) {
    assert_eq!(s.snapshots.load_snapshot("trending").await.expect("load"), None);
    s.snapshots.save_snapshot("trending", 40, b"first").await.expect("save");
    s.snapshots.save_snapshot("trending", 42, b"second").await.expect("save");
    s.snapshots.save_snapshot("other", 7, b"x").await.expect("save");
    assert_eq!(s.snapshots.load_snapshot("trending").await.expect("load"), Some((42, b"second".to_vec())));
    assert_eq!(s.counters.offset("trending").await.expect("offset"), 42);
    assert_eq!(s.snapshots.load_snapshot("other").await.expect("load"), Some((7, b"x".to_vec())));
}

/// Fenced snapshot saves: a batch lands whole with its offsets; once a successor took a new
/// fence for one of its names, a batch under the old fence writes nothing and names it; the
/// successor's batch then lands; snapshots load together in the order asked.
pub async fn fenced_snapshot_batches_refuse_a_deposed_writer(s: &Stores) {
    use likewise_core::ports::SnapshotSave;
    let snaps = &s.snapshots;
    let (a, b) = ("trending.p1".to_string(), "trending.p2".to_string());
    let fa = snaps.fence_snapshot(&a).await.expect("fence");
    let fb = snaps.fence_snapshot(&b).await.expect("fence");
    let save = |name: &str, fence: u64, upto: u64, body: &[u8]| SnapshotSave {
        name: name.to_string(),
        fence,
        upto,
        body: body.to_vec(),
    };
    snaps.save_snapshots(&[save(&a, fa, 10, b"a1"), save(&b, fb, 11, b"b1")]).await.expect("save");
    // A successor takes partition 2 over.
    let fb2 = snaps.fence_snapshot(&b).await.expect("fence");
    assert!(fb2 > fb);
    match snaps.save_snapshots(&[save(&a, fa, 20, b"a2"), save(&b, fb, 21, b"b2")]).await {
        Err(likewise_core::StoreError::Superseded(names)) => assert_eq!(names, b),
        other => panic!("a deposed writer's batch: {other:?}"),
    }
    let loaded = snaps.load_snapshots(&[b.clone(), "none".to_string(), a.clone()]).await.expect("load");
    assert_eq!(loaded, vec![Some((11, b"b1".to_vec())), None, Some((10, b"a1".to_vec()))]);
    snaps.save_snapshots(&[save(&b, fb2, 30, b"b3")]).await.expect("the successor saves");
    assert_eq!(snaps.load_snapshot(&b).await.expect("load"), Some((30, b"b3".to_vec())));
    assert_eq!(s.counters.offset(&b).await.expect("offset"), 30);
    assert_eq!(s.counters.offset(&a).await.expect("offset"), 10);
}

/// The rank index walks a post's entries best first (equal scores: higher ID first), pages by
/// keyset, moves an entry when its score changes, removes it, and keeps posts apart.
pub async fn rank_index_orders_moves_and_removes(s: &Stores) {
    let r = &s.ranks;
    let e = |post: u64, comment: u64, score: f64| {
        RankChange::Put(RankEntry {
            post: PostId(post),
            comment: CommentId(comment),
            author: UserId(comment % 3),
            score,
            author_replied: false,
            author_liked: false,
            factor: 1.0,
            listed: true,
        })
    };
    r.change_ranks(&[e(1, 10, 2.5), e(1, 11, 7.0), e(1, 12, 2.5), e(1, 13, -1.0), e(2, 20, 100.0)])
        .await
        .expect("put");
    let ids = |v: Vec<RankEntry>| v.into_iter().map(|e| e.comment.0).collect::<Vec<_>>();
    assert_eq!(ids(r.ranked(PostId(1), None, 10).await.expect("ranked")), [11, 12, 10, 13]);
    let first = r.ranked(PostId(1), None, 2).await.expect("page");
    let last = first.last().expect("entries");
    assert_eq!((last.comment, last.score), (CommentId(12), 2.5));
    let rest = r.ranked(PostId(1), Some((last.score, last.comment)), 10).await.expect("next page");
    assert_eq!(ids(rest), [10, 13], "strictly after the cursor");
    // A moved entry leaves no trace of its old place; two changes in one batch compose.
    r.change_ranks(&[e(1, 13, 9.0), e(1, 10, 8.0), e(1, 10, 0.5)]).await.expect("move");
    r.change_ranks(&[RankChange::Put(RankEntry {
        post: PostId(1),
        comment: CommentId(12),
        author: UserId(0),
        score: 3.0,
        author_replied: true,
        author_liked: true,
        factor: 0.25,
        listed: true,
    })])
    .await
    .expect("flag");
    let all = r.ranked(PostId(1), None, 10).await.expect("ranked");
    assert_eq!(ids(all.clone()), [13, 11, 12, 10]);
    assert!(all[2].author_replied && !all[0].author_replied);
    r.change_ranks(&[RankChange::Remove { post: PostId(1), comment: CommentId(11) }]).await.expect("remove");
    assert_eq!(ids(r.ranked(PostId(1), None, 10).await.expect("ranked")), [13, 12, 10]);
    let of = r.ranks_of(PostId(1), &[CommentId(12), CommentId(11), CommentId(99)]).await.expect("of");
    assert_eq!(
        of[0].map(|e| (e.score, e.author_replied, e.author_liked, e.factor)),
        Some((3.0, true, true, 0.25))
    );
    assert_eq!((of[1], of[2]), (None, None));
    assert_eq!(ids(r.ranked(PostId(2), None, 10).await.expect("other post")), [20]);
    // Held: out of the order, found by author; listed again, back in it.
    let held = |comment: u64, author: u64, listed: bool| {
        RankChange::Put(RankEntry {
            post: PostId(1),
            comment: CommentId(comment),
            author: UserId(author),
            score: 50.0,
            author_replied: false,
            author_liked: false,
            factor: 1.0,
            listed,
        })
    };
    r.change_ranks(&[held(13, 5, false), held(14, 6, false), held(15, 5, false)]).await.expect("hold");
    assert_eq!(ids(r.ranked(PostId(1), None, 10).await.expect("ranked")), [12, 10]);
    assert_eq!(ids(r.held_ranks(PostId(1), Some(UserId(5)), 10).await.expect("held")), [13, 15]);
    assert_eq!(ids(r.held_ranks(PostId(1), Some(UserId(7)), 10).await.expect("none")), Vec::<u64>::new());
    let mut all = ids(r.held_ranks(PostId(1), None, 10).await.expect("all held"));
    all.sort_unstable();
    assert_eq!(all, [13, 14, 15]);
    // By author, over several posts: what a feed page asks for its viewer.
    let on_two = [PostId(2), PostId(1), PostId(3)];
    let held_by = |author: u64| {
        let r = r.clone();
        async move {
            let mut v = ids(r.held_by_author(UserId(author), &on_two, 10).await.expect("held by"));
            v.sort_unstable();
            v
        }
    };
    assert_eq!(held_by(5).await, [13, 15]);
    assert_eq!(held_by(6).await, [14]);
    assert_eq!(held_by(7).await, Vec::<u64>::new());
    assert!(r.held_by_author(UserId(5), &[PostId(2)], 10).await.expect("other post").is_empty());
    r.change_ranks(&[held(13, 5, true)]).await.expect("approve");
    assert_eq!(ids(r.ranked(PostId(1), None, 10).await.expect("ranked")), [13, 12, 10]);
    assert_eq!(ids(r.held_ranks(PostId(1), Some(UserId(5)), 10).await.expect("held")), [15]);
    assert_eq!(held_by(5).await, [15], "listed again: no longer held by its author");
    r.change_ranks(&[RankChange::Remove { post: PostId(1), comment: CommentId(15) }]).await.expect("delete");
    assert_eq!(held_by(5).await, Vec::<u64>::new(), "removed: no longer held by its author");
    assert_eq!(held_by(6).await, [14]);
    assert!(r.held_ranks(PostId(2), None, 10).await.expect("other post").is_empty());
    assert!(r.ranked(PostId(3), None, 10).await.expect("empty").is_empty());
}

#[macro_export]
macro_rules! conformance_suite {
    ($open:expr) => {
        $crate::conformance_suite!(@tests $open;
            retried_like_changes_once,
            unlike_of_missing_row_is_a_no_op,
            one_batch_resolves_each_key_in_arrival_order,
            comment_changes_count_once_and_leave_placeholders,
            a_batch_sees_its_own_replies_when_deleting_a_parent,
            a_reply_and_its_parents_delete_never_leave_an_orphan,
            a_placeholder_goes_with_its_last_reply,
            replies_count_only_while_their_parent_opens_its_thread,
            a_batch_counts_replies_by_their_parent_as_it_left_it,
            reply_counts_are_recounted_with_their_parent,
            likers_page_newest_first,
            recent_likers_of_many_targets_match_each_list,
            reverse_index_lists_a_users_likes,
            counters_move_with_their_offset,
            fresh_post_likes_include_unapplied_events,
            a_window_whose_start_moved_is_refused,
            event_log_reads_and_truncates,
            upstream_data_round_trips,
            view_sketches_round_trip,
            hourly_view_sketches_merge_and_page_by_hour,
            blocks_and_restricts_round_trip,
            hidden_words_round_trip,
            pins_keep_their_order,
            concurrent_pin_changes_all_take_effect_under_the_cap,
            reports_count_each_reporter_once,
            an_approval_weighs_the_reports_so_far,
            review_queue_pages_in_id_order,
            holds_and_appeals_are_recorded_once,
            fingerprints_are_newest_first_and_time_bounded,
            a_created_comment_carries_its_moderation_state,
            held_replies_are_listed_by_author_while_held,
            visible_replies_are_counted_by_parent,
            snapshots_move_with_their_offset,
            fenced_snapshot_batches_refuse_a_deposed_writer,
            integrity_verdicts_keep_the_latest_and_page_in_time_order,
            a_key_makes_one_comment_whatever_the_batch,
            a_key_is_stored_only_with_its_comment,
            keys_in_one_batch_resolve_in_arrival_order,
            expired_keys_are_removed,
            notification_items_past_the_retention_are_pruned,
            rank_index_orders_moves_and_removes,
            the_rank_index_reads_as_it_was_at_a_version
        );
    };
    (@tests $open:expr; $($name:ident),*) => {
        $(
            #[tokio::test]
            async fn $name() {
                let (stores, _guard) = $open;
                $crate::conformance::$name(&stores).await;
                stores.close().expect("close");
            }
        )*
    };
}
