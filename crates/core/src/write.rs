//! Operations of the single write path: likes and comment changes go through the same group
//! commit, so they share one event sequence and one fsync per batch.

use crate::comment::appeal::HeldBy;
use crate::comment::idempotency::{KeyRecord, Keyed};
use crate::comment::status::CommentStatus;
use crate::ids::{CommentId, PostId, UserId};
use crate::like::{LikeOp, LikeOutcome};

/// Record format version of a stored comment.
pub const COMMENT_RECORD_V1: u8 = 1;

/// A comment as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommentRecord {
    /// Its ID (time-sortable).
    pub id: CommentId,
    /// The post it belongs to.
    pub post: PostId,
    /// Who wrote it.
    pub author: UserId,
    /// The post's author (carried for events and permission checks).
    pub post_author: UserId,
    /// Top-level parent for a reply.
    pub parent: Option<CommentId>,
    /// The user a reply answers (an @mention of a reply to a reply).
    pub reply_to_user: Option<UserId>,
    /// Moderation status.
    pub status: CommentStatus,
    /// Normalised text (empty for a deleted placeholder).
    pub text: String,
    /// SimHash of the text (near-duplicate detection).
    pub simhash: u64,
}

/// A stored comment record could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad comment record: {0}")]
pub struct BadComment(pub &'static str);

impl CommentRecord {
    /// Stored form (the ID is in the key).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(60 + self.text.len());
        b.push(COMMENT_RECORD_V1);
        for v in [
            self.post.0,
            self.author.0,
            self.post_author.0,
            self.parent.map_or(0, |p| p.0),
            self.reply_to_user.map_or(0, |u| u.0),
            self.simhash,
        ] {
            b.extend_from_slice(&v.to_be_bytes());
        }
        b.push(self.status.code());
        b.extend_from_slice(self.text.as_bytes());
        b
    }

    /// Parse the stored form.
    pub fn decode(id: CommentId, b: &[u8]) -> Result<Self, BadComment> {
        if b.first() != Some(&COMMENT_RECORD_V1) {
            return Err(BadComment("unknown format version"));
        }
        if b.len() < 50 {
            return Err(BadComment("truncated"));
        }
        let u = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[1 + i * 8..9 + i * 8]);
            u64::from_be_bytes(a)
        };
        let nz = |v: u64| (v != 0).then_some(v);
        Ok(CommentRecord {
            id,
            post: PostId(u(0)),
            author: UserId(u(1)),
            post_author: UserId(u(2)),
            parent: nz(u(3)).map(CommentId),
            reply_to_user: nz(u(4)).map(UserId),
            simhash: u(5),
            status: CommentStatus::from_code(b[49]).ok_or(BadComment("unknown status"))?,
            text: std::str::from_utf8(&b[50..]).map_err(|_| BadComment("text not UTF-8"))?.to_string(),
        })
    }
}

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
