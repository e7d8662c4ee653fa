//! The conformance suite every storage engine must pass.
//!
//! Each check is an async function over a freshly opened [`Stores`]. An engine's test module
//! instantiates them all with [`conformance_suite!`], passing an expression that opens a new,
//! empty store (and whatever guard keeps its resources alive).

use crate::Stores;
use likewise_core::counter::{CounterField, CounterKey};
use likewise_core::event::EventKind;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::like::{LikeAction, LikeOp, Target, TargetKind};
use likewise_core::model::{CommentsPolicy, PostMeta, UserProfile, ViewerSettings};
use likewise_core::ports::{Liker, ReportReason};
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
    s.counters.apply_deltas("agg", pos[1], &[(key, 2)]).await.expect("apply");
    assert_eq!(s.counters.offset("agg").await.expect("offset"), pos[1]);
    assert_eq!(s.counters.offset("other").await.expect("offset"), 0);
    assert_eq!(s.counters.counts(&[t, Target::post(1)]).await.expect("counts")[0].likes, 2);
    let r = s.counters.recount_likes("agg", t).await.expect("recount");
    assert_eq!((r.rows, r.counter, r.pending, r.drift()), (3, 2, 1, 0));
    // Simulated drift: a counter that is off by 5 is reported as drift of -5.
    s.counters.apply_deltas("agg", pos[2], &[(key, 6)]).await.expect("apply");
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
    m.set_pins(PostId(1), &[CommentId(10)]).await.expect("replace");
    assert_eq!(m.pins(PostId(1)).await.expect("pins"), vec![CommentId(10)]);
    m.set_pins(PostId(1), &[]).await.expect("clear");
    assert!(m.pins(PostId(1)).await.expect("cleared").is_empty());
}

/// A reporter counts once per comment, even when reports of one comment race.
pub async fn reports_count_each_reporter_once(s: &Stores) {
    let m = &s.moderation;
    let (c, other) = (CommentId(5), CommentId(6));
    assert_eq!(m.add_report(c, UserId(1), ReportReason::Spam).await.expect("report"), 1);
    assert_eq!(m.add_report(c, UserId(1), ReportReason::Bullying).await.expect("again"), 1);
    assert_eq!(m.add_report(c, UserId(2), ReportReason::Other).await.expect("second"), 2);
    assert_eq!(m.add_report(other, UserId(1), ReportReason::Spam).await.expect("other"), 1);
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
        seen.push(t.await.expect("join").expect("report"));
    }
    assert!(seen.iter().all(|&n| (1..=20).contains(&n)), "{seen:?}");
    assert_eq!(seen.iter().max(), Some(&20));
    assert_eq!(m.report_counts(&[racing]).await.expect("counts"), vec![20]);
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
            upstream_data_round_trips,
            view_sketches_round_trip,
            blocks_and_restricts_round_trip,
            hidden_words_round_trip,
            pins_keep_their_order,
            reports_count_each_reporter_once,
            review_queue_pages_in_id_order,
            fingerprints_are_newest_first_and_time_bounded
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
