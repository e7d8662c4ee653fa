//! Notifications as a pure state machine: engagement events in, inbox changes out.
//!
//! - Like notifications are held for `hold_ms` (default 5 s) so a quick unlike cancels them;
//!   comment notifications go out at once; no one is notified of their own actions.
//! - Changes aggregate per (recipient, post, kind): the store keeps the distinct set of
//!   actors, so a redelivered event is a no-op and an unlike after delivery removes exactly
//!   that actor.
//! - A comment hidden or deleted later withdraws its notification.
//! - The consumer may only commit its log offset below the oldest held event
//!   ([`Holder::safe_offset`]): a crash re-reads and re-holds what was not delivered.
//!
//! Time is a parameter (`now_ms`), so tests drive it step by step without sleeping.

use crate::event::{Event, EventKind};
use crate::ids::{CommentId, PostId, UserId};
use crate::like::TargetKind;
use std::collections::BTreeMap;

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
    /// Remove `actor` from the item (no-op if absent).
    Remove {
        /// The item.
        key: NotifKey,
        /// Who is withdrawn.
        actor: UserId,
    },
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

#[derive(Debug, Clone, Copy)]
struct Held {
    due_ms: u64,
    seq: u64,
    comment: Option<CommentId>,
    ts_ms: u64,
}

/// Holds like notifications and turns events into inbox changes.
#[derive(Debug)]
pub struct Holder {
    hold_ms: u64,
    pending: BTreeMap<(NotifKey, UserId), Held>,
}

impl Holder {
    /// A holder with the given hold window.
    pub fn new(hold_ms: u64) -> Self {
        Holder { hold_ms, pending: BTreeMap::new() }
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

    /// Feed one event (in log order). Returns the changes to apply now.
    pub fn on_event(&mut self, e: &Event, ctx: Option<CommentContext>) -> Vec<Change> {
        let actor = match (e.kind.is_like(), ctx) {
            (true, _) => e.actor,
            (false, Some(c)) => c.author,
            (false, None) => return Vec::new(),
        };
        let comment = (e.target.kind == TargetKind::Comment).then_some(CommentId(e.target.id));
        let mut out = Vec::new();
        for (recipient, kind) in Self::recipients(e, ctx) {
            if recipient == actor {
                continue; // nobody is notified of their own actions
            }
            let key = NotifKey { recipient, post: PostId(e.post), kind };
            match e.kind {
                EventKind::LikeCreated => {
                    let held = Held { due_ms: e.ts_ms + self.hold_ms, seq: e.seq, comment, ts_ms: e.ts_ms };
                    self.pending.insert((key, actor), held);
                }
                // Cancelled while held: nothing was delivered, nothing to withdraw.
                EventKind::LikeRemoved if self.pending.remove(&(key, actor)).is_some() => {}
                EventKind::LikeRemoved => out.push(Change::Remove { key, actor }),
                EventKind::CommentCreated if e.delta > 0 => {
                    out.push(Change::Add { key, actor, comment, ts_ms: e.ts_ms })
                }
                EventKind::CommentStatusChanged if e.delta > 0 => {
                    out.push(Change::Add { key, actor, comment, ts_ms: e.ts_ms })
                }
                EventKind::CommentStatusChanged | EventKind::CommentDeleted if e.delta < 0 => {
                    out.push(Change::Remove { key, actor })
                }
                _ => {}
            }
        }
        out
    }

    /// Release every held notification due at `now_ms`.
    pub fn release_due(&mut self, now_ms: u64) -> Vec<Change> {
        let due: Vec<(NotifKey, UserId)> =
            self.pending.iter().filter(|(_, h)| h.due_ms <= now_ms).map(|(k, _)| *k).collect();
        due.into_iter()
            .filter_map(|k| self.pending.remove(&k).map(|h| (k, h)))
            .map(|((key, actor), h)| Change::Add { key, actor, comment: h.comment, ts_ms: h.ts_ms })
            .collect()
    }

    /// The highest log position that may be committed after processing up to `processed`:
    /// just below the oldest event still held.
    pub fn safe_offset(&self, processed: u64) -> u64 {
        match self.pending.values().map(|h| h.seq).min() {
            Some(oldest) => processed.min(oldest.saturating_sub(1)),
            None => processed,
        }
    }
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

/// An inbox item being changed by one batch of [`Change`]s: the item plus the actors the
/// batch added and removed (what the engine must write to the item's actor set).
#[derive(Debug, Clone)]
pub struct ItemUpdate {
    /// The item as it will be stored.
    pub item: crate::ports::NotifItem,
    /// Actors this batch made members.
    pub added: std::collections::HashSet<UserId>,
    /// Actors this batch removed.
    pub removed: std::collections::HashSet<UserId>,
}

impl ItemUpdate {
    /// Start from `item` as stored (or a new, empty one).
    pub fn new(item: crate::ports::NotifItem) -> Self {
        ItemUpdate { item, added: Default::default(), removed: Default::default() }
    }

    /// Is `actor` a member now? `stored` says whether it was one before this batch.
    pub fn is_member(&self, actor: UserId, stored: bool) -> bool {
        if self.added.contains(&actor) {
            true
        } else if self.removed.contains(&actor) {
            false
        } else {
            stored
        }
    }

    /// Apply one change whose actor's membership before it is `member` (from
    /// [`ItemUpdate::is_member`]): an exact set of actors, so applying a change twice is a
    /// no-op (replays are harmless).
    pub fn apply(&mut self, ch: &Change, member: bool) {
        match ch {
            Change::Add { actor, comment, ts_ms, .. } => {
                if !member {
                    self.item.actor_count += 1;
                    self.added.insert(*actor);
                    self.removed.remove(actor);
                }
                self.item.recent.retain(|a| a != actor);
                self.item.recent.insert(0, *actor);
                self.item.recent.truncate(RECENT_ACTORS);
                if comment.is_some() {
                    self.item.comment = *comment;
                }
                self.item.updated_ms = self.item.updated_ms.max(*ts_ms);
            }
            Change::Remove { actor, .. } => {
                if member {
                    self.item.actor_count = self.item.actor_count.saturating_sub(1);
                    self.removed.insert(*actor);
                    self.added.remove(actor);
                    self.item.recent.retain(|a| a != actor);
                }
            }
        }
    }
}
