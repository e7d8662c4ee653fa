//! Engagement events: the append-only log (transactional outbox) every consumer reads.
//!
//! An event is written in the same atomic batch as the state change that caused it, and only
//! when the state really changed. Its `seq` is its position in the log and its ID: strictly
//! increasing, never reused. The stored form is a small versioned binary record.

use crate::ids::UserId;
use crate::like::{Target, TargetKind};

/// The current on-disk format version of an event record.
pub const EVENT_FORMAT_V1: u8 = 1;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A like row was created.
    LikeCreated,
    /// A like row was removed.
    LikeRemoved,
}

impl EventKind {
    fn code(self) -> u8 {
        match self {
            EventKind::LikeCreated => 1,
            EventKind::LikeRemoved => 2,
        }
    }
    fn from_code(c: u8) -> Option<Self> {
        match c {
            1 => Some(EventKind::LikeCreated),
            2 => Some(EventKind::LikeRemoved),
            _ => None,
        }
    }
    /// The name used in logs and documentation.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::LikeCreated => "LikeCreated",
            EventKind::LikeRemoved => "LikeRemoved",
        }
    }
}

/// One engagement event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// Position in the log; also the event ID.
    pub seq: u64,
    /// What happened.
    pub kind: EventKind,
    /// The post or comment concerned.
    pub target: Target,
    /// The target's author (the post author for a post like).
    pub target_author: UserId,
    /// Who acted (the liker).
    pub actor: UserId,
    /// When, milliseconds since the Unix epoch.
    pub ts_ms: u64,
}

/// Length of an encoded v1 event (the sequence is the key, not part of the value).
pub const EVENT_V1_LEN: usize = 1 + 1 + 1 + 8 + 8 + 8 + 8;

/// Why an event record could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad event record: {0}")]
pub struct BadEvent(pub &'static str);

impl Event {
    /// The counter delta this event carries for its target's like count.
    pub fn delta(&self) -> i64 {
        match self.kind {
            EventKind::LikeCreated => 1,
            EventKind::LikeRemoved => -1,
        }
    }

    /// Encode the value part (everything but `seq`).
    pub fn encode(&self) -> [u8; EVENT_V1_LEN] {
        let mut b = [0u8; EVENT_V1_LEN];
        b[0] = EVENT_FORMAT_V1;
        b[1] = self.kind.code();
        b[2] = self.target.kind.code();
        b[3..11].copy_from_slice(&self.target.id.to_be_bytes());
        b[11..19].copy_from_slice(&self.target_author.0.to_be_bytes());
        b[19..27].copy_from_slice(&self.actor.0.to_be_bytes());
        b[27..35].copy_from_slice(&self.ts_ms.to_be_bytes());
        b
    }

    /// Decode a value written by [`Event::encode`].
    pub fn decode(seq: u64, b: &[u8]) -> Result<Event, BadEvent> {
        if b.len() != EVENT_V1_LEN {
            return Err(BadEvent("wrong length"));
        }
        if b[0] != EVENT_FORMAT_V1 {
            return Err(BadEvent("unknown format version"));
        }
        let kind = EventKind::from_code(b[1]).ok_or(BadEvent("unknown event kind"))?;
        let tkind = TargetKind::from_code(b[2]).ok_or(BadEvent("unknown target kind"))?;
        let u = |r: std::ops::Range<usize>| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[r]);
            u64::from_be_bytes(a)
        };
        Ok(Event {
            seq,
            kind,
            target: Target { kind: tkind, id: u(3..11) },
            target_author: UserId(u(11..19)),
            actor: UserId(u(19..27)),
            ts_ms: u(27..35),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn events_round_trip(seq: u64, created: bool, post: bool, id: u64, author: u64, actor: u64, ts: u64) {
            let e = Event {
                seq,
                kind: if created { EventKind::LikeCreated } else { EventKind::LikeRemoved },
                target: if post { Target::post(id) } else { Target::comment(id) },
                target_author: UserId(author),
                actor: UserId(actor),
                ts_ms: ts,
            };
            prop_assert_eq!(Event::decode(seq, &e.encode()), Ok(e));
        }
    }

    #[test]
    fn unknown_versions_are_rejected() {
        let mut b = Event {
            seq: 1,
            kind: EventKind::LikeCreated,
            target: Target::post(1),
            target_author: UserId(2),
            actor: UserId(3),
            ts_ms: 4,
        }
        .encode();
        b[0] = 9;
        assert!(Event::decode(1, &b).is_err());
        assert!(Event::decode(1, &b[..10]).is_err());
    }
}
