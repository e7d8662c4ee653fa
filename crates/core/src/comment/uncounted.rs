//! Status changes the counters have not taken in yet: so that a comment's author never sees
//! their post's count move because their comment was approved or held.
//!
//! Its author sees a held comment as an ordinary one: it counts for them on top of the shared
//! counter, which leaves it out. The counter is summed from events off the hot path
//! (docs/events.md), so when an approval or a hold moves a comment across that line, its status
//! changes at once and the counter follows a moment later. Read naively, the author's count
//! would dip (an approval) or count the comment twice (a hold) in between. So:
//!
//! - before a status change is written, the service computes how it moves the comment's
//!   counting ([`planned_move`], from the [`transition`] the engines apply) and registers the
//!   [`Move`] on every API node ([`Uncounted::register`]), withdrawing it when the write
//!   changed nothing ([`Uncounted::withdraw`]);
//! - a move is settled once the aggregator's commit holding its event reaches the node's
//!   count cache, in the step that writes the new counter value ([`Uncounted::settle`]); it
//!   is dropped after [`UNCOUNTED_TTL_MS`] when that never comes (a lost bus message), and
//!   at most [`UNCOUNTED_MAX`] are kept;
//! - while moves of a viewer's comment are kept, they decide whether it counts for them on
//!   top of the counter, whatever its record read says ([`Uncounted::own_view`]): exactly
//!   while the counter leaves it out. That is while its first outstanding move is one that
//!   adds it ([`Move::adds`]), or, once all are settled, while the last one took it out; a
//!   settled move decides for [`SETTLED_GRACE_MS`] more, since what else is read of the
//!   comment (its record through caches, its rank entry, on every node) may lag a commit
//!   that came fast. Counter value and moves are read together, so a commit lands either
//!   before both or after both, and after the reads of the viewer's held comments.
//!
//! Registered before the write, a move is always there before its event can be committed; a
//! move that repeats the comment's last outstanding one (two requests making the same change,
//! of which one writes it) is registered once, as its one event settles it once. Time is a
//! parameter (`now_ms`).

use crate::comment::record::CommentRecord;
use crate::comment::transition::{Before, Thread, transition};
use crate::event::{Event, EventKind};
use crate::ids::{CommentId, PostId, UserId};
use crate::like::{Target, TargetKind};
use crate::write::CommentOp;
use std::collections::HashMap;

/// How long a move waits for its commit before it is dropped (ms): far beyond the
/// aggregator's lag in service; past it, the author sees the counter as it is.
pub const UNCOUNTED_TTL_MS: u64 = 60_000;

/// How long a settled move still decides for its comment (ms): the other reads of the
/// comment (its record through caches, its rank entry, its author's held marks) follow its
/// status change within milliseconds, but a commit can be faster still.
pub const SETTLED_GRACE_MS: u64 = 3_000;

/// The most moves kept at once (the oldest go first): a few dozen bytes each.
pub const UNCOUNTED_MAX: usize = 10_000;

/// How a status change moves a comment's counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    /// The post whose `comment_count` it moves.
    pub post: PostId,
    /// The comment.
    pub comment: CommentId,
    /// Its top-level parent, for a reply.
    pub parent: Option<CommentId>,
    /// Its author (who sees it counted whatever its status).
    pub author: UserId,
    /// +1: counted from now on (approved); -1: no longer counted (held or hidden).
    pub delta: i8,
}

impl Move {
    /// Does it add the comment to the counter? Then, as the comment's first outstanding move,
    /// the counter still leaves the comment out.
    pub fn adds(&self) -> bool {
        self.delta > 0
    }
}

/// How status change `op` of the comment `stored` (as read now; `parent`: a reply's parent)
/// moves its counting, if it does: the delta of the comment's own event in the plan the
/// engines will apply. `None` for other operations, and for a change that moves nothing (to
/// the status it has, a hold of a comment no longer visible, a reply under a closed thread).
pub fn planned_move(op: &CommentOp, stored: &CommentRecord, parent: Option<&CommentRecord>) -> Option<Move> {
    if !matches!(op, CommentOp::SetStatus { .. }) || op.id() != Some(stored.id) {
        return None;
    }
    let thread = Thread { parent: parent.cloned(), ..Thread::default() };
    let plan = transition(op, Before::Stored(stored.clone(), thread), 0);
    let own = Target::comment(stored.id.0);
    plan.events.iter().find(|e| e.target == own && e.delta != 0).map(|e| Move {
        post: stored.post,
        comment: stored.id,
        parent: stored.parent,
        author: stored.author,
        delta: e.delta,
    })
}

/// One registered move: outstanding (`settled: false`, `at` when registered) or settled
/// (`at` when settled).
#[derive(Debug, Clone, Copy)]
struct Entry {
    m: Move,
    at: u64,
    settled: bool,
}

/// The moves registered and not settled yet, by post in registration order, and the last
/// settled move of each comment for [`SETTLED_GRACE_MS`]. See the module documentation.
#[derive(Debug, Default)]
pub struct Uncounted {
    by_post: HashMap<PostId, Vec<Entry>>,
    len: usize,
}

impl Uncounted {
    /// Nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many moves are kept (outstanding and settled).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Register `m`, made at `now_ms`. `false` when it repeats the comment's last outstanding
    /// move: that change is registered already, and its one event will settle it once.
    pub fn register(&mut self, m: Move, now_ms: u64) -> bool {
        self.expire(now_ms);
        let list = self.by_post.entry(m.post).or_default();
        let last = list.iter().rev().find(|x| !x.settled && x.m.comment == m.comment);
        if last.is_some_and(|x| x.m.delta == m.delta) {
            return false;
        }
        list.push(Entry { m, at: now_ms, settled: false });
        self.len += 1;
        while self.len > UNCOUNTED_MAX {
            self.drop_oldest();
        }
        true
    }

    /// Take back a move whose write changed nothing (the latest outstanding one equal to `m`).
    pub fn withdraw(&mut self, m: Move) {
        if let Some(list) = self.by_post.get_mut(&m.post)
            && let Some(i) = list.iter().rposition(|x| !x.settled && x.m == m)
        {
            list.remove(i);
            self.len -= 1;
            if list.is_empty() {
                self.by_post.remove(&m.post);
            }
        }
    }

    /// A commit holding `events` (in log order) reached the counter values read with these
    /// moves: each status change of a comment settles the comment's first outstanding move
    /// when it moves the count the same way (other changes, unregistered ones, pass by). A
    /// settled move is kept [`SETTLED_GRACE_MS`] as the comment's last.
    pub fn settle(&mut self, events: &[Event], now_ms: u64) {
        for e in events {
            if e.kind != EventKind::CommentStatusChanged
                || e.target.kind != TargetKind::Comment
                || e.delta == 0
            {
                continue;
            }
            let Some(list) = self.by_post.get_mut(&PostId(e.post)) else { continue };
            let Some(i) = list.iter().position(|x| !x.settled && x.m.comment.0 == e.target.id) else {
                continue;
            };
            if list[i].m.delta != e.delta {
                continue;
            }
            // Kept as the comment's last settled move, in place of an earlier one.
            let m = list.remove(i).m;
            let before = list.len();
            list.retain(|x| !(x.settled && x.m.comment == m.comment));
            list.push(Entry { m, at: now_ms, settled: true });
            self.len -= before - (list.len() - 1);
        }
        self.expire(now_ms);
    }

    /// For each of `viewer`'s comments on `post` with a move kept (those past
    /// [`UNCOUNTED_TTL_MS`] or [`SETTLED_GRACE_MS`] at `now_ms` left out): its move, and
    /// whether it counts for them on top of the counter. With outstanding moves, the first
    /// decides: the counter leaves the comment out exactly when that move [`Move::adds`] it.
    /// Otherwise the counter has the comment's last settled move: it counts on top exactly
    /// when that move took it out.
    pub fn own_view(&self, post: PostId, viewer: UserId, now_ms: u64) -> Vec<(Move, bool)> {
        let mine: Vec<&Entry> = self
            .by_post
            .get(&post)
            .into_iter()
            .flatten()
            .filter(|x| x.m.author == viewer && !x.expired(now_ms))
            .collect();
        let mut out: Vec<(Move, bool)> = Vec::new();
        for x in mine.iter().filter(|x| !x.settled) {
            if !out.iter().any(|(m, _)| m.comment == x.m.comment) {
                out.push((x.m, x.m.adds()));
            }
        }
        for x in mine.iter().filter(|x| x.settled) {
            if !out.iter().any(|(m, _)| m.comment == x.m.comment) {
                out.push((x.m, !x.m.adds()));
            }
        }
        out
    }

    fn expire(&mut self, now_ms: u64) {
        if self.len == 0 {
            return;
        }
        let mut dropped = 0;
        self.by_post.retain(|_, list| {
            let before = list.len();
            list.retain(|x| !x.expired(now_ms));
            dropped += before - list.len();
            !list.is_empty()
        });
        self.len -= dropped;
    }

    fn drop_oldest(&mut self) {
        let oldest = self
            .by_post
            .iter()
            .flat_map(|(p, list)| list.iter().enumerate().map(move |(i, x)| (x.at, *p, i)))
            .min_by_key(|(at, _, _)| *at);
        if let Some((_, post, i)) = oldest
            && let Some(list) = self.by_post.get_mut(&post)
        {
            list.remove(i);
            self.len -= 1;
            if list.is_empty() {
                self.by_post.remove(&post);
            }
        }
    }
}

impl Entry {
    fn expired(&self, now_ms: u64) -> bool {
        let keep = if self.settled { SETTLED_GRACE_MS } else { UNCOUNTED_TTL_MS };
        self.at.saturating_add(keep) <= now_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comment::appeal::HeldBy;
    use crate::comment::status::CommentStatus;
    use crate::write::QueueChange;

    fn record(id: u64, parent: Option<u64>, status: CommentStatus) -> CommentRecord {
        CommentRecord {
            id: CommentId(id),
            post: PostId(1),
            author: UserId(11),
            post_author: UserId(7),
            parent: parent.map(CommentId),
            reply_to_user: None,
            status,
            text: "text".into(),
            simhash: 0,
        }
    }

    fn set(id: u64, status: CommentStatus, queue: QueueChange) -> CommentOp {
        CommentOp::SetStatus { id: CommentId(id), status, actor: UserId(7), queue }
    }

    fn mv(comment: u64, delta: i8) -> Move {
        Move { post: PostId(1), comment: CommentId(comment), parent: None, author: UserId(11), delta }
    }

    fn changed(seq: u64, comment: u64, delta: i8) -> Event {
        Event {
            seq,
            kind: EventKind::CommentStatusChanged,
            target: Target::comment(comment),
            target_author: UserId(7),
            actor: UserId(11),
            ts_ms: 0,
            post: 1,
            parent: 0,
            delta,
            mention: None,
            trace: None,
        }
    }

    #[test]
    fn approvals_add_holds_take_away_and_changes_that_move_nothing_are_no_moves() {
        use CommentStatus::*;
        let approve = set(5, Visible, QueueChange::Leave);
        let hold = set(5, Pending, QueueChange::Hold(HeldBy::Reports));
        let hide = set(5, HiddenByFilter, QueueChange::Leave);
        assert_eq!(planned_move(&approve, &record(5, None, Pending), None), Some(mv(5, 1)));
        assert_eq!(planned_move(&hold, &record(5, None, Visible), None), Some(mv(5, -1)));
        assert_eq!(planned_move(&hide, &record(5, None, Visible), None), Some(mv(5, -1)));
        // Held already (a hold only applies to a visible comment), or to the same status.
        assert_eq!(planned_move(&hold, &record(5, None, HiddenByFilter), None), None);
        assert_eq!(planned_move(&approve, &record(5, None, Visible), None), None);
        assert_eq!(planned_move(&hide, &record(5, None, Pending), None), None);
        // A reply counts only under an open thread.
        let reply = record(5, Some(4), Restricted);
        let open = record(4, None, Visible);
        let closed = record(4, None, Pending);
        let want = Move { parent: Some(CommentId(4)), ..mv(5, 1) };
        assert_eq!(planned_move(&approve, &reply, Some(&open)), Some(want));
        assert_eq!(planned_move(&approve, &reply, Some(&closed)), None);
        // Only status changes of the comment read.
        assert_eq!(planned_move(&set(6, Visible, QueueChange::Leave), &record(5, None, Pending), None), None);
        let delete = CommentOp::Delete { id: CommentId(5), actor: UserId(11) };
        assert_eq!(planned_move(&delete, &record(5, None, Visible), None), None);
    }

    #[test]
    fn the_first_outstanding_move_of_a_comment_decides_until_its_event_is_committed() {
        let mut u = Uncounted::default();
        assert!(u.register(mv(5, 1), 0));
        assert!(!u.register(mv(5, 1), 1), "the same approval twice is one move");
        assert!(u.register(mv(5, -1), 2), "held again before the approval was counted");
        assert!(u.register(Move { author: UserId(12), ..mv(6, -1) }, 2));
        assert_eq!(u.len(), 3);
        // The counter still leaves comment 5 out: it counts on top for its author only.
        assert_eq!(u.own_view(PostId(1), UserId(11), 3), [(mv(5, 1), true)]);
        assert_eq!(u.own_view(PostId(2), UserId(11), 3), []);
        // An unregistered change, and a change of another post, settle nothing.
        u.settle(&[changed(1, 5, -1), Event { post: 2, ..changed(2, 5, 1) }], 4);
        assert_eq!(u.len(), 3);
        // The approval is committed: now the counter has it, and the hold decides.
        u.settle(&[changed(3, 5, 1)], 5);
        assert_eq!(u.own_view(PostId(1), UserId(11), 6), [(mv(5, -1), false)]);
        // Both committed: the last one, a hold, took it out of the counter.
        u.settle(&[changed(4, 5, -1), changed(4, 6, -1)], 7);
        assert_eq!(u.len(), 2, "one settled move per comment");
        assert_eq!(u.own_view(PostId(1), UserId(11), 8), [(mv(5, -1), true)]);
        assert!(u.own_view(PostId(1), UserId(11), 7 + SETTLED_GRACE_MS).is_empty());
        // A new move decides over a settled one.
        assert!(u.register(mv(5, 1), 9));
        assert_eq!(u.own_view(PostId(1), UserId(11), 10), [(mv(5, 1), true)]);
        u.settle(&[], 7 + SETTLED_GRACE_MS);
        assert_eq!(u.len(), 1, "settled moves expire after their grace");
    }

    #[test]
    fn a_move_whose_write_changed_nothing_is_withdrawn() {
        let mut u = Uncounted::default();
        u.register(mv(5, -1), 0);
        u.register(mv(5, 1), 1);
        u.withdraw(mv(5, 1));
        assert_eq!(u.own_view(PostId(1), UserId(11), 2), [(mv(5, -1), false)]);
        u.withdraw(mv(5, 1));
        assert_eq!(u.len(), 1, "nothing else is taken back");
        u.withdraw(mv(5, -1));
        assert!(u.is_empty());
    }

    #[test]
    fn moves_expire_and_are_bounded() {
        let mut u = Uncounted::default();
        u.register(mv(5, 1), 1_000);
        assert_eq!(u.own_view(PostId(1), UserId(11), 1_000 + UNCOUNTED_TTL_MS - 1).len(), 1);
        assert!(u.own_view(PostId(1), UserId(11), 1_000 + UNCOUNTED_TTL_MS).is_empty());
        u.settle(&[], 1_000 + UNCOUNTED_TTL_MS);
        assert!(u.is_empty(), "expired moves are dropped");
        for c in 0..UNCOUNTED_MAX as u64 + 5 {
            u.register(Move { post: PostId(c % 7), ..mv(100 + c, 1) }, 2_000 + c);
        }
        assert_eq!(u.len(), UNCOUNTED_MAX);
        let kept = u.own_view(PostId(0), UserId(11), 3_000);
        assert!(kept.iter().all(|(m, _)| m.comment.0 >= 105), "oldest first");
    }
}
