//! A comment as stored, and its byte form: what both engines write and every read path
//! returns.

use crate::comment::status::CommentStatus;
use crate::ids::{CommentId, PostId, UserId};

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
