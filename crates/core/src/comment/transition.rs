//! Comment changes as state transitions: the one place that decides what a create, a status
//! change or a delete does to a comment, and what it tells the counters.
//!
//! Like [`crate::like::transition`], this is pure. An engine reads the rows an operation
//! involves (the comment, as stored or as left by earlier operations of the same batch, and
//! the facts of its thread that [`thread_reads`] asks for), calls [`transition`], and writes
//! what the returned [`Plan`] says: the row writes and the events, in order. The engine never
//! decides itself whether something changed, what a deletion leaves or how counts move, so
//! every engine applies the same rules.
//!
//! The rules:
//! - a create stores the comment under the ID the engine assigned; a reply only while its
//!   parent, as read inside the write path, is a stored top-level comment of the same post
//!   (a placeholder too; else not found): a reply and its parent's delete are serialized
//!   there, so a reply never hangs under a removed parent;
//! - a status change of a deleted comment, or to the status it already has, changes nothing;
//! - a delete of a deleted comment changes nothing; otherwise a top-level comment with replies
//!   (of any status) becomes a placeholder with empty text (a public one only if it was
//!   visible, see [`CommentStatus::deleted_from`]), and anything else is removed; removing
//!   the last reply of a placeholder removes the placeholder too;
//! - threads follow their parent: a comment is counted ([`counted`]) when it is visible and,
//!   for a reply, while its top-level parent opens its thread
//!   ([`CommentStatus::opens_thread`]: visible, or the public placeholder);
//! - every real change emits exactly one event, whose actor is the comment's author (whoever
//!   decided, see `docs/events.md`) and whose delta is how the change moved the comment's
//!   counting ([`visibility_delta`]): +1, -1 or 0, applied to the post's `comment_count`
//!   and, for a reply, to its parent's `reply_count`;
//! - a status change that opens or closes a parent's thread also emits, for each of its
//!   visible replies, a `CommentStatusChanged` event of that reply with delta +1 or -1: the
//!   reply's own status is unchanged, but whether others see it and count it changed with
//!   its parent. One event per reply keeps every delta within +1/-1, and lets the consumers
//!   of the log (counters, notifications, trending, the export) treat it as any other change
//!   of a comment's visibility.

use crate::comment::appeal::HeldBy;
use crate::comment::record::CommentRecord;
use crate::comment::status::CommentStatus;
use crate::comment::thread::counted;
use crate::event::{Event, EventKind};
use crate::ids::{CommentId, UserId};
use crate::like::Target;
use crate::write::{CommentOp, CommentOutcome, QueueChange};

/// A reply in status visible under a top-level comment, as the engine read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VisibleReply {
    /// The reply.
    pub id: CommentId,
    /// Its author (the actor of its events).
    pub author: UserId,
    /// The user it @mentions (its record's `reply_to_user`, carried by its events).
    pub mention: Option<UserId>,
}

/// Facts about a comment's thread, read by the engine only when [`thread_reads`] asks for
/// them (the default, empty, otherwise). Replies are counted with any status, including
/// those created earlier in the same batch and not those removed earlier in it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Thread {
    /// For a top-level comment: replies are stored under it.
    pub has_replies: bool,
    /// For a reply: its parent, as stored or as left by earlier operations of the batch
    /// (`None` when missing).
    pub parent: Option<CommentRecord>,
    /// For a reply: other replies are stored under its parent.
    pub has_siblings: bool,
    /// For a top-level comment: its replies in status visible, as stored or as left by
    /// earlier operations of the batch, in ID order.
    pub visible_replies: Vec<VisibleReply>,
}

/// Which facts of a comment's [`Thread`] planning an operation needs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadReads {
    /// [`Thread::has_replies`]: a top-level comment's delete (does it leave a placeholder?).
    pub has_replies: bool,
    /// [`Thread::parent`]: a reply's delete or status change (is it counted, does it take
    /// its parent's placeholder along?).
    pub parent: bool,
    /// [`Thread::has_siblings`]: a reply's delete.
    pub siblings: bool,
    /// [`Thread::visible_replies`]: a top-level comment's status change that opens or closes
    /// its thread.
    pub visible_replies: bool,
}

/// What an operation starts from, as the engine read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Before {
    /// A create: the ID the engine assigned to the new comment and, for a reply, the parent
    /// it names ([`create_parent`]) as stored or as left by earlier operations of the same
    /// batch (`None`: missing, or a top-level create).
    New(CommentId, Option<CommentRecord>),
    /// The comment the operation names does not exist.
    Missing,
    /// The comment the operation names, as stored or as left by earlier operations of the
    /// same batch, with the facts of its thread.
    Stored(CommentRecord, Thread),
}

/// A row write an engine makes to apply a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowWrite {
    /// Store a new comment with its index entries.
    Insert(CommentRecord),
    /// Replace a stored comment's mutable fields (status and text) with these.
    Update(CommentRecord),
    /// Remove a stored comment and its index entries (the record as it was).
    Remove(CommentRecord),
}

/// What one comment operation does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The answer to the caller.
    pub outcome: CommentOutcome,
    /// The row writes, in order (none when nothing changed).
    pub writes: Vec<RowWrite>,
    /// The events to append, in order, each with `seq` 0 for the engine to assign (none when
    /// nothing changed).
    pub events: Vec<Event>,
}

impl Plan {
    fn not_found() -> Self {
        Plan { outcome: CommentOutcome::NotFound, writes: Vec::new(), events: Vec::new() }
    }

    fn unchanged(stored: CommentRecord) -> Self {
        Plan { outcome: CommentOutcome::Done(Some(stored)), writes: Vec::new(), events: Vec::new() }
    }

    /// Did the operation change anything?
    pub fn changed(&self) -> bool {
        !self.writes.is_empty()
    }
}

/// What planning `op` on `stored` needs to know of its thread. Nothing for a deleted
/// comment (nothing changes it) or a create ([`create_parent`] names what it reads); a
/// delete asks whether a top-level comment has replies, and for a reply its parent and
/// siblings; a reply's status change asks for its parent; a top-level comment's status
/// change that opens or closes its thread asks for its visible replies. Engines skip the
/// reads they are not asked for.
pub fn thread_reads(op: &CommentOp, stored: &CommentRecord) -> ThreadReads {
    let reply = stored.parent.is_some();
    match op {
        _ if stored.status.is_deleted() => ThreadReads::default(),
        CommentOp::Delete { .. } => {
            ThreadReads { has_replies: !reply, parent: reply, siblings: reply, visible_replies: false }
        }
        CommentOp::SetStatus { status, .. } if *status != stored.status => ThreadReads {
            parent: reply,
            visible_replies: !reply && stored.status.opens_thread() != status.opens_thread(),
            ..ThreadReads::default()
        },
        CommentOp::SetStatus { .. } | CommentOp::Create(..) => ThreadReads::default(),
    }
}

/// The parent a create must read inside the write path: the reply's top-level comment.
pub fn create_parent(op: &CommentOp) -> Option<CommentId> {
    match op {
        CommentOp::Create(rec, _) => rec.parent,
        _ => None,
    }
}

/// How a change from `before` to `after` (`None`: no such row) under `parent` (a reply's
/// parent, see [`counted`]) moves the counts: +1 when the comment became counted, -1 when
/// it stopped being counted, else 0.
pub fn visibility_delta(
    before: Option<&CommentRecord>,
    after: Option<&CommentRecord>,
    parent: Option<&CommentRecord>,
) -> i8 {
    let n = |r: Option<&CommentRecord>| i8::from(r.is_some_and(|r| counted(r, parent)));
    n(after) - n(before)
}

/// Plan `op` from the state `before` the engine read, at `now_ms` (the events' time).
///
/// A `before` that does not fit the operation (a create without a new ID, a change with
/// one) plans nothing and answers not found: engines build `before` from
/// [`CommentOp::id`], so this does not happen.
pub fn transition(op: &CommentOp, before: Before, now_ms: u64) -> Plan {
    match (op, before) {
        (CommentOp::Create(rec, _), Before::New(id, parent)) => create(rec, id, parent, now_ms),
        // A hold for review applies only to a comment still visible: a report must not undo
        // a moderator's hide, nor hold again a comment already held.
        (CommentOp::SetStatus { queue: QueueChange::Hold(_), .. }, Before::Stored(old, _))
            if old.status != CommentStatus::Visible =>
        {
            Plan::unchanged(old)
        }
        (CommentOp::SetStatus { status, .. }, Before::Stored(old, thread)) => {
            set_status(old, *status, thread, now_ms)
        }
        (CommentOp::Delete { .. }, Before::Stored(old, thread)) => delete(old, thread, now_ms),
        (_, Before::New(..) | Before::Missing) | (CommentOp::Create(..), Before::Stored(..)) => {
            Plan::not_found()
        }
    }
}

/// The review state an operation writes beside its [`Plan`], in the same atomic write: the
/// comment's review-queue entry (`queued`: enter or leave) and why it is held (`held_by`,
/// written when `Some`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Review {
    /// `Some(true)`: the comment enters the queue; `Some(false)`: it leaves it.
    pub queued: Option<bool>,
    /// Why the comment is held, to record.
    pub held_by: Option<HeldBy>,
}

/// The review state `op` writes once planned as `plan`:
/// - a create held by a moderation layer: the reason and a queue entry;
/// - a hold for review ([`QueueChange::Hold`]) of a stored comment: a queue entry, with the
///   reason when the hold changed the status (a comment held or hidden meanwhile keeps its
///   own reason); nothing for a deleted one;
/// - a decision ([`QueueChange::Leave`]) of a stored comment: it leaves the queue.
pub fn review(op: &CommentOp, plan: &Plan) -> Review {
    let CommentOutcome::Done(Some(r)) = &plan.outcome else { return Review::default() };
    match op {
        CommentOp::Create(_, Some(h)) => Review { queued: Some(true), held_by: Some(*h) },
        CommentOp::SetStatus { queue: QueueChange::Hold(h), .. } if !r.status.is_deleted() => {
            Review { queued: Some(true), held_by: plan.changed().then_some(*h) }
        }
        CommentOp::SetStatus { queue: QueueChange::Leave, .. } => {
            Review { queued: Some(false), held_by: None }
        }
        _ => Review::default(),
    }
}

fn create(rec: &CommentRecord, id: CommentId, parent: Option<CommentRecord>, now_ms: u64) -> Plan {
    if let Some(want) = rec.parent {
        // A placeholder still stands: the reply keeps it (and the thread) in place.
        let standing =
            parent.as_ref().is_some_and(|p| p.id == want && p.parent.is_none() && p.post == rec.post);
        if !standing {
            return Plan::not_found();
        }
    }
    let created = CommentRecord { id, ..rec.clone() };
    let delta = visibility_delta(None, Some(&created), parent.as_ref());
    let event = comment_event(EventKind::CommentCreated, &created, delta, now_ms);
    Plan {
        outcome: CommentOutcome::Done(Some(created.clone())),
        writes: vec![RowWrite::Insert(created)],
        events: vec![event],
    }
}

fn set_status(old: CommentRecord, status: CommentStatus, thread: Thread, now_ms: u64) -> Plan {
    if old.status == status || old.status.is_deleted() {
        return Plan::unchanged(old);
    }
    let new = CommentRecord { status, ..old.clone() };
    let delta = visibility_delta(Some(&old), Some(&new), thread.parent.as_ref());
    let mut events = vec![comment_event(EventKind::CommentStatusChanged, &new, delta, now_ms)];
    // The parent's thread opened or closed: its visible replies move with it.
    if old.parent.is_none() && old.status.opens_thread() != status.opens_thread() {
        let delta = if status.opens_thread() { 1 } else { -1 };
        events.extend(thread.visible_replies.iter().map(|r| reply_event(&new, r, delta, now_ms)));
    }
    Plan { outcome: CommentOutcome::Done(Some(new.clone())), writes: vec![RowWrite::Update(new)], events }
}

fn delete(old: CommentRecord, thread: Thread, now_ms: u64) -> Plan {
    if old.status.is_deleted() {
        return Plan::unchanged(old);
    }
    // A top-level comment with replies keeps its place in the thread; replies are never
    // parents (threads are two levels), so a reply is always removed. The placeholder keeps
    // its thread as open or closed as it was (`deleted_from`), so no reply's count moves.
    let placeholder = (old.parent.is_none() && thread.has_replies).then(|| CommentRecord {
        status: old.status.deleted_from(),
        text: String::new(),
        ..old.clone()
    });
    let delta = visibility_delta(Some(&old), placeholder.as_ref(), thread.parent.as_ref());
    let mut events = vec![comment_event(EventKind::CommentDeleted, &old, delta, now_ms)];
    let mut writes = vec![match &placeholder {
        Some(p) => RowWrite::Update(p.clone()),
        None => RowWrite::Remove(old.clone()),
    }];
    // The last reply of a placeholder takes it along: a placeholder only keeps a thread's
    // shape, and with no reply left there is nothing to keep.
    if let Some(parent) =
        thread.parent.filter(|p| old.parent == Some(p.id) && p.status.is_deleted() && !thread.has_siblings)
    {
        let delta = visibility_delta(Some(&parent), None, None);
        events.push(comment_event(EventKind::CommentDeleted, &parent, delta, now_ms));
        writes.push(RowWrite::Remove(parent));
    }
    Plan { outcome: CommentOutcome::Done(placeholder), writes, events }
}

/// The event of a change of `subject` that moves the counts by `delta`.
fn comment_event(kind: EventKind, subject: &CommentRecord, delta: i8, now_ms: u64) -> Event {
    Event {
        seq: 0,
        kind,
        target: Target::comment(subject.id.0),
        target_author: subject.post_author,
        actor: subject.author,
        ts_ms: now_ms,
        post: subject.post.0,
        parent: subject.parent.map_or(0, |p| p.0),
        delta,
        mention: subject.reply_to_user,
        trace: None,
    }
}

/// The event of `reply`, under `parent`, whose thread opened (`delta` +1) or closed (-1).
fn reply_event(parent: &CommentRecord, reply: &VisibleReply, delta: i8, now_ms: u64) -> Event {
    Event {
        seq: 0,
        kind: EventKind::CommentStatusChanged,
        target: Target::comment(reply.id.0),
        target_author: parent.post_author,
        actor: reply.author,
        ts_ms: now_ms,
        post: parent.post.0,
        parent: parent.id.0,
        delta,
        mention: reply.mention,
        trace: None,
    }
}

#[cfg(test)]
mod tests;
