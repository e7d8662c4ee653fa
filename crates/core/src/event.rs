//! Engagement events: the append-only log (transactional outbox) every consumer reads.
//!
//! An event is written in the same atomic batch as the state change that caused it, and only
//! when the state really changed. Its `seq` is its position in the log and its ID: strictly
//! increasing, never reused. Each event carries what consumers need without looking anything
//! up: the target and its author, the actor, the post concerned, the top-level parent of a
//! reply, the counter delta the change implies, and the user a reply @mentions. The stored
//! form is a small versioned binary record; versions 1 (likes only) and 2 (no @mention) are
//! still read. A write made under a sampled trace also carries its W3C trace context (format
//! 4), so consumers continue the request's trace; every other event stays a format-3 record.

use crate::ids::UserId;
use crate::like::{Target, TargetKind};
use crate::trace::TraceContext;

/// Format version 1: likes only, no post/parent/delta fields.
pub const EVENT_FORMAT_V1: u8 = 1;
/// Format version 2: adds post, parent and delta.
pub const EVENT_FORMAT_V2: u8 = 2;
/// Format version 3 (current for untraced writes): adds the @mentioned user.
pub const EVENT_FORMAT_V3: u8 = 3;
/// Format version 4: a format-3 record followed by the trace context of the write (written
/// only for a write made under a sampled trace).
pub const EVENT_FORMAT_V4: u8 = 4;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A like row was created (target: post or comment).
    LikeCreated,
    /// A like row was removed.
    LikeRemoved,
    /// A comment was written (target: the comment).
    CommentCreated,
    /// A comment's status changed (moderation, approval).
    CommentStatusChanged,
    /// A comment was deleted.
    CommentDeleted,
}

impl EventKind {
    fn code(self) -> u8 {
        match self {
            EventKind::LikeCreated => 1,
            EventKind::LikeRemoved => 2,
            EventKind::CommentCreated => 3,
            EventKind::CommentStatusChanged => 4,
            EventKind::CommentDeleted => 5,
        }
    }
    fn from_code(c: u8) -> Option<Self> {
        match c {
            1 => Some(EventKind::LikeCreated),
            2 => Some(EventKind::LikeRemoved),
            3 => Some(EventKind::CommentCreated),
            4 => Some(EventKind::CommentStatusChanged),
            5 => Some(EventKind::CommentDeleted),
            _ => None,
        }
    }
    /// The name used in logs and documentation.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::LikeCreated => "LikeCreated",
            EventKind::LikeRemoved => "LikeRemoved",
            EventKind::CommentCreated => "CommentCreated",
            EventKind::CommentStatusChanged => "CommentStatusChanged",
            EventKind::CommentDeleted => "CommentDeleted",
        }
    }
    /// A like event (its delta moves the target's like count).
    pub fn is_like(self) -> bool {
        matches!(self, EventKind::LikeCreated | EventKind::LikeRemoved)
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
    /// The target's author (the post's author for a post like or a top-level comment).
    pub target_author: UserId,
    /// Who acted.
    pub actor: UserId,
    /// When, milliseconds since the Unix epoch.
    pub ts_ms: u64,
    /// The post the target belongs to (the post itself for a post like).
    pub post: u64,
    /// For a reply: its top-level parent comment; else 0.
    pub parent: u64,
    /// The counter delta of this change: for likes the target's like count (+1/-1); for
    /// comment events the post's visible-comment count and the parent's reply count (+1, -1
    /// or 0 when visibility did not change).
    pub delta: i8,
    /// For every event of a reply to a reply: the user it @mentions (whom the notifier
    /// notifies, and withdraws from when the reply goes, its record gone or not); else
    /// `None`, as in records of formats 1 and 2, which do not carry it.
    pub mention: Option<UserId>,
    /// The trace context of the request that made the change, when its trace is sampled
    /// (format 4); else `None`.
    pub trace: Option<TraceContext>,
}

/// Length of an encoded v1 event (the sequence is the key, not part of the value).
pub const EVENT_V1_LEN: usize = 1 + 1 + 1 + 8 + 8 + 8 + 8;
/// Length of an encoded v2 event.
pub const EVENT_V2_LEN: usize = EVENT_V1_LEN + 8 + 8 + 1;
/// Length of an encoded v3 event (the current format of an untraced event).
pub const EVENT_V3_LEN: usize = EVENT_V2_LEN + 8;
/// Length of an encoded v4 event (a traced one).
pub const EVENT_V4_LEN: usize = EVENT_V3_LEN + TraceContext::LEN;

/// The length of an encoded event of format `version`, if it is one this build reads.
pub fn encoded_len(version: u8) -> Option<usize> {
    match version {
        EVENT_FORMAT_V1 => Some(EVENT_V1_LEN),
        EVENT_FORMAT_V2 => Some(EVENT_V2_LEN),
        EVENT_FORMAT_V3 => Some(EVENT_V3_LEN),
        EVENT_FORMAT_V4 => Some(EVENT_V4_LEN),
        _ => None,
    }
}

/// Why an event record could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad event record: {0}")]
pub struct BadEvent(pub &'static str);

impl Event {
    /// A like/unlike event.
    pub fn like(
        seq: u64,
        created: bool,
        target: Target,
        target_author: UserId,
        actor: UserId,
        ts_ms: u64,
        post: u64,
    ) -> Self {
        Event {
            seq,
            kind: if created { EventKind::LikeCreated } else { EventKind::LikeRemoved },
            target,
            target_author,
            actor,
            ts_ms,
            post,
            parent: 0,
            delta: if created { 1 } else { -1 },
            mention: None,
            trace: None,
        }
    }

    /// The same event, carrying `trace` (the write's context, when sampled).
    pub fn traced(self, trace: Option<TraceContext>) -> Self {
        Event { trace, ..self }
    }

    /// The length of [`Event::encode`]'s record.
    pub fn encoded_len(&self) -> usize {
        if self.trace.is_some() { EVENT_V4_LEN } else { EVENT_V3_LEN }
    }

    /// The counter delta this event carries.
    pub fn delta(&self) -> i64 {
        i64::from(self.delta)
    }

    /// Encode the value part (everything but `seq`): format 4 for a traced event, else 3.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.encoded_len());
        self.encode_into(&mut b);
        b
    }

    /// Append [`Event::encode`]'s record to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let mut b = [0u8; EVENT_V3_LEN];
        b[0] = if self.trace.is_some() { EVENT_FORMAT_V4 } else { EVENT_FORMAT_V3 };
        b[1] = self.kind.code();
        b[2] = self.target.kind.code();
        b[3..11].copy_from_slice(&self.target.id.to_be_bytes());
        b[11..19].copy_from_slice(&self.target_author.0.to_be_bytes());
        b[19..27].copy_from_slice(&self.actor.0.to_be_bytes());
        b[27..35].copy_from_slice(&self.ts_ms.to_be_bytes());
        b[35..43].copy_from_slice(&self.post.to_be_bytes());
        b[43..51].copy_from_slice(&self.parent.to_be_bytes());
        b[51] = self.delta as u8;
        b[52..60].copy_from_slice(&self.mention.map_or(0, |u| u.0).to_be_bytes());
        out.extend_from_slice(&b);
        if let Some(t) = &self.trace {
            out.extend_from_slice(&t.encode());
        }
    }

    /// Decode a value written by [`Event::encode`] (or by version 1 or 2).
    pub fn decode(seq: u64, b: &[u8]) -> Result<Event, BadEvent> {
        let version = *b.first().ok_or(BadEvent("empty"))?;
        let want = encoded_len(version).ok_or(BadEvent("unknown format version"))?;
        if b.len() != want {
            return Err(BadEvent("wrong length"));
        }
        let kind = EventKind::from_code(b[1]).ok_or(BadEvent("unknown event kind"))?;
        let tkind = TargetKind::from_code(b[2]).ok_or(BadEvent("unknown target kind"))?;
        let u = |at: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[at..at + 8]);
            u64::from_be_bytes(a)
        };
        let target = Target { kind: tkind, id: u(3) };
        let (post, parent, delta) = if version == EVENT_FORMAT_V1 {
            if !kind.is_like() || tkind != TargetKind::Post {
                return Err(BadEvent("version 1 holds post likes only"));
            }
            (target.id, 0, if kind == EventKind::LikeCreated { 1 } else { -1 })
        } else {
            (u(35), u(43), b[51] as i8)
        };
        let mention =
            if version >= EVENT_FORMAT_V3 { Some(u(52)).filter(|m| *m != 0).map(UserId) } else { None };
        let trace = if version == EVENT_FORMAT_V4 {
            Some(TraceContext::decode(&b[EVENT_V3_LEN..]).ok_or(BadEvent("invalid trace context"))?)
        } else {
            None
        };
        Ok(Event {
            seq,
            kind,
            target,
            target_author: UserId(u(11)),
            actor: UserId(u(19)),
            ts_ms: u(27),
            post,
            parent,
            delta,
            mention,
            trace,
        })
    }
}

/// Encode events back to back, each a current-format record (3, or 4 when traced): the
/// stored form of a *packed* log row, which holds the events of one write batch (embedded
/// engine) or one transaction's subject partition (PostgreSQL outbox) under one key. One row
/// per batch instead of one per event is what keeps the log cheap on the hot path.
pub fn pack<'a>(events: impl IntoIterator<Item = &'a Event>) -> Vec<u8> {
    let events = events.into_iter();
    let mut b = Vec::with_capacity(events.size_hint().0 * EVENT_V3_LEN);
    for e in events {
        e.encode_into(&mut b);
    }
    b
}

/// The records of a packed row, each with its length read from its own version byte:
/// version 3 and 4 records mix in a row (traced writes among untraced ones), and a version-1
/// record only ever stands alone (a row written before packing).
fn records(body: &[u8]) -> impl Iterator<Item = Result<&[u8], BadEvent>> {
    let (mut at, mut failed) = (0, false);
    let lone_v1 = body.first() == Some(&EVENT_FORMAT_V1);
    std::iter::from_fn(move || {
        if failed || (at == body.len() && at > 0) {
            return None;
        }
        let len = match body.get(at).and_then(|v| encoded_len(*v)) {
            Some(EVENT_V1_LEN) if !lone_v1 || body.len() != EVENT_V1_LEN => None,
            Some(n) if at + n <= body.len() => Some(n),
            _ => None,
        };
        let Some(n) = len else {
            failed = true;
            return Some(Err(BadEvent("packed row of a wrong length")));
        };
        at += n;
        Some(Ok(&body[at - n..at]))
    })
}

/// How many events a packed row holds: a lone version-1 record (a row written before
/// packing) or whole records of versions 2 to 4.
pub fn packed_len(body: &[u8]) -> Result<usize, BadEvent> {
    records(body).try_fold(0, |n, r| r.map(|_| n + 1))
}

/// Decode a packed row; `seq(i)` gives its i-th event its sequence. A row holding one
/// record of any version (the form before packing) decodes as a row of one.
pub fn unpack(body: &[u8], seq: impl Fn(usize) -> u64) -> Result<Vec<Event>, BadEvent> {
    records(body).enumerate().map(|(i, r)| Event::decode(seq(i), r?)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn kinds() -> impl Strategy<Value = EventKind> {
        (1u8..=5).prop_map(|c| EventKind::from_code(c).unwrap_or(EventKind::LikeCreated))
    }

    proptest! {
        #[test]
        fn events_round_trip(seq: u64, kind in kinds(), post_target: bool, id: u64, author: u64, actor: u64,
                             ts: u64, post: u64, parent: u64, delta in -1i8..=1, mention in proptest::option::of(1u64..),
                       trace in proptest::option::of((1u128.., 1u64.., any::<u8>()))) {
            let e = Event {
                seq,
                kind,
                target: if post_target { Target::post(id) } else { Target::comment(id) },
                target_author: UserId(author),
                actor: UserId(actor),
                ts_ms: ts,
                post,
                parent,
                delta,
                mention: mention.map(UserId),
                trace: trace.and_then(|(t, s, f)| TraceContext::new(t.to_be_bytes(), s.to_be_bytes(), f)),
            };
            prop_assert_eq!(Event::decode(seq, &e.encode()), Ok(e));
        }
    }

    #[test]
    fn traced_events_are_format_4_and_mix_with_untraced_ones_in_a_row() {
        let plain = Event::like(1, true, Target::post(7), UserId(1), UserId(2), 3, 7);
        // An untraced event costs not one byte more than before.
        assert_eq!((plain.encode()[0], plain.encode().len()), (EVENT_FORMAT_V3, EVENT_V3_LEN));
        let traced = plain.traced(TraceContext::new([7; 16], [9; 8], 1));
        let record = traced.encode();
        assert_eq!((record[0], record.len()), (EVENT_FORMAT_V4, EVENT_V4_LEN));
        assert_eq!(Event::decode(1, &record), Ok(traced));
        let row = pack([&plain, &traced, &plain]);
        assert_eq!(row.len(), 2 * EVENT_V3_LEN + EVENT_V4_LEN);
        assert_eq!(packed_len(&row), Ok(3));
        assert_eq!(
            unpack(&row, |i| 1 + i as u64),
            Ok(vec![plain, Event { seq: 2, ..traced }, Event { seq: 3, ..plain }])
        );
        assert!(unpack(&row[..row.len() - 1], |i| i as u64).is_err());
        assert!(packed_len(&row[..EVENT_V3_LEN + 1]).is_err());
        // A record whose trace context is all zeros is refused, never half-read.
        let mut zero = record.clone();
        zero[EVENT_V3_LEN..].fill(0);
        assert!(Event::decode(1, &zero).is_err());
    }

    #[test]
    fn version_1_records_still_decode() {
        let mut b = [0u8; EVENT_V1_LEN];
        b[0] = EVENT_FORMAT_V1;
        b[1] = 2; // LikeRemoved
        b[2] = 1; // post
        b[3..11].copy_from_slice(&42u64.to_be_bytes());
        let e = Event::decode(9, &b).expect("v1");
        assert_eq!((e.kind, e.post, e.delta(), e.parent), (EventKind::LikeRemoved, 42, -1, 0));
    }

    /// A version-2 record: `e` as the previous release wrote it (no @mention).
    fn v2(e: &Event) -> Vec<u8> {
        let mut b = e.encode()[..EVENT_V2_LEN].to_vec();
        b[0] = EVENT_FORMAT_V2;
        b
    }

    #[test]
    fn version_2_records_and_rows_still_decode_without_a_mention() {
        let reply = Event {
            seq: 0,
            kind: EventKind::CommentDeleted,
            target: Target::comment(5),
            target_author: UserId(7),
            actor: UserId(8),
            ts_ms: 1_000,
            post: 42,
            parent: 4,
            delta: -1,
            mention: Some(UserId(9)),
            trace: None,
        };
        let without = Event { mention: None, ..reply };
        assert_eq!(Event::decode(0, &v2(&reply)), Ok(without));
        let row: Vec<u8> = [v2(&reply), v2(&reply)].concat();
        assert_eq!(packed_len(&row), Ok(2));
        assert_eq!(unpack(&row, |i| i as u64), Ok(vec![without, Event { seq: 1, ..without }]));
        // The current format keeps it.
        assert_eq!(unpack(&pack([&reply, &reply]), |_| 0), Ok(vec![reply, reply]));
    }

    #[test]
    fn unknown_versions_and_lengths_are_rejected() {
        let e = Event::like(1, true, Target::post(1), UserId(2), UserId(3), 4, 1);
        let mut b = e.encode();
        assert!(Event::decode(1, &b[..10]).is_err());
        b[0] = 9;
        assert!(Event::decode(1, &b).is_err());
        assert!(Event::decode(1, &[]).is_err());
    }

    #[test]
    fn packed_rows_round_trip_and_read_unpacked_rows() {
        let events: Vec<Event> = (0..5u64)
            .map(|i| Event::like(100 + i, i % 2 == 0, Target::post(7), UserId(1), UserId(i), i, 7))
            .collect();
        let body = pack(&events);
        assert_eq!(packed_len(&body), Ok(5));
        assert_eq!(unpack(&body, |i| 100 + i as u64), Ok(events.clone()));
        // A row written before packing: one record, either version.
        assert_eq!(unpack(&events[0].encode(), |_| 100), Ok(vec![events[0]]));
        let mut v1 = [0u8; EVENT_V1_LEN];
        v1[0] = EVENT_FORMAT_V1;
        v1[1] = 1;
        v1[2] = 1;
        assert_eq!(packed_len(&v1), Ok(1));
        assert_eq!(unpack(&v1, |_| 3).map(|v| v[0].seq), Ok(3));
        // Torn or foreign bodies are refused, never half-read.
        assert!(unpack(&body[..body.len() - 1], |i| i as u64).is_err());
        assert!(unpack(&[], |i| i as u64).is_err());
        let mut bad = body.clone();
        bad[EVENT_V3_LEN] = 9;
        assert!(unpack(&bad, |i| i as u64).is_err());
    }
}
