//! Operations of the single write path: likes and comment changes go through the same group
//! commit, so they share one event sequence and one fsync per batch.

use crate::comment::appeal::HeldBy;
use crate::comment::idempotency::{KeyRecord, Keyed};
use crate::comment::status::CommentStatus;
use crate::ids::{CommentId, UserId};
use crate::like::{LikeOp, LikeOutcome};

/// The stored comment lives with the other comment types ([`crate::comment::record`]); the
/// write path's operations carry it, and callers of the write path name it from here.
pub use crate::comment::record::{BadComment, COMMENT_RECORD_V1, CommentRecord};

/// A change to comments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommentOp {
    /// Write a new comment; the engine assigns the ID (`record.id` is ignored). With the
    /// comment, in the same atomic write, the engine stores its author's text fingerprint
    /// (near-duplicate detection) and, for a comment held by a moderation layer (`Some`: why),
    /// the hold and the comment's review-queue entry: a held comment never exists without
    /// its queue entry and reason.
    Create(CommentRecord, Option<HeldBy>),
    /// Change a comment's status.
    SetStatus {
        /// Which comment.
        id: CommentId,
        /// The new status.
        status: CommentStatus,
        /// Who decided.
        actor: UserId,
        /// What the change does to the comment's review-queue entry, in the same atomic
        /// write (see `likewise_core::comment::transition::review`).
        queue: QueueChange,
    },
    /// Delete a comment: a top-level comment with replies becomes a placeholder, anything
    /// else is removed.
    Delete {
        /// Which comment.
        id: CommentId,
        /// Who deleted it.
        actor: UserId,
    },
}

/// What a status change does to the review queue. Written with the status, so whatever the
/// interleaving of reports and decisions, a comment held for review is in the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueChange {
    /// The queue is left as it is.
    Keep,
    /// Held for review by a moderation layer (reports): a comment visible when the change
    /// applies takes the new status, the reason and a queue entry; a comment in another
    /// status (held or hidden meanwhile) keeps its status and enters the queue; a deleted or
    /// missing one is left alone.
    Hold(HeldBy),
    /// Decided (an approval, a moderator's hide): the comment leaves the queue.
    Leave,
}

impl CommentOp {
    /// The comment the operation changes; `None` for a create (the engine assigns its ID).
    pub fn id(&self) -> Option<CommentId> {
        match self {
            CommentOp::Create(..) => None,
            CommentOp::SetStatus { id, .. } | CommentOp::Delete { id, .. } => Some(*id),
        }
    }
}

/// One operation of the write path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOp {
    /// Like or unlike.
    Like(LikeOp),
    /// A comment change.
    Comment(CommentOp),
    /// A comment create under an `Idempotency-Key`: when the caller's key is already stored
    /// the engine changes nothing and answers [`CommentOutcome::Replayed`]; otherwise it
    /// applies `CommentOp::Create` and, when that created the comment, stores the key with
    /// it in the same atomic write (with the moderation state `CommentOp::Create` writes).
    KeyedComment(CommentRecord, Option<HeldBy>, Keyed),
}

/// What a comment operation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommentOutcome {
    /// The comment as stored after the operation (`None` when it was removed).
    Done(Option<CommentRecord>),
    /// The comment does not exist.
    NotFound,
    /// A keyed create whose key was already stored: nothing was written.
    Replayed(Box<KeyRecord>),
}

/// What an operation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// A like's outcome.
    Like(LikeOutcome),
    /// A comment operation's outcome.
    Comment(CommentOutcome),
}
