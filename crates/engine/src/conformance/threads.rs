//! Conformance checks for threads that follow their parent: a reply is counted only while
//! its top-level parent opens its thread, the parent's status changes move its visible
//! replies' counts with it (one event per reply), and the recounts agree.

use super::{comment, created, new_comment, one_batch};
use crate::Stores;
use likewise_core::comment::status::CommentStatus::{self, *};
use likewise_core::counter::{CounterField, CounterKey};
use likewise_core::event::EventKind::{self, *};
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::like::Target;
use likewise_core::ports::Recount;
use likewise_core::write::{CommentOp, WriteOp};

/// The post of [`new_comment`].
const POST: PostId = PostId(9);

fn set(id: CommentId, status: CommentStatus) -> CommentOp {
    CommentOp::SetStatus { id, status, actor: UserId(7), queue: likewise_core::write::QueueChange::Keep }
}

/// The comment events after `from`: (kind, target, delta, parent, actor).
async fn events_after(s: &Stores, from: u64) -> Vec<(EventKind, u64, i64, u64, u64)> {
    let ev = s.events.read_after(from, 100).await.expect("events");
    ev.iter().map(|e| (e.kind, e.target.id, e.delta(), e.parent, e.actor.0)).collect()
}

/// Recount the post's comments and reply counts with a consumer that applied nothing: every
/// delta is pending, so the recount finds no drift exactly when the deltas sum to the rows.
async fn recount(s: &Stores) -> (Recount, Vec<(CommentId, Recount)>) {
    let comments = s.counters.recount_comments("none", POST).await.expect("recount comments");
    let replies = s.counters.recount_replies("none", POST).await.expect("recount replies");
    (comments, replies)
}

fn rows_and_drift(r: &Recount) -> (i64, i64) {
    (r.rows, r.drift())
}

/// A parent held and approved again: its visible replies stop and start counting with it,
/// each by an event of its own; what happens under the held parent counts nothing.
pub async fn replies_count_only_while_their_parent_opens_its_thread(s: &Stores) {
    let top = created(s, new_comment(None, 1, Visible)).await;
    let r1 = created(s, new_comment(Some(top), 2, Visible)).await;
    let r2 = created(s, new_comment(Some(top), 3, Pending)).await;
    let r3 = created(s, new_comment(Some(top), 4, Visible)).await;
    let from = s.events.head().await.expect("head");
    comment(s, set(top, Pending)).await;
    let r4 = created(s, new_comment(Some(top), 5, Visible)).await;
    comment(s, set(r2, Visible)).await;
    comment(s, CommentOp::Delete { id: r3, actor: UserId(4) }).await;
    let (t, held) = (top.0, from);
    #[rustfmt::skip]
    assert_eq!(events_after(s, held).await, vec![
        (CommentStatusChanged, t, -1, 0, 1), (CommentStatusChanged, r1.0, -1, t, 2),
        (CommentStatusChanged, r3.0, -1, t, 4), (CommentCreated, r4.0, 0, t, 5),
        (CommentStatusChanged, r2.0, 0, t, 3), (CommentDeleted, r3.0, 0, t, 4),
    ]);
    let (comments, replies) = recount(s).await;
    assert_eq!(rows_and_drift(&comments), (0, 0), "nothing counted under a held parent");
    assert_eq!(replies.iter().map(|(p, r)| (*p, rows_and_drift(r))).collect::<Vec<_>>(), vec![(top, (0, 0))]);
    let approved = s.events.head().await.expect("head");
    comment(s, set(top, Visible)).await;
    #[rustfmt::skip]
    assert_eq!(events_after(s, approved).await, vec![
        (CommentStatusChanged, t, 1, 0, 1), (CommentStatusChanged, r1.0, 1, t, 2),
        (CommentStatusChanged, r2.0, 1, t, 3), (CommentStatusChanged, r4.0, 1, t, 5),
    ]);
    let (comments, replies) = recount(s).await;
    assert_eq!(rows_and_drift(&comments), (4, 0), "the parent and its three visible replies");
    assert_eq!(replies.iter().map(|(p, r)| (*p, rows_and_drift(r))).collect::<Vec<_>>(), vec![(top, (3, 0))]);
    // From one held status to another the thread stays closed: no reply moves.
    comment(s, set(top, HiddenByFilter)).await;
    let filtered = s.events.head().await.expect("head");
    comment(s, set(top, Restricted)).await;
    assert_eq!(events_after(s, filtered).await, vec![(CommentStatusChanged, t, 0, 0, 1)]);
}

/// Within one batch, a parent's change counts the replies the batch created and removed
/// before it, and a reply counts by its parent as the batch left it.
pub async fn a_batch_counts_replies_by_their_parent_as_it_left_it(s: &Stores) {
    let top = created(s, new_comment(None, 1, Visible)).await;
    let r1 = created(s, new_comment(Some(top), 2, Visible)).await;
    let from = s.events.head().await.expect("head");
    let ops = vec![
        new_comment(Some(top), 3, Visible),
        set(top, Pending),
        new_comment(Some(top), 4, Visible),
        CommentOp::Delete { id: r1, actor: UserId(2) },
        set(top, Visible),
    ];
    one_batch(s, ops.into_iter().map(WriteOp::Comment).collect()).await;
    let seen = events_after(s, from).await;
    let deltas: Vec<(EventKind, i64, u64)> = seen.iter().map(|(k, _, d, _, a)| (*k, *d, *a)).collect();
    #[rustfmt::skip]
    assert_eq!(deltas, vec![
        (CommentCreated, 1, 3),
        (CommentStatusChanged, -1, 1), (CommentStatusChanged, -1, 2), (CommentStatusChanged, -1, 3),
        (CommentCreated, 0, 4), (CommentDeleted, 0, 2),
        (CommentStatusChanged, 1, 1), (CommentStatusChanged, 1, 3), (CommentStatusChanged, 1, 4),
    ]);
    let (comments, replies) = recount(s).await;
    assert_eq!(rows_and_drift(&comments), (3, 0));
    assert_eq!(replies.iter().map(|(p, r)| (*p, rows_and_drift(r))).collect::<Vec<_>>(), vec![(top, (2, 0))]);
}

/// Reconciliation recounts reply counts by the same rule: a wrong counter is drift, the
/// replies of a held parent count nothing, and a placeholder's count on.
pub async fn reply_counts_are_recounted_with_their_parent(s: &Stores) {
    let shown = created(s, new_comment(None, 1, Visible)).await;
    let held = created(s, new_comment(None, 2, Visible)).await;
    let gone = created(s, new_comment(None, 3, Visible)).await;
    created(s, new_comment(None, 4, Visible)).await;
    for (parent, author) in [(shown, 10), (shown, 11), (held, 12), (gone, 13)] {
        created(s, new_comment(Some(parent), author, Visible)).await;
    }
    comment(s, set(held, Restricted)).await;
    comment(s, CommentOp::Delete { id: gone, actor: UserId(3) }).await;
    // The aggregator applied everything, but the first parent's counter is off by 3.
    let upto = s.events.head().await.expect("head");
    let key = |c: CommentId| CounterKey { target: Target::comment(c.0), field: CounterField::Replies };
    let post = CounterKey { target: Target::post(POST.0), field: CounterField::Comments };
    s.counters
        .apply_deltas("agg", 0, upto, &[(key(shown), 5), (key(gone), 1), (post, 5)])
        .await
        .expect("apply");
    let replies = s.counters.recount_replies("agg", POST).await.expect("recount");
    let got: Vec<(CommentId, (i64, i64, i64))> =
        replies.iter().map(|(p, r)| (*p, (r.rows, r.counter, r.drift()))).collect();
    assert_eq!(got, vec![(shown, (2, 5, -3)), (held, (0, 0, 0)), (gone, (1, 1, 0))]);
    let c = s.counters.recount_comments("agg", POST).await.expect("recount");
    assert_eq!(
        (c.rows, c.drift()),
        (5, 0),
        "two top-level, two replies under the first, one under the placeholder"
    );
}
