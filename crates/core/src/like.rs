//! Likes as state transitions. The truth is one like row per (target, user); a request only
//! *asks* for a state, and the storage engine reports whether the state actually changed. Only a
//! change produces an event, so a retried or double-tapped request never counts twice.

use crate::ids::UserId;

/// What can be liked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TargetKind {
    /// A post.
    Post,
    /// A comment.
    Comment,
}

impl TargetKind {
    /// Stable one-byte code used in stored keys and events.
    pub fn code(self) -> u8 {
        match self {
            TargetKind::Post => 1,
            TargetKind::Comment => 2,
        }
    }

    /// Inverse of [`TargetKind::code`].
    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(TargetKind::Post),
            2 => Some(TargetKind::Comment),
            _ => None,
        }
    }
}

/// A likeable thing: a post or a comment, by ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Target {
    /// Post or comment.
    pub kind: TargetKind,
    /// The post's or comment's ID.
    pub id: u64,
}

impl Target {
    /// A post target.
    pub fn post(id: u64) -> Self {
        Target { kind: TargetKind::Post, id }
    }
    /// A comment target.
    pub fn comment(id: u64) -> Self {
        Target { kind: TargetKind::Comment, id }
    }
}

/// The state a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LikeAction {
    /// Make the like row exist.
    Like,
    /// Make the like row not exist.
    Unlike,
}

/// One like/unlike request, ready for the write path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LikeOp {
    /// What is liked.
    pub target: Target,
    /// Who likes it.
    pub user: UserId,
    /// Like or unlike.
    pub action: LikeAction,
    /// The target's author, carried into the event so consumers never look it up.
    pub target_author: UserId,
    /// The post the target belongs to (the post itself for a post like).
    pub post: u64,
    /// Request time, milliseconds since the Unix epoch.
    pub ts_ms: u64,
    /// The trace context of the request, when its trace is sampled: carried into the event
    /// (set by the group commit from the submitting request's span).
    pub trace: Option<crate::trace::TraceContext>,
}

/// What a like/unlike did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LikeOutcome {
    /// The state after the operation.
    pub liked: bool,
    /// True only when this operation created or removed the row.
    pub changed: bool,
    /// The position of the event this change produced in its log (none when unchanged).
    /// Changes of one (target, user) key get increasing positions in commit order: the
    /// embedded log is one sequence; a PostgreSQL shard's is the outbox row's `seq` and the
    /// event's index in it (a key always lives on one shard). On PostgreSQL only a key's last
    /// change in a batch carries one, so two positions of a key never share an outbox row.
    pub event_seq: Option<u64>,
}

/// Resolve one operation against the current state: the heart of idempotency.
///
/// Returns the new state and whether it changed. Engines call this for every op, feeding it
/// the state left by earlier ops of the same batch, so per-key arrival order holds.
pub fn transition(currently_liked: bool, action: LikeAction) -> (bool, bool) {
    match (currently_liked, action) {
        (false, LikeAction::Like) => (true, true),
        (true, LikeAction::Unlike) => (false, true),
        (state, _) => (state, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retried_like_changes_nothing() {
        assert_eq!(transition(false, LikeAction::Like), (true, true));
        assert_eq!(transition(true, LikeAction::Like), (true, false));
    }

    #[test]
    fn unlike_of_missing_row_changes_nothing() {
        assert_eq!(transition(false, LikeAction::Unlike), (false, false));
        assert_eq!(transition(true, LikeAction::Unlike), (false, true));
    }

    #[test]
    fn target_codes_round_trip() {
        for k in [TargetKind::Post, TargetKind::Comment] {
            assert_eq!(TargetKind::from_code(k.code()), Some(k));
        }
        assert_eq!(TargetKind::from_code(0), None);
    }
}
