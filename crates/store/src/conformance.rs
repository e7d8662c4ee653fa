//! The conformance suite every storage engine must pass.
//!
//! Each check is an async function over a freshly opened [`Stores`]. An engine's test module
//! instantiates them all with [`conformance_suite!`], passing an expression that opens a new,
//! empty store (and whatever guard keeps its resources alive).

use crate::Stores;
use likewise_core::counter::{CounterField, CounterKey};
use likewise_core::event::EventKind;
use likewise_core::ids::{PostId, UserId};
use likewise_core::like::{LikeAction, LikeOp, Target, TargetKind};
use likewise_core::model::{CommentsPolicy, PostMeta, UserProfile, ViewerSettings};
use likewise_core::ports::Liker;
use likewise_core::write::{WriteOp, WriteOutcome};

fn op(target: Target, user: u64, action: LikeAction, ts: u64) -> LikeOp {
    LikeOp { target, user: UserId(user), action, target_author: UserId(7), ts_ms: ts, post: target.id }
}

/// A retried like creates one row and one event.
pub async fn retried_like_changes_once(s: &Stores) {
    let t = Target::post(42);
    let a = s.writer.submit(op(t, 1, LikeAction::Like, 10)).await.expect("like");
    let b = s.writer.submit(op(t, 1, LikeAction::Like, 11)).await.expect("retry");
    assert!(a.outcome.changed && a.outcome.liked);
    assert!(!b.outcome.changed && b.outcome.liked);
    assert!(b.order > a.order);
    assert_eq!(s.events.head().await.expect("head"), 1);
    let ev = s.events.read_after(0, 10).await.expect("read");
    assert_eq!(ev.len(), 1);
    assert_eq!(
        (ev[0].kind, ev[0].actor, ev[0].target_author),
        (EventKind::LikeCreated, UserId(1), UserId(7))
    );
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
    let out = s.write_engine.apply(&ops).expect("apply");
    s.write_engine.sync().expect("sync");
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
    let seqs: Vec<u64> = ev.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![1, 2, 3]);
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

/// A user's liked IDs come from the reverse index, per kind.
pub async fn reverse_index_lists_a_users_likes(s: &Stores) {
    for p in [3u64, 1, 2] {
        s.writer.submit(op(Target::post(p), 8, LikeAction::Like, 1)).await.expect("like");
    }
    s.writer.submit(op(Target::comment(77), 8, LikeAction::Like, 1)).await.expect("comment like");
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
    s.counters.apply_deltas("agg", 2, &[(key, 2)]).await.expect("apply");
    assert_eq!(s.counters.offset("agg").await.expect("offset"), 2);
    assert_eq!(s.counters.offset("other").await.expect("offset"), 0);
    assert_eq!(s.counters.counts(&[t, Target::post(1)]).await.expect("counts")[0].likes, 2);
    let r = s.counters.recount_likes("agg", t).await.expect("recount");
    assert_eq!((r.rows, r.counter, r.pending, r.drift()), (3, 2, 1, 0));
    // Simulated drift: a counter that is off by 5 is reported as drift of -5.
    s.counters.apply_deltas("agg", 3, &[(key, 6)]).await.expect("apply");
    let r = s.counters.recount_likes("agg", t).await.expect("recount");
    assert_eq!((r.rows, r.counter, r.pending, r.drift()), (3, 8, 0, -5));
    assert_eq!(s.counters.counted_posts(None, 10).await.expect("posts"), vec![PostId(42)]);
    assert!(s.counters.counted_posts(Some(PostId(42)), 10).await.expect("after").is_empty());
}

/// The log reads in order after an offset and truncates a prefix.
pub async fn event_log_reads_and_truncates(s: &Stores) {
    for u in 1..=5u64 {
        s.writer.submit(op(Target::post(1), u, LikeAction::Like, u)).await.expect("like");
    }
    let ev = s.events.read_after(2, 2).await.expect("read");
    assert_eq!(ev.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![3, 4]);
    assert_eq!(s.events.truncate(3).await.expect("truncate"), 3);
    let rest = s.events.read_after(0, 10).await.expect("read");
    assert_eq!(rest.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![4, 5]);
    assert_eq!(s.events.head().await.expect("head"), 5);
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
    s.meta.put_settings(UserId(1), ViewerSettings { hide_like_counts: true }).await.expect("put");
    assert!(s.meta.settings(UserId(1)).await.expect("settings").hide_like_counts);
    s.meta.ping().await.expect("ping");
}

/// Instantiate every conformance check as a `#[tokio::test]`. `$open` must evaluate to
/// `(Stores, guard)` for a new empty store; the guard is kept alive for the test.
#[macro_export]
macro_rules! conformance_suite {
    ($open:expr) => {
        $crate::conformance_suite!(@tests $open;
            retried_like_changes_once,
            unlike_of_missing_row_is_a_no_op,
            one_batch_resolves_each_key_in_arrival_order,
            likers_page_newest_first,
            reverse_index_lists_a_users_likes,
            counters_move_with_their_offset,
            event_log_reads_and_truncates,
            upstream_data_round_trips
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
