//! Notifications as a pure state machine: engagement events in, inbox changes out.
//!
//! - Like notifications are held for `hold_ms` (default 5 s) so a quick unlike cancels them;
//!   comment notifications go out at once; no one is notified of their own actions.
//! - Changes aggregate per (recipient, post, kind): the store keeps each actor's distinct
//!   contributions to an item (the liked comment, the comment or reply written; a post like
//!   is one), so a redelivered event is a no-op, and a withdrawal (an unlike, a deleted or
//!   hidden comment) takes out that contribution only: an actor leaves the item when none of
//!   theirs remains.
//! - A comment hidden or deleted later withdraws its notification, from the @mentioned user
//!   of a reply too: the reply's events name that user (event format 3). Older events have
//!   only the reply's record, gone once it is deleted, and what the holder remembers of the
//!   mention (for a day, see [`MENTION_MEMORY_MS`]).
//! - The consumer may only commit its log offset below the oldest held event
//!   ([`Holder::safe_offset`]): a crash re-reads and re-holds what was not delivered.
//!
//! Time is a parameter (`now_ms`), so tests drive it step by step without sleeping.

use crate::event::{Event, EventKind};
use crate::ids::{CommentId, PostId, UserId};
use crate::like::TargetKind;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// One inbox item as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifItem {
    /// Item ID (unique).
    pub id: u64,
    /// Recipient, post, kind.
    pub key: NotifKey,
    /// The latest comment concerned, if any.
    pub comment: Option<CommentId>,
    /// Distinct actors.
    pub actor_count: u64,
    /// Most recent actors, newest first (at most 8).
    pub recent: Vec<UserId>,
    /// Its last change in the inbox, ms since the epoch: the stamp of the batch that changed
    /// it ([`next_stamp`]), strictly increasing over an inbox's changes.
    pub updated_ms: u64,
}

/// What a notification is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NotifKind {
    /// Someone liked your post.
    PostLiked,
    /// Someone liked your comment.
    CommentLiked,
    /// Someone commented on your post.
    Commented,
    /// Someone replied to your comment or mentioned you in a reply.
    Replied,
}

impl NotifKind {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            NotifKind::PostLiked => "post_liked",
            NotifKind::CommentLiked => "comment_liked",
            NotifKind::Commented => "commented",
            NotifKind::Replied => "replied",
        }
    }
    /// Stable code.
    pub fn code(self) -> u8 {
        match self {
            NotifKind::PostLiked => 1,
            NotifKind::CommentLiked => 2,
            NotifKind::Commented => 3,
            NotifKind::Replied => 4,
        }
    }
    /// Inverse of [`NotifKind::code`].
    pub fn from_code(c: u8) -> Option<Self> {
        match c {
            1 => Some(NotifKind::PostLiked),
            2 => Some(NotifKind::CommentLiked),
            3 => Some(NotifKind::Commented),
            4 => Some(NotifKind::Replied),
            _ => None,
        }
    }
    fn verb(self) -> &'static str {
        match self {
            NotifKind::PostLiked => "liked your post",
            NotifKind::CommentLiked => "liked your comment",
            NotifKind::Commented => "commented on your post",
            NotifKind::Replied => "replied to your comment",
        }
    }
}

/// One inbox item's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NotifKey {
    /// Who is notified.
    pub recipient: UserId,
    /// The post concerned.
    pub post: PostId,
    /// What happened.
    pub kind: NotifKind,
}

/// One consumer's part of a notification commit: its writer fence, checked, and the offset
/// it moves to (`NotificationStore::commit_notifications`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifCommit {
    /// The consumer (`notifications`, or a partition's `notifications.p7`).
    pub consumer: String,
    /// Its writer fence, as taken by its writer.
    pub fence: u64,
    /// The offset it moves to.
    pub offset: u64,
}

/// A change to an inbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Add `actor` to the item (no-op if already there).
    Add {
        /// The item.
        key: NotifKey,
        /// Who acted.
        actor: UserId,
        /// The comment concerned (comment likes, comments, replies).
        comment: Option<CommentId>,
        /// When.
        ts_ms: u64,
    },
    /// Withdraw `actor`'s contribution `comment` from the item (no-op if absent): the actor
    /// leaves it when none of their contributions remains.
    Remove {
        /// The item.
        key: NotifKey,
        /// Who is withdrawn.
        actor: UserId,
        /// The comment concerned, as its [`Change::Add`] named it.
        comment: Option<CommentId>,
    },
}

impl Change {
    /// The item changed.
    pub fn key(&self) -> NotifKey {
        match self {
            Change::Add { key, .. } | Change::Remove { key, .. } => *key,
        }
    }

    /// The actor added or withdrawn.
    pub fn actor(&self) -> UserId {
        match self {
            Change::Add { actor, .. } | Change::Remove { actor, .. } => *actor,
        }
    }

    /// The contribution added or withdrawn, as stored beside the actor: the comment's ID
    /// (the comment liked, the comment or reply written), 0 for a post like.
    pub fn source(&self) -> u64 {
        match self {
            Change::Add { comment, .. } | Change::Remove { comment, .. } => comment.map_or(0, |c| c.0),
        }
    }
}

/// What the consumer needs to know about a comment event's comment (from the comment store).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommentContext {
    /// Who wrote the comment.
    pub author: UserId,
    /// The author of its top-level parent, for a reply.
    pub parent_author: Option<UserId>,
    /// The user a reply @mentions.
    pub reply_to_user: Option<UserId>,
}

/// One held like: the item, the liker, and the liked comment's ID (0 for a post), so the
/// likes of two comments of one author on one post are held and cancelled apart.
type Slot = (NotifKey, UserId, u64);

#[derive(Debug, Clone, Copy)]
struct Held {
    due_ms: u64,
    seq: u64,
    comment: Option<CommentId>,
    ts_ms: u64,
}

/// Holds like notifications and turns events into inbox changes.
///
/// Held notifications are indexed three ways so that every step costs O(log n) per event
/// and per release, not O(held): a viral post holds hundreds of thousands at once (5 s of
/// likes), and the notifier steps several times a second.
#[derive(Debug)]
pub struct Holder {
    hold_ms: u64,
    pending: BTreeMap<Slot, Held>,
    /// Release order: (due, seq) first.
    by_due: BTreeSet<(u64, u64, Slot)>,
    /// Log order, for the committable offset: the oldest held event first.
    by_seq: BTreeSet<(u64, Slot)>,
    /// Events up to this position may be read again after an earlier run delivered them
    /// (see [`Holder::replaying_upto`]).
    replayed_upto: u64,
    /// Replies withdrawn after their top-level parent's record was gone (a reply and its
    /// parent deleted in quick succession), by (parent, seq): who must be withdrawn from the
    /// parent author's `replied` item is known, whose item is not until the parent's own
    /// event (always later in the log: a parent is removed with or after its last reply)
    /// names its author. Each pins the committable offset below it, as a held like does.
    orphans: BTreeMap<(u64, u64), Orphan>,
    /// The user each recent reply @mentions, by reply, as read from its record while it was
    /// stored: a deleted reply's record is removed, so its deletion cannot name the mentioned
    /// user whose `replied` item it must leave. Kept [`MENTION_MEMORY_MS`] (event time), at
    /// most [`MENTION_MEMORY_MAX`] replies.
    mentions: BTreeMap<u64, Mention>,
    /// [`Holder::mentions`] by (time, reply), oldest first, to forget them in order.
    mentions_by_age: BTreeSet<(u64, u64)>,
}

/// The @mention of a reply (see `Holder::mentions`).
#[derive(Debug, Clone, Copy)]
struct Mention {
    user: UserId,
    ts_ms: u64,
}

/// How long (event time) a reply's @mention is remembered for its deletion to withdraw it.
pub const MENTION_MEMORY_MS: u64 = 24 * 60 * 60 * 1000;

/// The most replies whose @mention is remembered at once (the oldest are forgotten first):
/// about 64 bytes each.
pub const MENTION_MEMORY_MAX: usize = 200_000;

/// A withdrawn reply waiting for its parent's author (see `Holder::orphans`).
#[derive(Debug, Clone, Copy)]
struct Orphan {
    post: PostId,
    replier: UserId,
    reply: CommentId,
    ts_ms: u64,
}

/// How long (in event time) a withdrawn reply waits for its parent's event: that event is
/// written within milliseconds of it, so one that never comes (a parent gone some other way)
/// must not pin the offset for ever.
const ORPHAN_WAIT_MS: u64 = 60_000;

impl Holder {
    /// A holder with the given hold window.
    pub fn new(hold_ms: u64) -> Self {
        Holder {
            hold_ms,
            pending: BTreeMap::new(),
            by_due: BTreeSet::new(),
            by_seq: BTreeSet::new(),
            replayed_upto: 0,
            orphans: BTreeMap::new(),
            mentions: BTreeMap::new(),
            mentions_by_age: BTreeSet::new(),
        }
    }

    /// Remember (or forget) the @mention of the reply a comment event concerns, as its record
    /// reads now, and forget mentions past [`MENTION_MEMORY_MS`] or [`MENTION_MEMORY_MAX`].
    fn remember_mention(&mut self, e: &Event, c: CommentContext) {
        let reply = e.target.id;
        if let Some(m) = c.reply_to_user
            && e.parent != 0
        {
            if let Some(old) = self.mentions.insert(reply, Mention { user: m, ts_ms: e.ts_ms }) {
                self.mentions_by_age.remove(&(old.ts_ms, reply));
            }
            self.mentions_by_age.insert((e.ts_ms, reply));
        }
        let horizon = e.ts_ms.saturating_sub(MENTION_MEMORY_MS);
        while let Some(&(ts, id)) = self.mentions_by_age.first() {
            if ts >= horizon && self.mentions_by_age.len() <= MENTION_MEMORY_MAX {
                break;
            }
            self.mentions_by_age.pop_first();
            self.mentions.remove(&id);
        }
    }

    /// The @mention of a deleted reply whose record is gone, from memory (see
    /// `Holder::mentions`); forgotten, since a deleted reply never comes back.
    fn deleted_reply_mention(&mut self, e: &Event, c: CommentContext) -> Option<UserId> {
        if e.kind != EventKind::CommentDeleted || e.parent == 0 || c.reply_to_user.is_some() {
            return None;
        }
        let m = self.mentions.remove(&e.target.id)?;
        self.mentions_by_age.remove(&(m.ts_ms, e.target.id));
        Some(m.user)
    }

    /// Events up to `seq` are read again and may have been delivered before: by an earlier
    /// run (a restart resumes from the committed offset, below notifications it had
    /// released) or before a failed commit. An unlike that cancels such a like while it is
    /// held again also withdraws it, since the earlier delivery cannot be told from here
    /// (removing an actor that is not there changes nothing).
    pub fn replaying_upto(&mut self, seq: u64) {
        self.replayed_upto = self.replayed_upto.max(seq);
    }

    /// Up to where events are read again (0: none).
    pub fn replayed_upto(&self) -> u64 {
        self.replayed_upto
    }

    /// Forget everything held (the caller re-reads from its committed offset), remembering
    /// that events up to `processed` may have been delivered.
    pub fn forget(&mut self, processed: u64) {
        let replayed = self.replayed_upto.max(processed);
        *self = Holder::new(self.hold_ms);
        self.replayed_upto = replayed;
    }

    fn hold(&mut self, slot: Slot, held: Held) {
        if let Some(old) = self.pending.insert(slot, held) {
            self.unindex(slot, &old);
        }
        self.by_due.insert((held.due_ms, held.seq, slot));
        self.by_seq.insert((held.seq, slot));
    }

    fn cancel(&mut self, slot: Slot) -> Option<Held> {
        let old = self.pending.remove(&slot)?;
        self.unindex(slot, &old);
        Some(old)
    }

    fn unindex(&mut self, slot: Slot, h: &Held) {
        self.by_due.remove(&(h.due_ms, h.seq, slot));
        self.by_seq.remove(&(h.seq, slot));
    }

    /// Held notifications not yet released or cancelled.
    pub fn held(&self) -> usize {
        self.pending.len()
    }

    fn recipients(e: &Event, ctx: Option<CommentContext>) -> Vec<(UserId, NotifKind)> {
        match (e.kind, e.target.kind) {
            (EventKind::LikeCreated | EventKind::LikeRemoved, TargetKind::Post) => {
                vec![(e.target_author, NotifKind::PostLiked)]
            }
            (EventKind::LikeCreated | EventKind::LikeRemoved, TargetKind::Comment) => {
                vec![(e.target_author, NotifKind::CommentLiked)]
            }
            (_, _) => match ctx {
                // Comment events: the post's author for a top-level comment; the parent's
                // author and the @mentioned user for a reply.
                Some(_) if e.parent == 0 => vec![(e.target_author, NotifKind::Commented)],
                Some(c) => {
                    let mut v = Vec::new();
                    if let Some(p) = c.parent_author {
                        v.push((p, NotifKind::Replied));
                    }
                    if let Some(m) = c.reply_to_user
                        && Some(m) != c.parent_author
                    {
                        v.push((m, NotifKind::Replied));
                    }
                    v
                }
                None => Vec::new(),
            },
        }
    }

    /// A comment that others can no longer see (hidden or deleted) takes its held likes
    /// along: they were never delivered, so nothing is withdrawn, and releasing them later
    /// would notify of a like of a comment that is gone. (Likes an earlier run may have
    /// delivered are withdrawn, as an unlike read again withdraws them.)
    fn cancel_comment_likes(&mut self, e: &Event, out: &mut Vec<Change>) {
        let comment = Some(CommentId(e.target.id));
        // A comment event's actor is the comment's author: the recipient of its likes.
        let key = NotifKey { recipient: e.actor, post: PostId(e.post), kind: NotifKind::CommentLiked };
        let likers: Vec<Slot> = self
            .pending
            .range((key, UserId(0), 0)..=(key, UserId(u64::MAX), u64::MAX))
            .filter(|(_, h)| h.comment == comment)
            .map(|(slot, _)| *slot)
            .collect();
        for slot in likers {
            if self.cancel(slot).is_some_and(|h| h.seq <= self.replayed_upto) {
                out.push(Change::Remove { key, actor: slot.1, comment });
            }
        }
    }

    /// Withdraw the replies waiting for the author of the comment `e` concerns (see
    /// `Holder::orphans`), and give up on those that waited too long.
    fn settle_orphans(&mut self, e: &Event, out: &mut Vec<Change>) {
        if self.orphans.is_empty() {
            return;
        }
        if e.target.kind == TargetKind::Comment {
            // A like's target author, or a comment event's actor, is the comment's author.
            let author = if e.kind.is_like() { e.target_author } else { e.actor };
            let waiting: Vec<(u64, u64)> =
                self.orphans.range((e.target.id, 0)..=(e.target.id, u64::MAX)).map(|(k, _)| *k).collect();
            for k in waiting {
                if let Some(o) = self.orphans.remove(&k)
                    && o.replier != author
                {
                    let key = NotifKey { recipient: author, post: o.post, kind: NotifKind::Replied };
                    out.push(Change::Remove { key, actor: o.replier, comment: Some(o.reply) });
                }
            }
        }
        self.orphans.retain(|_, o| o.ts_ms.saturating_add(ORPHAN_WAIT_MS) >= e.ts_ms);
    }

    /// Feed a like its recipient muted (in log order, instead of [`Holder::on_event`]): it is
    /// not held, and only settles what any event settles. Returns the changes to apply now.
    pub fn on_muted(&mut self, e: &Event) -> Vec<Change> {
        let mut out = Vec::new();
        self.settle_orphans(e, &mut out);
        out
    }

    /// Feed one event (in log order). Returns the changes to apply now.
    pub fn on_event(&mut self, e: &Event, ctx: Option<CommentContext>) -> Vec<Change> {
        let mut out = Vec::new();
        // The event names the @mentioned user (format 3), whatever is left of the reply's
        // record when the event is read: deleted, or read again after a restart that took
        // the mentions remembered here. Older events have only the record and that memory.
        let ctx = ctx.map(|c| CommentContext { reply_to_user: e.mention.or(c.reply_to_user), ..c });
        self.settle_orphans(e, &mut out);
        let withdrawn = matches!(e.kind, EventKind::CommentStatusChanged | EventKind::CommentDeleted)
            && e.delta < 0
            && e.target.kind == TargetKind::Comment;
        if withdrawn {
            self.cancel_comment_likes(e, &mut out);
        }
        let actor = match (e.kind.is_like(), ctx) {
            (true, _) => e.actor,
            (false, Some(c)) => c.author,
            (false, None) => return out,
        };
        if let Some(c) = ctx
            && withdrawn
            && e.parent != 0
            && c.parent_author.is_none()
        {
            let o = Orphan {
                post: PostId(e.post),
                replier: actor,
                reply: CommentId(e.target.id),
                ts_ms: e.ts_ms,
            };
            self.orphans.insert((e.parent, e.seq), o);
        }
        let comment = (e.target.kind == TargetKind::Comment).then_some(CommentId(e.target.id));
        let mut recipients = Self::recipients(e, ctx);
        if let Some(c) = ctx
            && !e.kind.is_like()
        {
            // A deleted reply's record is gone: its @mention comes from memory.
            if let Some(m) = self.deleted_reply_mention(e, c)
                && Some(m) != c.parent_author
            {
                recipients.push((m, NotifKind::Replied));
            }
            self.remember_mention(e, c);
        }
        for (recipient, kind) in recipients {
            if recipient == actor {
                continue; // nobody is notified of their own actions
            }
            let key = NotifKey { recipient, post: PostId(e.post), kind };
            let slot = (key, actor, comment.map_or(0, |c| c.0));
            match e.kind {
                EventKind::LikeCreated => {
                    let held = Held { due_ms: e.ts_ms + self.hold_ms, seq: e.seq, comment, ts_ms: e.ts_ms };
                    self.hold(slot, held);
                }
                EventKind::LikeRemoved => match self.cancel(slot) {
                    // Cancelled while held: nothing was delivered, nothing to withdraw...
                    Some(h) if h.seq > self.replayed_upto => {}
                    // ...unless an earlier run may have delivered it before this replay.
                    _ => out.push(Change::Remove { key, actor, comment }),
                },
                EventKind::CommentCreated if e.delta > 0 => {
                    out.push(Change::Add { key, actor, comment, ts_ms: e.ts_ms })
                }
                EventKind::CommentStatusChanged if e.delta > 0 => {
                    out.push(Change::Add { key, actor, comment, ts_ms: e.ts_ms })
                }
                EventKind::CommentStatusChanged | EventKind::CommentDeleted if e.delta < 0 => {
                    out.push(Change::Remove { key, actor, comment })
                }
                _ => {}
            }
        }
        out
    }

    /// Release every held notification due at `now_ms`, in the order they fell due.
    pub fn release_due(&mut self, now_ms: u64) -> Vec<Change> {
        let mut out = Vec::new();
        while self.by_due.first().is_some_and(|&(due, ..)| due <= now_ms) {
            let Some((_, seq, slot)) = self.by_due.pop_first() else { break };
            self.by_seq.remove(&(seq, slot));
            if let Some(h) = self.pending.remove(&slot) {
                let (key, actor, _) = slot;
                out.push(Change::Add { key, actor, comment: h.comment, ts_ms: h.ts_ms });
            }
        }
        out
    }

    /// The highest log position that may be committed after processing up to `processed`:
    /// just below the oldest event still held.
    pub fn safe_offset(&self, processed: u64) -> u64 {
        let held = self.by_seq.first().map(|&(seq, _)| seq);
        let orphan = self.orphans.keys().map(|&(_, seq)| seq).min();
        match held.into_iter().chain(orphan).min() {
            Some(oldest) => processed.min(oldest.saturating_sub(1)),
            None => processed,
        }
    }
}

/// The `comment_liked` changes a comment's change of visibility makes (event `e`, its
/// `likers` with the time of each like): a comment hidden or deleted withdraws its likers
/// from its author's item, and one made visible again restores them, as a `commented` item's
/// actor is withdrawn and restored. Nothing for any other event.
pub fn comment_like_changes(e: &Event, likers: &[(UserId, u64)]) -> Vec<Change> {
    let visibility_change = matches!(e.kind, EventKind::CommentStatusChanged | EventKind::CommentDeleted);
    if !visibility_change || e.delta == 0 || e.target.kind != TargetKind::Comment {
        return Vec::new();
    }
    // A comment event's actor is the comment's author: the recipient of its likes.
    let key = NotifKey { recipient: e.actor, post: PostId(e.post), kind: NotifKind::CommentLiked };
    let comment = Some(CommentId(e.target.id));
    likers
        .iter()
        .filter(|(u, _)| *u != e.actor)
        .map(|&(actor, ts_ms)| {
            if e.delta < 0 {
                Change::Remove { key, actor, comment }
            } else {
                Change::Add { key, actor, comment, ts_ms }
            }
        })
        .collect()
}

/// "alice, bob and 22 others liked your post" from up to two names and the distinct count.
pub fn render_text(kind: NotifKind, names: &[String], actor_count: u64) -> String {
    let verb = kind.verb();
    match (names, actor_count) {
        ([], _) | (_, 0) => format!("someone {verb}"),
        ([a], 1) => format!("{a} {verb}"),
        ([a, b, ..], 2) => format!("{a} and {b} {verb}"),
        ([a], n) => format!("{a} and {} others {verb}", n - 1),
        ([a, b, ..], n) => {
            let others = n - 2;
            if others == 1 {
                format!("{a}, {b} and 1 other {verb}")
            } else {
                format!("{a}, {b} and {others} others {verb}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::like::Target;

    fn like(seq: u64, created: bool, actor: u64, ts: u64) -> Event {
        Event::like(seq, created, Target::post(42), UserId(7), UserId(actor), ts, 42)
    }

    #[test]
    fn a_like_is_held_then_released() {
        let mut h = Holder::new(5_000);
        assert!(h.on_event(&like(1, true, 100, 1_000), None).is_empty());
        assert!(h.release_due(5_999).is_empty());
        let out = h.release_due(6_000);
        assert_eq!(out.len(), 1);
        assert!(matches!(out[0], Change::Add { actor: UserId(100), .. }));
        assert_eq!(h.held(), 0);
    }

    #[test]
    fn an_unlike_within_the_hold_cancels_without_a_trace() {
        let mut h = Holder::new(5_000);
        h.on_event(&like(1, true, 100, 1_000), None);
        assert!(h.on_event(&like(2, false, 100, 2_000), None).is_empty());
        assert!(h.release_due(60_000).is_empty());
    }

    /// A like released and stored, then read again with its unlike (after a restart or a
    /// failed commit resumed below it): the replay must withdraw it, not cancel it silently.
    #[test]
    fn an_unlike_read_in_a_replay_withdraws_a_like_delivered_before() {
        let mut h = Holder::new(5_000);
        h.on_event(&like(10, true, 100, 1_000), None);
        assert_eq!(h.release_due(6_000).len(), 1, "delivered");
        h.forget(10);
        h.on_event(&like(10, true, 100, 1_000), None);
        let out = h.on_event(&like(11, false, 100, 7_000), None);
        assert!(matches!(out[..], [Change::Remove { actor: UserId(100), .. }]));
        assert!(h.release_due(u64::MAX).is_empty());
        // Past the replayed positions, a quick unlike still cancels without a trace.
        h.on_event(&like(12, true, 100, 8_000), None);
        assert!(h.on_event(&like(13, false, 100, 8_500), None).is_empty());
    }

    #[test]
    fn an_unlike_after_delivery_removes_the_actor() {
        let mut h = Holder::new(5_000);
        h.on_event(&like(1, true, 100, 1_000), None);
        h.release_due(6_000);
        let out = h.on_event(&like(2, false, 100, 7_000), None);
        assert!(matches!(out[..], [Change::Remove { actor: UserId(100), .. }]));
    }

    #[test]
    fn nobody_is_notified_of_their_own_like() {
        let mut h = Holder::new(0);
        h.on_event(&like(1, true, 7, 1_000), None);
        assert!(h.release_due(u64::MAX).is_empty());
    }

    #[test]
    fn the_offset_never_passes_a_held_event() {
        let mut h = Holder::new(5_000);
        h.on_event(&like(10, true, 100, 1_000), None);
        h.on_event(&like(11, true, 101, 1_001), None);
        assert_eq!(h.safe_offset(20), 9);
        h.release_due(6_000);
        assert_eq!(h.safe_offset(20), 10, "the second is still held");
        h.release_due(6_001);
        assert_eq!(h.safe_offset(20), 20);
    }

    /// The indexed holder against a model that scans everything it holds (the obvious,
    /// O(held) implementation): same releases (as sets per step), same offsets, any order of
    /// likes, unlikes, re-likes and time steps, with timestamps not monotonic in the log.
    mod against_a_scanning_model {
        use super::*;
        use proptest::prelude::*;
        use std::collections::{BTreeMap, BTreeSet};

        #[derive(Debug, Clone)]
        enum Step {
            Like { actor: u64, post: u64, ts_back: u64 },
            Unlike { actor: u64, post: u64 },
            Tick { ms: u64 },
        }

        fn step() -> impl Strategy<Value = Step> {
            prop_oneof![
                4 => (0..6u64, 0..3u64, 0..3_000u64).prop_map(|(actor, post, ts_back)| Step::Like { actor, post, ts_back }),
                2 => (0..6u64, 0..3u64).prop_map(|(actor, post)| Step::Unlike { actor, post }),
                2 => (0..4_000u64).prop_map(|ms| Step::Tick { ms }),
            ]
        }

        proptest! {
            #[test]
            fn releases_and_offsets_match(steps in proptest::collection::vec(step(), 1..120)) {
                let hold = 2_000;
                let mut h = Holder::new(hold);
                // The model: (post, actor) -> (due, seq, ts).
                let mut model: BTreeMap<(u64, u64), (u64, u64, u64)> = BTreeMap::new();
                let (mut now, mut seq) = (10_000u64, 0u64);
                for st in steps {
                    match st {
                        Step::Like { actor, post, ts_back } => {
                            seq += 1;
                            let ts = now.saturating_sub(ts_back);
                            let e = Event::like(seq, true, Target::post(post), UserId(7), UserId(100 + actor), ts, post);
                            prop_assert!(h.on_event(&e, None).is_empty());
                            model.insert((post, actor), (ts + hold, seq, ts));
                        }
                        Step::Unlike { actor, post } => {
                            seq += 1;
                            let e = Event::like(seq, false, Target::post(post), UserId(7), UserId(100 + actor), now, post);
                            let out = h.on_event(&e, None);
                            let was_held = model.remove(&(post, actor)).is_some();
                            prop_assert_eq!(out.is_empty(), was_held);
                        }
                        Step::Tick { ms } => {
                            now += ms;
                            let got: BTreeSet<(u64, u64, u64)> = h
                                .release_due(now)
                                .into_iter()
                                .map(|c| match c {
                                    Change::Add { key, actor, ts_ms, .. } => (key.post.0, actor.0 - 100, ts_ms),
                                    Change::Remove { .. } => (u64::MAX, 0, 0),
                                })
                                .collect();
                            let due: Vec<(u64, u64)> =
                                model.iter().filter(|(_, v)| v.0 <= now).map(|(k, _)| *k).collect();
                            let want: BTreeSet<(u64, u64, u64)> = due
                                .into_iter()
                                .map(|k| (k.0, k.1, model.remove(&k).map(|v| v.2).unwrap_or_default()))
                                .collect();
                            prop_assert_eq!(got, want);
                        }
                    }
                    prop_assert_eq!(h.held(), model.len());
                    let oldest = model.values().map(|v| v.1).min();
                    let want_offset = oldest.map_or(seq, |o| seq.min(o - 1));
                    prop_assert_eq!(h.safe_offset(seq), want_offset);
                }
            }
        }
    }

    #[test]
    fn replies_notify_the_parent_author_and_the_mentioned_user() {
        let mut h = Holder::new(5_000);
        let e = Event {
            seq: 1,
            kind: EventKind::CommentCreated,
            target: Target::comment(900),
            target_author: UserId(7),
            actor: UserId(20),
            ts_ms: 5,
            post: 42,
            parent: 800,
            delta: 1,
            mention: None,
            trace: None,
        };
        let ctx = CommentContext {
            author: UserId(20),
            parent_author: Some(UserId(11)),
            reply_to_user: Some(UserId(12)),
        };
        let out = h.on_event(&e, Some(ctx));
        let recipients: Vec<u64> = out
            .iter()
            .map(|c| match c {
                Change::Add { key, .. } => key.recipient.0,
                Change::Remove { key, .. } => key.recipient.0,
            })
            .collect();
        assert_eq!(recipients, vec![11, 12]);
        // Hidden later: withdrawn.
        let hidden = Event { seq: 2, kind: EventKind::CommentStatusChanged, delta: -1, ..e };
        assert!(h.on_event(&hidden, Some(ctx)).iter().all(|c| matches!(c, Change::Remove { .. })));
        // A comment held by moderation (delta 0) notifies nobody.
        assert!(h.on_event(&Event { delta: 0, ..e }, Some(ctx)).is_empty());
    }

    fn removed_from(out: &[Change]) -> Vec<(u64, NotifKind, u64)> {
        out.iter()
            .filter_map(|c| match c {
                Change::Remove { key, actor, .. } => Some((key.recipient.0, key.kind, actor.0)),
                Change::Add { .. } => None,
            })
            .collect()
    }

    #[test]
    fn a_deleted_reply_whose_record_is_gone_withdraws_its_mention_too() {
        let mut h = Holder::new(5_000);
        let created = comment_event(1, EventKind::CommentCreated, 900, 20, 800, 1);
        let ctx = CommentContext {
            author: UserId(20),
            parent_author: Some(UserId(11)),
            reply_to_user: Some(UserId(12)),
        };
        assert_eq!(h.on_event(&created, Some(ctx)).len(), 2);
        // The record is removed with the delete: only the parent is read.
        let gone = CommentContext { reply_to_user: None, ..ctx };
        let deleted = Event {
            seq: 2,
            ts_ms: created.ts_ms + 3_600_000,
            ..comment_event(2, EventKind::CommentDeleted, 900, 20, 800, -1)
        };
        let out = h.on_event(&deleted, Some(gone));
        assert_eq!(removed_from(&out), [(11, NotifKind::Replied, 20), (12, NotifKind::Replied, 20)]);
        // A reply without a mention, or a top-level comment, withdraws no one else.
        let plain = CommentContext { author: UserId(21), reply_to_user: None, ..ctx };
        h.on_event(&comment_event(3, EventKind::CommentCreated, 901, 21, 800, 1), Some(plain));
        let out = h.on_event(&comment_event(4, EventKind::CommentDeleted, 901, 21, 800, -1), Some(plain));
        assert_eq!(removed_from(&out), [(11, NotifKind::Replied, 21)]);
    }

    #[test]
    fn a_mention_is_remembered_for_a_day_and_for_a_bounded_number_of_replies() {
        let mut h = Holder::new(5_000);
        let ctx = CommentContext {
            author: UserId(20),
            parent_author: Some(UserId(11)),
            reply_to_user: Some(UserId(12)),
        };
        let gone = CommentContext { reply_to_user: None, ..ctx };
        h.on_event(&comment_event(1, EventKind::CommentCreated, 900, 20, 800, 1), Some(ctx));
        let late = Event {
            ts_ms: 1_001 + MENTION_MEMORY_MS + 1,
            ..comment_event(2, EventKind::CommentCreated, 902, 22, 800, 1)
        };
        h.on_event(&late, Some(CommentContext { author: UserId(22), ..gone }));
        assert!(h.mentions.is_empty() && h.mentions_by_age.is_empty(), "forgotten after a day");
        for id in 0..(MENTION_MEMORY_MAX as u64 + 10) {
            h.on_event(
                &comment_event(10 + id, EventKind::CommentCreated, 10_000 + id, 20, 800, 1),
                Some(ctx),
            );
        }
        assert_eq!((h.mentions.len(), h.mentions_by_age.len()), (MENTION_MEMORY_MAX, MENTION_MEMORY_MAX));
        assert!(!h.mentions.contains_key(&10_000), "the oldest is forgotten first");
    }

    fn comment_event(seq: u64, kind: EventKind, comment: u64, author: u64, parent: u64, delta: i8) -> Event {
        Event {
            seq,
            kind,
            target: Target::comment(comment),
            target_author: UserId(7),
            actor: UserId(author),
            ts_ms: 1_000 + seq,
            post: 42,
            parent,
            delta,
            mention: None,
            trace: None,
        }
    }

    /// A reply's events name its @mentioned user (event format 3): its deletion or hide,
    /// read by a holder that never saw its creation (a restarted notifier) with its record
    /// gone, still withdraws that user's `replied` item.
    #[test]
    fn a_reply_read_after_a_restart_withdraws_its_mention_from_the_event() {
        let gone =
            CommentContext { author: UserId(20), parent_author: Some(UserId(11)), reply_to_user: None };
        for kind in [EventKind::CommentDeleted, EventKind::CommentStatusChanged] {
            let mut h = Holder::new(5_000);
            let e = Event { mention: Some(UserId(12)), ..comment_event(2, kind, 900, 20, 800, -1) };
            assert_eq!(
                removed_from(&h.on_event(&e, Some(gone))),
                [(11, NotifKind::Replied, 20), (12, NotifKind::Replied, 20)],
                "{kind:?}"
            );
        }
    }

    /// A like of a comment, held, then the comment is deleted or hidden within the hold: the
    /// like is never released (after delivery the same change withdraws it instead).
    #[test]
    fn a_like_of_a_comment_deleted_or_hidden_within_the_hold_never_notifies() {
        for kind in [EventKind::CommentDeleted, EventKind::CommentStatusChanged] {
            let mut h = Holder::new(5_000);
            let like = |seq, actor, comment| {
                Event::like(seq, true, Target::comment(comment), UserId(20), UserId(actor), 1_000, 42)
            };
            h.on_event(&like(1, 24, 5), None);
            h.on_event(&like(2, 25, 6), None); // another comment of the same author stays
            let ctx = CommentContext { author: UserId(20), parent_author: None, reply_to_user: None };
            let out = h.on_event(&comment_event(3, kind, 5, 20, 0, -1), Some(ctx));
            assert!(
                out.iter()
                    .all(|c| matches!(c, Change::Remove { key, .. } if key.kind == NotifKind::Commented)),
                "nothing of the like was delivered, so nothing is withdrawn: {out:?}"
            );
            let out = h.release_due(u64::MAX);
            assert!(matches!(out[..], [Change::Add { actor: UserId(25), .. }]), "{kind:?}: {out:?}");
            assert_eq!(h.safe_offset(3), 3);
        }
    }

    /// A reply deleted after its parent's record was gone (both deleted within a notifier
    /// step): the parent's own event, later in the log, names whose `replied` item loses the
    /// replier; until then the offset stays below the reply's event.
    #[test]
    fn a_reply_deleted_with_its_parent_is_withdrawn_from_the_parent_authors_item() {
        let mut h = Holder::new(5_000);
        let no_parent = CommentContext { author: UserId(30), parent_author: None, reply_to_user: None };
        let reply_gone = comment_event(10, EventKind::CommentDeleted, 900, 30, 800, -1);
        assert!(h.on_event(&reply_gone, Some(no_parent)).is_empty());
        assert_eq!(h.safe_offset(10), 9, "the withdrawal waits");
        let parent_ctx = CommentContext { author: UserId(11), parent_author: None, reply_to_user: None };
        let parent_gone = comment_event(11, EventKind::CommentDeleted, 800, 11, 0, -1);
        let out = h.on_event(&parent_gone, Some(parent_ctx));
        let replied = NotifKey { recipient: UserId(11), post: PostId(42), kind: NotifKind::Replied };
        let withdrawn = Change::Remove { key: replied, actor: UserId(30), comment: Some(CommentId(900)) };
        assert!(out.contains(&withdrawn), "{out:?}");
        assert_eq!(h.safe_offset(11), 11);
        // One whose parent never shows up stops waiting after a minute of event time.
        h.on_event(&Event { seq: 12, ..reply_gone }, Some(no_parent));
        assert_eq!(h.safe_offset(12), 11);
        h.on_event(&like(13, true, 100, 1_012 + ORPHAN_WAIT_MS + 1), None);
        assert_eq!(h.safe_offset(13), 12, "only the like is held now");
    }

    #[test]
    fn hiding_a_comment_withdraws_its_likers_and_approving_restores_them() {
        let status = |delta: i8| Event {
            seq: 9,
            kind: EventKind::CommentStatusChanged,
            target: Target::comment(5),
            target_author: UserId(7),
            actor: UserId(20),
            ts_ms: 50,
            post: 42,
            parent: 0,
            delta,
            mention: None,
            trace: None,
        };
        let likers = [(UserId(30), 10), (UserId(20), 11), (UserId(31), 12)];
        let key = NotifKey { recipient: UserId(20), post: PostId(42), kind: NotifKind::CommentLiked };
        assert_eq!(
            comment_like_changes(&status(-1), &likers),
            vec![
                Change::Remove { key, actor: UserId(30), comment: Some(CommentId(5)) },
                Change::Remove { key, actor: UserId(31), comment: Some(CommentId(5)) }
            ]
        );
        let back = comment_like_changes(&status(1), &likers);
        assert_eq!(back[1], Change::Add { key, actor: UserId(31), comment: Some(CommentId(5)), ts_ms: 12 });
        assert!(comment_like_changes(&status(0), &likers).is_empty());
        let deleted = Event { kind: EventKind::CommentDeleted, ..status(-1) };
        assert_eq!(comment_like_changes(&deleted, &likers).len(), 2);
    }

    #[test]
    fn an_item_thinned_by_removals_is_refilled_from_the_newest_remaining_actors() {
        let key = NotifKey { recipient: UserId(7), post: PostId(42), kind: NotifKind::PostLiked };
        let mut up = ItemUpdate::new(NotifItem {
            id: 1,
            key,
            comment: None,
            actor_count: 20,
            recent: (13..=20).rev().map(UserId).collect(),
            updated_ms: 0,
        });
        for a in [20, 19, 18] {
            up.load(UserId(a), [0]);
            up.apply(&Change::Remove { key, actor: UserId(a), comment: None });
        }
        assert!(up.needs_refill());
        // What the engine read, newest first; a removed actor is never named again.
        up.refill([UserId(17), UserId(20), UserId(12), UserId(11), UserId(10), UserId(9)]);
        assert_eq!(up.item.recent, [17, 16, 15, 14, 13, 12, 11, 10].map(UserId));
        assert!(!up.needs_refill());
    }

    /// A batch that changes an item stamps it past the last batch, even when the clock
    /// stands still or went back; a batch that changes nothing (a replay) keeps its stamp.
    #[test]
    fn changed_items_take_the_batch_stamp_and_replays_keep_theirs() {
        assert_eq!(next_stamp(0, 5_000), 5_000);
        assert_eq!(next_stamp(5_000, 5_000), 5_001);
        assert_eq!(next_stamp(5_001, 4_000), 5_002, "a clock behind the last stamp");
        let key = NotifKey { recipient: UserId(7), post: PostId(42), kind: NotifKind::PostLiked };
        let add = Change::Add { key, actor: UserId(1), comment: None, ts_ms: 10 };
        let new = NotifItem { id: 1, key, comment: None, actor_count: 0, recent: vec![], updated_ms: 0 };
        let mut up = ItemUpdate::new(new);
        up.apply(&add);
        up.stamp(6_000);
        assert_eq!(up.item.updated_ms, 6_000, "the release, not the like's time");
        let mut again = ItemUpdate::new(up.item.clone());
        again.load(UserId(1), [0]);
        again.apply(&add);
        again.stamp(7_000);
        assert_eq!(again.item.updated_ms, 6_000, "nothing changed");
    }

    /// An actor with two contributions to an item (likes of two comments, two replies) stays
    /// in it until both are withdrawn; a withdrawal repeated, or of a contribution never
    /// stored, changes nothing.
    #[test]
    fn an_actor_leaves_an_item_when_none_of_their_contributions_remains() {
        let key = NotifKey { recipient: UserId(7), post: PostId(42), kind: NotifKind::CommentLiked };
        let add =
            |actor, c| Change::Add { key, actor: UserId(actor), comment: Some(CommentId(c)), ts_ms: 10 };
        let remove = |actor, c| Change::Remove { key, actor: UserId(actor), comment: Some(CommentId(c)) };
        let new = NotifItem { id: 1, key, comment: None, actor_count: 0, recent: vec![], updated_ms: 0 };
        let mut up = ItemUpdate::new(new.clone());
        for ch in [add(1, 5), add(1, 6), add(2, 5), add(1, 5)] {
            up.apply(&ch);
        }
        assert_eq!((up.item.actor_count, up.added.len()), (2, 3));
        // Stored; the next batch loads what the engine holds.
        let mut up = ItemUpdate::new(up.item.clone());
        up.load(UserId(1), [5, 6]);
        up.load(UserId(2), [5]);
        for ch in [remove(1, 5), remove(1, 5), remove(1, 9)] {
            up.apply(&ch);
        }
        assert_eq!((up.item.actor_count, up.item.recent.clone()), (2, vec![UserId(1), UserId(2)]));
        assert_eq!(up.is_member(UserId(1)), Some(true));
        up.apply(&remove(2, 5));
        assert_eq!((up.item.actor_count, up.item.recent.clone()), (1, vec![UserId(1)]));
        up.apply(&remove(1, 6));
        assert_eq!(up.item.actor_count, 0);
        let removed: BTreeSet<(UserId, u64)> = up.removed.iter().copied().collect();
        assert_eq!(removed, BTreeSet::from([(UserId(1), 5), (UserId(1), 6), (UserId(2), 5)]));
        // A row stored before contributions were kept is taken by the actor's withdrawal.
        let mut legacy = ItemUpdate::new(NotifItem { actor_count: 1, recent: vec![UserId(3)], ..new });
        legacy.load(UserId(3), [0]);
        legacy.apply(&remove(3, 8));
        assert_eq!((legacy.item.actor_count, legacy.removed.len()), (0, 1));
    }

    /// Likes of two comments of one author on one post, held together: each is cancelled by
    /// its own unlike, and the comment deleted takes only its own like along.
    #[test]
    fn likes_of_two_comments_are_held_and_cancelled_apart() {
        let mut h = Holder::new(5_000);
        let like = |seq, created, comment| {
            Event::like(seq, created, Target::comment(comment), UserId(20), UserId(24), 1_000 + seq, 42)
        };
        h.on_event(&like(1, true, 5), None);
        h.on_event(&like(2, true, 6), None);
        h.on_event(&like(3, true, 7), None);
        assert_eq!(h.held(), 3);
        assert!(h.on_event(&like(4, false, 6), None).is_empty());
        let ctx = CommentContext { author: UserId(20), parent_author: None, reply_to_user: None };
        h.on_event(&comment_event(5, EventKind::CommentDeleted, 7, 20, 0, -1), Some(ctx));
        let out = h.release_due(u64::MAX);
        assert!(matches!(out[..], [Change::Add { comment: Some(CommentId(5)), .. }]), "{out:?}");
    }

    #[test]
    fn texts_name_two_and_count_the_rest() {
        let n = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(render_text(NotifKind::PostLiked, &n(&["alice"]), 1), "alice liked your post");
        assert_eq!(
            render_text(NotifKind::PostLiked, &n(&["alice", "bob"]), 2),
            "alice and bob liked your post"
        );
        assert_eq!(
            render_text(NotifKind::PostLiked, &n(&["alice", "bob"]), 3),
            "alice, bob and 1 other liked your post"
        );
        assert_eq!(
            render_text(NotifKind::PostLiked, &n(&["alice", "bob"]), 30),
            "alice, bob and 28 others liked your post"
        );
        assert_eq!(render_text(NotifKind::Commented, &n(&["carol"]), 1), "carol commented on your post");
    }
}

/// Most recent actors an inbox item keeps (newest first).
pub const RECENT_ACTORS: usize = 8;

/// The change stamp of a batch of inbox changes: `now_ms`, or just past the previous
/// batch's stamp `last` when the clock has not moved past it (a restart, another node's
/// clock). Stamps strictly increase from batch to batch, so an item's `updated_ms` orders
/// every change of an inbox, and a stream resumed after one change (`Last-Event-ID`) finds
/// every later one, a held like released late included.
pub fn next_stamp(last: u64, now_ms: u64) -> u64 {
    now_ms.max(last.saturating_add(1))
}

/// An inbox item being changed by one batch of [`Change`]s: the item plus the contributions
/// the batch added and removed (what the engine must write to the item's actor rows).
///
/// An actor is a member of an item while at least one of their contributions ([`Change::source`])
/// to it is stored; `actor_count` counts members. The engine passes each actor's stored
/// contributions ([`ItemUpdate::load`]) before the first change of theirs is applied.
///
/// A post like is contribution 0, and so is a row stored before contributions were kept (of
/// any kind): a withdrawal that does not find its own contribution takes such a row, as a
/// withdrawal of the actor did then.
#[derive(Debug, Clone)]
pub struct ItemUpdate {
    /// The item as it will be stored.
    pub item: NotifItem,
    /// Contributions (actor, source) this batch stored.
    pub added: HashSet<(UserId, u64)>,
    /// Contributions (actor, source) this batch deleted.
    pub removed: HashSet<(UserId, u64)>,
    /// Each loaded actor's contributions as they stand after the changes applied so far.
    sources: HashMap<UserId, BTreeSet<u64>>,
    /// Each loaded actor's contributions as stored before the batch.
    stored: HashMap<UserId, BTreeSet<u64>>,
    /// The item as it was stored before the batch.
    before: NotifItem,
}

impl ItemUpdate {
    /// Start from `item` as stored (or a new, empty one).
    pub fn new(item: NotifItem) -> Self {
        ItemUpdate {
            before: item.clone(),
            item,
            added: Default::default(),
            removed: Default::default(),
            sources: Default::default(),
            stored: Default::default(),
        }
    }

    /// Did the batch change what the item shows (a replayed batch changes nothing)?
    pub fn changed(&self) -> bool {
        let (a, b) = (&self.item, &self.before);
        a.actor_count != b.actor_count || a.recent != b.recent || a.comment != b.comment
    }

    /// Give a changed item the batch's stamp ([`next_stamp`]) as its `updated_ms`: the time of
    /// its last change in the inbox (of a held like: its release), which a live stream's event
    /// IDs and its resume follow. An unchanged item keeps its stamp.
    pub fn stamp(&mut self, stamp: u64) {
        if self.changed() {
            self.item.updated_ms = stamp;
        }
    }

    /// Are `actor`'s stored contributions loaded?
    pub fn knows(&self, actor: UserId) -> bool {
        self.sources.contains_key(&actor)
    }

    /// Pass `actor`'s stored contributions to the item (none for a new item), before the
    /// first change of theirs. Loading an actor again changes nothing.
    pub fn load(&mut self, actor: UserId, stored: impl IntoIterator<Item = u64>) {
        if !self.knows(actor) {
            let set: BTreeSet<u64> = stored.into_iter().collect();
            self.stored.insert(actor, set.clone());
            self.sources.insert(actor, set);
        }
    }

    /// Is `actor` a member now (of the loaded actors; any other is as stored)?
    pub fn is_member(&self, actor: UserId) -> Option<bool> {
        self.sources.get(&actor).map(|s| !s.is_empty())
    }

    /// Has `recent` fallen short of the actors it should name (after removals took names out
    /// of it while older actors remain)? Then the engine reads the newest remaining actors
    /// from the item's actor rows and passes them to [`ItemUpdate::refill`].
    pub fn needs_refill(&self) -> bool {
        (self.item.recent.len() as u64) < self.item.actor_count.min(RECENT_ACTORS as u64)
    }

    /// Top `recent` up from `newest`, remaining members newest first (those already named,
    /// and those this batch withdrew, are skipped), so an item keeps naming its most recent
    /// actors whatever was removed.
    pub fn refill(&mut self, newest: impl IntoIterator<Item = UserId>) {
        for a in newest {
            if self.item.recent.len() >= RECENT_ACTORS {
                break;
            }
            if !self.item.recent.contains(&a) && self.is_member(a) != Some(false) {
                self.item.recent.push(a);
            }
        }
    }

    /// Apply one change (its actor loaded: [`ItemUpdate::load`]; one that is not counts as
    /// having no contributions stored). The contributions are an exact set, so applying a
    /// change twice is a no-op (replays are harmless).
    pub fn apply(&mut self, ch: &Change) {
        let actor = ch.actor();
        let source = ch.source();
        self.load(actor, []);
        let stored = self.stored.get(&actor).is_some_and(|s| s.contains(&source));
        let Some(sources) = self.sources.get_mut(&actor) else { return };
        match ch {
            Change::Add { comment, .. } => {
                if sources.is_empty() {
                    self.item.actor_count += 1;
                }
                if sources.insert(source) {
                    if stored {
                        self.removed.remove(&(actor, source));
                    } else {
                        self.added.insert((actor, source));
                    }
                }
                self.item.recent.retain(|a| *a != actor);
                self.item.recent.insert(0, actor);
                self.item.recent.truncate(RECENT_ACTORS);
                if comment.is_some() {
                    self.item.comment = *comment;
                }
            }
            Change::Remove { .. } => {
                // The contribution itself, else a row stored before contributions were kept.
                let taken = if sources.contains(&source) {
                    source
                } else if sources.contains(&0) {
                    0
                } else {
                    return;
                };
                sources.remove(&taken);
                let was_stored = self.stored.get(&actor).is_some_and(|s| s.contains(&taken));
                if was_stored {
                    self.removed.insert((actor, taken));
                } else {
                    self.added.remove(&(actor, taken));
                }
                if self.sources.get(&actor).is_some_and(|s| s.is_empty()) {
                    self.item.actor_count = self.item.actor_count.saturating_sub(1);
                    self.item.recent.retain(|a| *a != actor);
                }
            }
        }
    }
}
