//! Safe retries of comment creation: the `Idempotency-Key` request header.
//!
//! A client that times out and sends `POST /v1/posts/{post}/comments` again with the same key
//! must get the first call's answer, not a second comment. The rules, written once for both
//! engines:
//!
//! - a key is 1..=255 visible ASCII characters ([`IdempotencyKey::parse`]) and belongs to its
//!   caller: two users' equal keys never meet;
//! - the request it was first used with is remembered as a [`fingerprint`] of the post, the
//!   parent and the text exactly as sent; the same key with another request is refused;
//! - the key is stored in the same atomic write as the comment it created ([`KeyRecord`],
//!   written by the engines when they apply [`crate::write::WriteOp::KeyedComment`]), so a
//!   crash never leaves one without the other;
//! - what a repeat answers is rebuilt from the record: the comment as it was created.

use crate::comment::record::CommentRecord;
use crate::ids::{CommentId, PostId, UserId};
use sha2::{Digest, Sha256};

/// Longest key accepted (the IETF draft leaves it open; Stripe allows 255).
pub const MAX_KEY_LEN: usize = 255;

/// Record format version of a stored key.
const KEY_RECORD_V1: u8 = 1;

/// A validated `Idempotency-Key` header value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

/// Why a header value is not a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidKey {
    /// Empty.
    #[error("Idempotency-Key is empty")]
    Empty,
    /// Longer than [`MAX_KEY_LEN`].
    #[error("Idempotency-Key is longer than {MAX_KEY_LEN} characters")]
    TooLong,
    /// A character outside visible ASCII (`!` to `~`).
    #[error("Idempotency-Key may hold only visible ASCII characters")]
    NotVisibleAscii,
}

impl IdempotencyKey {
    /// Parse a header value's bytes.
    pub fn parse(raw: &[u8]) -> Result<Self, InvalidKey> {
        if raw.is_empty() {
            return Err(InvalidKey::Empty);
        }
        if raw.len() > MAX_KEY_LEN {
            return Err(InvalidKey::TooLong);
        }
        if !raw.iter().all(|b| (0x21..=0x7e).contains(b)) {
            return Err(InvalidKey::NotVisibleAscii);
        }
        // Visible ASCII is valid UTF-8.
        Ok(IdempotencyKey(raw.iter().map(|&b| char::from(b)).collect()))
    }

    /// The key as sent.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What identifies "the same request": the post, the parent and the text exactly as sent
/// (SHA-256, first 16 bytes: equal on every node and every build).
pub fn fingerprint(post: PostId, parent: Option<CommentId>, raw_text: &str) -> [u8; 16] {
    let mut h = Sha256::new();
    h.update(post.0.to_be_bytes());
    h.update(parent.map_or(0, |p| p.0).to_be_bytes());
    h.update(raw_text.as_bytes());
    let d = h.finalize();
    let mut out = [0u8; 16];
    out.copy_from_slice(&d[..16]);
    out
}

/// A keyed create: who sent it, the key, and the request's fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keyed {
    /// The caller the key belongs to.
    pub caller: UserId,
    /// The key.
    pub key: IdempotencyKey,
    /// [`fingerprint`] of the request.
    pub fingerprint: [u8; 16],
}

/// A stored key: the request it was first used with and the comment that request created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    /// [`fingerprint`] of the first request.
    pub fingerprint: [u8; 16],
    /// When the key was stored (Unix ms); it expires a retention later.
    pub created_ms: u64,
    /// The comment as it was created.
    pub comment: CommentRecord,
}

/// A stored key record could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad idempotency key record: {0}")]
pub struct BadKeyRecord(pub &'static str);

impl KeyRecord {
    /// Stored form: version, fingerprint, time, comment ID, then the comment's own record.
    pub fn encode(&self) -> Vec<u8> {
        let comment = self.comment.encode();
        let mut b = Vec::with_capacity(33 + comment.len());
        b.push(KEY_RECORD_V1);
        b.extend_from_slice(&self.fingerprint);
        b.extend_from_slice(&self.created_ms.to_be_bytes());
        b.extend_from_slice(&self.comment.id.0.to_be_bytes());
        b.extend_from_slice(&comment);
        b
    }

    /// Parse the stored form.
    pub fn decode(b: &[u8]) -> Result<Self, BadKeyRecord> {
        if b.first() != Some(&KEY_RECORD_V1) {
            return Err(BadKeyRecord("unknown format version"));
        }
        if b.len() < 33 {
            return Err(BadKeyRecord("truncated"));
        }
        let mut fingerprint = [0u8; 16];
        fingerprint.copy_from_slice(&b[1..17]);
        let u = |at: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[at..at + 8]);
            u64::from_be_bytes(a)
        };
        let comment = CommentRecord::decode(CommentId(u(25)), &b[33..]).map_err(|e| BadKeyRecord(e.0))?;
        Ok(KeyRecord { fingerprint, created_ms: u(17), comment })
    }
}

/// What a keyed create answers, given the key as stored (if it is) and the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replay {
    /// The key is new: create the comment and store the key with it.
    Fresh,
    /// The same request again: answer with the comment it created.
    Same(CommentRecord),
    /// The key was first used with another request: refuse (422).
    OtherRequest,
}

/// Decide what a keyed create does (see [`Replay`]).
pub fn replay(stored: Option<&KeyRecord>, fingerprint: &[u8; 16]) -> Replay {
    match stored {
        None => Replay::Fresh,
        Some(k) if &k.fingerprint == fingerprint => Replay::Same(k.comment.clone()),
        Some(_) => Replay::OtherRequest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comment::status::CommentStatus;

    fn record() -> KeyRecord {
        KeyRecord {
            fingerprint: fingerprint(PostId(42), None, "hello"),
            created_ms: 1_790_000_000_000,
            comment: CommentRecord {
                id: CommentId(7_260_000_000_000_001),
                post: PostId(42),
                author: UserId(1001),
                post_author: UserId(7),
                parent: None,
                reply_to_user: None,
                status: CommentStatus::Visible,
                text: "hello".into(),
                simhash: 99,
            },
        }
    }

    #[test]
    fn keys_are_one_to_255_visible_ascii_characters() {
        assert_eq!(IdempotencyKey::parse(b""), Err(InvalidKey::Empty));
        assert_eq!(IdempotencyKey::parse(&[b'a'; 256]), Err(InvalidKey::TooLong));
        assert!(IdempotencyKey::parse(&[b'a'; 255]).is_ok());
        for bad in [&b"a b"[..], b"tab\t", "caf\u{e9}".as_bytes(), b"nul\0", b"del\x7f"] {
            assert_eq!(IdempotencyKey::parse(bad), Err(InvalidKey::NotVisibleAscii), "{bad:?}");
        }
        let k = IdempotencyKey::parse(b"0f8fad5b-d9cb-469f-a165-70867728950e").expect("uuid");
        assert_eq!(k.as_str(), "0f8fad5b-d9cb-469f-a165-70867728950e");
        assert!(IdempotencyKey::parse(b"!~{}[]").is_ok());
    }

    #[test]
    fn the_fingerprint_tells_post_parent_and_text_apart() {
        let base = fingerprint(PostId(42), None, "hello");
        assert_eq!(base, fingerprint(PostId(42), None, "hello"));
        assert_ne!(base, fingerprint(PostId(43), None, "hello"));
        assert_ne!(base, fingerprint(PostId(42), Some(CommentId(1)), "hello"));
        assert_ne!(base, fingerprint(PostId(42), None, "hello "));
    }

    #[test]
    fn a_stored_key_round_trips() {
        let r = record();
        assert_eq!(KeyRecord::decode(&r.encode()), Ok(r.clone()));
        assert!(KeyRecord::decode(&r.encode()[..20]).is_err());
        assert!(KeyRecord::decode(&[9]).is_err());
    }

    #[test]
    fn a_repeat_replays_only_the_same_request() {
        let r = record();
        assert_eq!(replay(None, &r.fingerprint), Replay::Fresh);
        assert_eq!(replay(Some(&r), &r.fingerprint), Replay::Same(r.comment.clone()));
        let other = fingerprint(PostId(42), None, "hello!");
        assert_eq!(replay(Some(&r), &other), Replay::OtherRequest);
    }
}
