//! Unit tests of the comment transitions, and a model store that applies their plans.

use super::*;
use crate::ids::{PostId, UserId};
use CommentStatus::*;

const NOW: u64 = 1_700_000_000_000;

fn record(id: u64, parent: Option<u64>, status: CommentStatus) -> CommentRecord {
    CommentRecord {
        id: CommentId(id),
        post: PostId(42),
        author: UserId(100 + id),
        post_author: UserId(7),
        parent: parent.map(CommentId),
        reply_to_user: None,
        status,
        text: format!("comment {id}"),
        simhash: id,
    }
}

fn set(id: u64, status: CommentStatus) -> CommentOp {
    CommentOp::SetStatus {
        id: CommentId(id),
        status,
        actor: UserId(9),
        queue: crate::write::QueueChange::Keep,
    }
}

fn delete(id: u64) -> CommentOp {
    CommentOp::Delete { id: CommentId(id), actor: UserId(9) }
}

fn stored(r: &CommentRecord, has_replies: bool) -> Before {
    Before::Stored(r.clone(), Thread { has_replies, ..Thread::default() })
}

fn deltas(p: &Plan) -> Vec<i8> {
    p.events.iter().map(|e| e.delta).collect()
}

#[test]
fn a_create_stores_the_comment_under_the_engines_id_and_counts_it_if_visible() {
    let op = CommentOp::Create(record(0, Some(3), Visible), None);
    let parent = record(3, None, Visible);
    let p = transition(&op, Before::New(CommentId(5), Some(parent)), NOW);
    let want = record(0, Some(3), Visible);
    let want = CommentRecord { id: CommentId(5), ..want };
    assert_eq!(p.outcome, CommentOutcome::Done(Some(want.clone())));
    assert_eq!(p.writes, vec![RowWrite::Insert(want)]);
    let e = p.events[0];
    assert_eq!(
        (e.kind, e.target, e.delta, e.parent, e.post),
        (EventKind::CommentCreated, Target::comment(5), 1, 3, 42)
    );
    assert_eq!((e.actor, e.target_author, e.ts_ms, e.seq), (UserId(100), UserId(7), NOW, 0));
}

#[test]
fn a_held_comment_is_created_without_counting() {
    for held in [Pending, HiddenByFilter, Restricted] {
        let p =
            transition(&CommentOp::Create(record(0, None, held), None), Before::New(CommentId(1), None), NOW);
        assert_eq!(deltas(&p), [0], "{held:?}");
    }
}

#[test]
fn a_status_change_counts_the_change_of_visibility_and_names_the_comments_author() {
    #[rustfmt::skip]
    let table = [
        (Visible, Pending, -1),
        (Visible, HiddenByFilter, -1),
        (Pending, Visible, 1),
        (Restricted, Visible, 1),
        (Pending, HiddenByFilter, 0),
        (HiddenByFilter, Restricted, 0),
    ];
    for (from, to, delta) in table {
        let old = record(4, None, from);
        let p = transition(&set(4, to), stored(&old, false), NOW);
        let new = CommentRecord { status: to, ..old };
        assert_eq!(p.outcome, CommentOutcome::Done(Some(new.clone())));
        assert_eq!(p.writes, vec![RowWrite::Update(new)]);
        assert_eq!(deltas(&p), [delta], "{from:?} -> {to:?}");
        assert_eq!((p.events[0].kind, p.events[0].actor), (EventKind::CommentStatusChanged, UserId(104)));
    }
}

#[test]
fn setting_the_status_a_comment_has_changes_nothing() {
    let old = record(4, None, Pending);
    let p = transition(&set(4, Pending), stored(&old, false), NOW);
    assert_eq!(p, Plan::unchanged(old));
    assert!(!p.changed());
}

#[test]
fn a_deleted_comment_keeps_its_status_and_cannot_be_deleted_again() {
    for gone in [Deleted, DeletedWhileHeld] {
        let old = CommentRecord { text: String::new(), ..record(4, None, gone) };
        for op in [set(4, Visible), set(4, Pending), delete(4)] {
            let p = transition(&op, stored(&old, true), NOW);
            assert_eq!(p, Plan::unchanged(old.clone()), "{op:?} on {gone:?}");
        }
    }
}

#[test]
fn deleting_a_top_level_comment_with_replies_leaves_a_placeholder() {
    for (from, placeholder, delta) in
        [(Visible, Deleted, -1), (Pending, DeletedWhileHeld, 0), (Restricted, DeletedWhileHeld, 0)]
    {
        let old = record(4, None, from);
        let p = transition(&delete(4), stored(&old, true), NOW);
        let left = CommentRecord { status: placeholder, text: String::new(), ..old };
        assert_eq!(p.outcome, CommentOutcome::Done(Some(left.clone())));
        assert_eq!(p.writes, vec![RowWrite::Update(left)]);
        assert_eq!(deltas(&p), [delta], "{from:?}");
        assert_eq!(p.events[0].kind, EventKind::CommentDeleted);
    }
}

#[test]
fn deleting_a_leaf_or_a_reply_removes_it() {
    let top = (record(4, None, Visible), Thread::default());
    let reply = (record(5, Some(4), Visible), under(&record(4, None, Visible)));
    for (old, thread) in [top, reply] {
        let p = transition(&delete(old.id.0), Before::Stored(old.clone(), thread), NOW);
        assert_eq!(p.outcome, CommentOutcome::Done(None));
        assert_eq!(p.writes, vec![RowWrite::Remove(old.clone())]);
        assert_eq!(deltas(&p), [-1]);
        assert_eq!(p.events[0].parent, old.parent.map_or(0, |p| p.0));
    }
    let held = record(6, None, HiddenByFilter);
    assert_eq!(deltas(&transition(&delete(6), stored(&held, false), NOW)), [0]);
}

#[test]
fn an_operation_on_a_missing_comment_is_not_found_and_changes_nothing() {
    for op in [set(4, Visible), delete(4)] {
        assert_eq!(transition(&op, Before::Missing, NOW), Plan::not_found());
    }
    // Inputs that do not fit the operation plan nothing either.
    assert_eq!(transition(&delete(4), Before::New(CommentId(4), None), NOW), Plan::not_found());
    let create = CommentOp::Create(record(0, None, Visible), None);
    assert_eq!(transition(&create, stored(&record(4, None, Visible), false), NOW), Plan::not_found());
}

#[test]
fn only_what_a_plan_depends_on_is_read_of_its_thread() {
    let top = record(4, None, Visible);
    let held_top = record(4, None, Pending);
    let reply = record(5, Some(4), Visible);
    let gone = record(6, None, Deleted);
    let none = ThreadReads::default();
    let reads = |has_replies, parent, siblings, visible_replies| ThreadReads {
        has_replies,
        parent,
        siblings,
        visible_replies,
    };
    assert_eq!(thread_reads(&delete(4), &top), reads(true, false, false, false));
    assert_eq!(thread_reads(&delete(5), &reply), reads(false, true, true, false));
    assert_eq!(thread_reads(&delete(6), &gone), none);
    assert_eq!(thread_reads(&set(6, Visible), &gone), none);
    // A parent's change of status reads its replies only when its thread opens or closes.
    assert_eq!(thread_reads(&set(4, Pending), &top), reads(false, false, false, true));
    assert_eq!(thread_reads(&set(4, Visible), &held_top), reads(false, false, false, true));
    assert_eq!(thread_reads(&set(4, HiddenByFilter), &held_top), none);
    assert_eq!(thread_reads(&set(4, Visible), &top), none);
    // A reply's change of status reads its parent: whether it counts depends on it.
    assert_eq!(thread_reads(&set(5, Pending), &reply), reads(false, true, false, false));
    assert_eq!(thread_reads(&set(5, Visible), &reply), none);
}

fn under(parent: &CommentRecord) -> Thread {
    Thread { parent: Some(parent.clone()), has_siblings: true, ..Thread::default() }
}

#[test]
fn a_reply_under_a_parent_others_cannot_see_is_created_without_counting() {
    let op = CommentOp::Create(record(0, Some(3), Visible), None);
    for (parent, delta) in [
        (Visible, 1),
        (Deleted, 1),
        (Pending, 0),
        (HiddenByFilter, 0),
        (Restricted, 0),
        (DeletedWhileHeld, 0),
    ] {
        let parent = record(3, None, parent);
        let p = transition(&op, Before::New(CommentId(5), Some(parent.clone())), NOW);
        assert_eq!(deltas(&p), [delta], "under {:?}", parent.status);
        assert_eq!(p.events[0].parent, 3);
    }
}

#[test]
fn a_reply_under_a_held_parent_changes_status_and_goes_without_counting() {
    let reply = record(5, Some(4), Visible);
    for (parent, delta) in [(Visible, -1), (Deleted, -1), (Pending, 0), (HiddenByFilter, 0)] {
        let parent = record(4, None, parent);
        let hide = transition(&set(5, Pending), Before::Stored(reply.clone(), under(&parent)), NOW);
        assert_eq!(deltas(&hide), [delta], "hidden under {:?}", parent.status);
        let gone = transition(&delete(5), Before::Stored(reply.clone(), under(&parent)), NOW);
        assert_eq!(deltas(&gone), [delta], "deleted under {:?}", parent.status);
        let held = CommentRecord { status: Restricted, ..reply.clone() };
        let approve = transition(&set(5, Visible), Before::Stored(held, under(&parent)), NOW);
        assert_eq!(deltas(&approve), [-delta], "approved under {:?}", parent.status);
    }
}

#[test]
fn a_parents_thread_opening_or_closing_moves_each_of_its_visible_replies() {
    let replies: Vec<VisibleReply> = (0..3)
        .map(|k| VisibleReply { id: CommentId(10 + k), author: UserId(200 + k), mention: None })
        .collect();
    let thread = Thread { visible_replies: replies.clone(), ..Thread::default() };
    #[rustfmt::skip]
    let table = [
        // (from, to, the parent's delta, each visible reply's delta; 0: no reply event)
        (Pending, Visible, 1, 1),
        (Restricted, Visible, 1, 1),
        (HiddenByFilter, Visible, 1, 1),
        (Visible, Pending, -1, -1),
        (Visible, HiddenByFilter, -1, -1),
        (Pending, HiddenByFilter, 0, 0),
        (HiddenByFilter, Restricted, 0, 0),
    ];
    for (from, to, own, each) in table {
        let old = record(4, None, from);
        let p = transition(&set(4, to), Before::Stored(old.clone(), thread.clone()), NOW);
        let new = CommentRecord { status: to, ..old };
        assert_eq!(p.writes, vec![RowWrite::Update(new)], "{from:?} -> {to:?}");
        let mut want = vec![own];
        if each != 0 {
            want.extend([each; 3]);
        }
        assert_eq!(deltas(&p), want, "{from:?} -> {to:?}");
        // Each reply's event: its own, under its parent, on the parent's post.
        for (e, r) in p.events[1..].iter().zip(&replies) {
            assert_eq!(
                (e.kind, e.target, e.actor, e.target_author, e.parent, e.post, e.ts_ms),
                (EventKind::CommentStatusChanged, Target::comment(r.id.0), r.author, UserId(7), 4, 42, NOW)
            );
        }
    }
}

#[test]
fn a_parent_deleted_keeps_its_thread_as_it_was() {
    let thread = Thread {
        has_replies: true,
        visible_replies: vec![VisibleReply { id: CommentId(10), author: UserId(200), mention: None }],
        ..Thread::default()
    };
    for (from, delta) in [(Visible, -1), (Pending, 0)] {
        let p = transition(&delete(4), Before::Stored(record(4, None, from), thread.clone()), NOW);
        assert_eq!(deltas(&p), [delta], "{from:?}");
    }
}

#[test]
fn a_reply_is_created_only_under_a_stored_top_level_parent_of_its_post() {
    let op = CommentOp::Create(record(0, Some(3), Visible), None);
    let reply = record(3, Some(2), Visible);
    let other_post = CommentRecord { post: PostId(43), ..record(3, None, Visible) };
    for parent in [None, Some(reply), Some(other_post)] {
        let p = transition(&op, Before::New(CommentId(5), parent.clone()), NOW);
        assert_eq!(p, Plan::not_found(), "under {parent:?}");
    }
    let placeholder = CommentRecord { text: String::new(), ..record(3, None, Deleted) };
    for parent in [record(3, None, Pending), placeholder] {
        assert!(transition(&op, Before::New(CommentId(5), Some(parent)), NOW).changed());
    }
}

#[test]
fn the_last_reply_of_a_placeholder_takes_it_along() {
    let placeholder = CommentRecord { text: String::new(), ..record(4, None, Deleted) };
    let reply = record(5, Some(4), Visible);
    let last = Thread { parent: Some(placeholder.clone()), ..Thread::default() };
    let p = transition(&delete(5), Before::Stored(reply.clone(), last), NOW);
    assert_eq!(p.outcome, CommentOutcome::Done(None));
    assert_eq!(p.writes, vec![RowWrite::Remove(reply.clone()), RowWrite::Remove(placeholder.clone())]);
    assert_eq!(deltas(&p), [-1, 0]);
    assert_eq!(p.events[1].target, Target::comment(4));
    // With a sibling left, or under a standing parent, only the reply goes.
    let sibling = Thread { parent: Some(placeholder), has_siblings: true, ..Thread::default() };
    let standing = Thread { parent: Some(record(4, None, Visible)), ..Thread::default() };
    for thread in [sibling, standing] {
        let p = transition(&delete(5), Before::Stored(reply.clone(), thread), NOW);
        assert_eq!(p.writes, vec![RowWrite::Remove(reply.clone())]);
    }
}

mod model {
    //! Any sequence of operations, applied through plans to a model store: the deltas
    //! always sum to the counted comments (visible, and for a reply under a parent
    //! everyone sees), per post and per parent.

    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    enum Step {
        Create { reply_to: Option<usize>, status: CommentStatus },
        SetStatus { nth: usize, status: CommentStatus },
        Delete { nth: usize },
    }

    fn live_status() -> impl Strategy<Value = CommentStatus> {
        prop_oneof![Just(Visible), Just(Pending), Just(HiddenByFilter), Just(Restricted)]
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (proptest::option::of(0usize..8), live_status())
                .prop_map(|(reply_to, status)| Step::Create { reply_to, status }),
            3 => (0usize..12, live_status()).prop_map(|(nth, status)| Step::SetStatus { nth, status }),
            2 => (0usize..12).prop_map(|nth| Step::Delete { nth }),
        ]
    }

    /// The rows, as an engine would hold them after writing each plan.
    #[derive(Default)]
    struct Rows(BTreeMap<u64, CommentRecord>);

    impl Rows {
        fn before(&self, op: &CommentOp, next_id: u64) -> Before {
            let Some(id) = op.id() else {
                let parent = create_parent(op).and_then(|p| self.0.get(&p.0).cloned());
                return Before::New(CommentId(next_id), parent);
            };
            let Some(r) = self.0.get(&id.0) else { return Before::Missing };
            let want = thread_reads(op, r);
            let under = |p: CommentId| self.0.values().any(|c| c.parent == Some(p) && c.id != id);
            let parent = r.parent.and_then(|p| self.0.get(&p.0).cloned());
            let visible_replies = self
                .0
                .values()
                .filter(|c| c.parent == Some(id) && c.status == Visible)
                .map(|c| VisibleReply { id: c.id, author: c.author, mention: c.reply_to_user })
                .collect();
            let thread = Thread {
                has_replies: want.has_replies && under(id),
                parent: parent.filter(|_| want.parent),
                has_siblings: want.siblings && r.parent.is_some_and(under),
                visible_replies: if want.visible_replies { visible_replies } else { Vec::new() },
            };
            Before::Stored(r.clone(), thread)
        }

        fn write(&mut self, w: &RowWrite) {
            match w {
                RowWrite::Insert(r) => {
                    assert!(self.0.insert(r.id.0, r.clone()).is_none(), "insert of a stored ID")
                }
                RowWrite::Update(r) => {
                    assert!(self.0.insert(r.id.0, r.clone()).is_some(), "update of a missing row")
                }
                RowWrite::Remove(r) => {
                    assert!(self.0.remove(&r.id.0).is_some(), "removal of a missing row")
                }
            }
        }
    }

    proptest! {
        #[test]
        fn deltas_always_sum_to_the_counted_comments(steps in proptest::collection::vec(step(), 1..60)) {
            let mut rows = Rows::default();
            let mut ids: Vec<u64> = Vec::new();
            let mut post_sum = 0i64;
            let mut reply_sums: BTreeMap<u64, i64> = BTreeMap::new();
            for step in steps {
                let op = match step {
                    Step::Create { reply_to, status } => {
                        let tops: Vec<u64> = rows.0.values().filter(|r| r.parent.is_none()).map(|r| r.id.0).collect();
                        let parent = reply_to.and_then(|n| tops.get(n % tops.len().max(1)).copied());
                        CommentOp::Create(record(0, parent, status), None)
                    }
                    Step::SetStatus { nth, status } if !ids.is_empty() => set(ids[nth % ids.len()], status),
                    Step::Delete { nth } if !ids.is_empty() => delete(ids[nth % ids.len()]),
                    _ => continue,
                };
                let next_id = ids.len() as u64 + 1;
                let was = op.id().and_then(|id| rows.0.get(&id.0).cloned());
                let plan = transition(&op, rows.before(&op, next_id), NOW);
                // An event per real change (and per reply whose thread opened or
                // closed), none otherwise.
                prop_assert_eq!(plan.events.is_empty(), plan.writes.is_empty());
                prop_assert!(plan.events.len() >= plan.writes.len());
                prop_assert!(plan.writes.len() <= 2);
                if let CommentOp::Create(..) = op {
                    ids.push(next_id);
                }
                for w in &plan.writes {
                    rows.write(w);
                }
                for e in &plan.events {
                    post_sum += e.delta();
                    if e.parent != 0 {
                        *reply_sums.entry(e.parent).or_default() += e.delta();
                    }
                }
                // The answer is the row as it now stands.
                let now = match &plan.outcome {
                    CommentOutcome::Done(r) => r.clone(),
                    CommentOutcome::NotFound => {
                        prop_assert!(was.is_none());
                        continue;
                    }
                    CommentOutcome::Replayed(_) => panic!("a transition never replays a key"),
                };
                let id = now.as_ref().or(was.as_ref()).map(|r| r.id.0);
                prop_assert_eq!(now.as_ref(), id.and_then(|id| rows.0.get(&id)));
                // The deltas sum to what a recount of the rows finds.
                let tally = crate::comment::thread::tally(rows.0.values());
                prop_assert_eq!(post_sum, tally.comments);
                for (parent, sum) in &reply_sums {
                    let want = tally.replies.get(&CommentId(*parent)).copied().unwrap_or(0);
                    prop_assert_eq!(*sum, want, "replies of {}", parent);
                }
                // Only top-level comments with replies stay behind deleted, and no reply
                // hangs under a missing or deleted-and-emptied parent.
                for r in rows.0.values().filter(|r| r.status.is_deleted()) {
                    prop_assert!(r.parent.is_none() && r.text.is_empty());
                    prop_assert!(rows.0.values().any(|c| c.parent == Some(r.id)), "empty placeholder");
                }
                for r in rows.0.values() {
                    if let Some(p) = r.parent {
                        prop_assert!(rows.0.contains_key(&p.0), "orphaned reply {}", r.id.0);
                    }
                }
            }
        }
    }
}
