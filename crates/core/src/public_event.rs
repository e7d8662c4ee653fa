//! The public event contract: the JSON form of log events that other systems consume
//! (docs/api.md, "Events (for other systems)"; documented field by field in `docs/events.md`).
//!
//! The internal log keeps its compact binary records; this is the stable, versioned form
//! published to export destinations. A change that breaks a consumer of version 1 needs a new
//! `schema_version`; adding an optional field does not.
//!
//! **Event IDs.** On the embedded engine every event has its own log sequence. On the
//! scale-out engine one stream message holds one transaction's events and every event in it
//! shares the message's stream sequence; the position inside the message tells them apart.
//! A message is always delivered whole and byte for byte the same, so `"{seq}.{index}"` is
//! unique and stable across redelivery on both engines.

use crate::event::{Event, EventKind};
use crate::like::TargetKind;
use serde::Serialize;

/// The version of the public event format this build writes.
pub const SCHEMA_VERSION: u32 = 1;

/// The JSON Schema (draft 2020-12) of a public event, served at `GET /v1/events/schema.json`.
pub const SCHEMA_JSON: &str = include_str!("public_event.schema.json");

/// One event as other systems see it. IDs are decimal strings, as everywhere in the API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PublicEvent {
    /// Unique and stable across redelivery: `"{seq}.{index}"` (see the module docs).
    pub event_id: String,
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `like_created`, `like_removed`, `comment_created`, `comment_status_changed`,
    /// `comment_deleted`.
    pub kind: &'static str,
    /// `post` or `comment`.
    pub target_type: &'static str,
    /// The liked post or comment, or the comment concerned.
    pub target_id: String,
    /// The post the target belongs to.
    pub post_id: String,
    /// Likes: the target's author; comment events: the post's author.
    pub target_author_id: String,
    /// Likes: the liker; comment events: the comment's author.
    pub actor_id: String,
    /// A reply's top-level parent comment; null otherwise.
    pub parent_id: Option<String>,
    /// Likes: +1/-1 on the target's like count; comment events: the change of visibility.
    pub delta: i8,
    /// When the change was made, RFC 3339 UTC with milliseconds.
    pub occurred_at: String,
    /// The log position this event came from (not part of the JSON: consumers commit it).
    #[serde(skip)]
    pub seq: u64,
}

/// The public name of an event kind.
pub fn kind_name(kind: EventKind) -> &'static str {
    match kind {
        EventKind::LikeCreated => "like_created",
        EventKind::LikeRemoved => "like_removed",
        EventKind::CommentCreated => "comment_created",
        EventKind::CommentStatusChanged => "comment_status_changed",
        EventKind::CommentDeleted => "comment_deleted",
    }
}

/// RFC 3339 UTC with milliseconds, from milliseconds since the Unix epoch.
pub fn rfc3339_ms(ms: u64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

/// The public form of a run of events as a log read returns them (whole messages, in order):
/// events sharing a `seq` are numbered by their position among them.
pub fn public_events(events: &[Event]) -> Vec<PublicEvent> {
    let mut out = Vec::with_capacity(events.len());
    let mut index = 0u32;
    for (i, e) in events.iter().enumerate() {
        index = if i > 0 && events[i - 1].seq == e.seq { index + 1 } else { 0 };
        out.push(PublicEvent {
            event_id: format!("{}.{}", e.seq, index),
            schema_version: SCHEMA_VERSION,
            kind: kind_name(e.kind),
            target_type: match e.target.kind {
                TargetKind::Post => "post",
                TargetKind::Comment => "comment",
            },
            target_id: e.target.id.to_string(),
            post_id: e.post.to_string(),
            target_author_id: e.target_author.0.to_string(),
            actor_id: e.actor.0.to_string(),
            parent_id: (e.parent != 0).then(|| e.parent.to_string()),
            delta: e.delta,
            occurred_at: rfc3339_ms(e.ts_ms),
            seq: e.seq,
        });
    }
    out
}

/// Append the JSON of one event (its `index` among the events sharing its `seq`) to `out`:
/// byte for byte what serializing its [`PublicEvent`] gives, written straight from the event.
/// The export encodes every event of a storm, and the [`PublicEvent`] route costs a string
/// allocation per field and a calendar conversion per event.
pub fn write_json(out: &mut Vec<u8>, e: &Event, index: u32) {
    let mut n = itoa::Buffer::new();
    let mut id = |out: &mut Vec<u8>, name: &str, v: u64| {
        out.extend_from_slice(b",\"");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\":\"");
        out.extend_from_slice(n.format(v).as_bytes());
        out.push(b'"');
    };
    out.extend_from_slice(b"{\"event_id\":\"");
    out.extend_from_slice(itoa::Buffer::new().format(e.seq).as_bytes());
    out.push(b'.');
    out.extend_from_slice(itoa::Buffer::new().format(index).as_bytes());
    out.extend_from_slice(b"\",\"schema_version\":");
    out.extend_from_slice(itoa::Buffer::new().format(SCHEMA_VERSION).as_bytes());
    out.extend_from_slice(b",\"kind\":\"");
    out.extend_from_slice(kind_name(e.kind).as_bytes());
    out.extend_from_slice(b"\",\"target_type\":\"");
    out.extend_from_slice(match e.target.kind {
        TargetKind::Post => b"post".as_slice(),
        TargetKind::Comment => b"comment".as_slice(),
    });
    out.push(b'"');
    id(out, "target_id", e.target.id);
    id(out, "post_id", e.post);
    id(out, "target_author_id", e.target_author.0);
    id(out, "actor_id", e.actor.0);
    if e.parent != 0 {
        id(out, "parent_id", e.parent);
    } else {
        out.extend_from_slice(b",\"parent_id\":null");
    }
    out.extend_from_slice(b",\"delta\":");
    out.extend_from_slice(itoa::Buffer::new().format(e.delta).as_bytes());
    out.extend_from_slice(b",\"occurred_at\":\"");
    write_rfc3339_ms(out, e.ts_ms);
    out.extend_from_slice(b"\"}");
}

/// [`rfc3339_ms`] appended to `out`, without a calendar library: the civil date from the day
/// number (the proleptic Gregorian algorithm of Howard Hinnant's `civil_from_days`).
fn write_rfc3339_ms(out: &mut Vec<u8>, ms: u64) {
    // Past year 9999 the fixed-width form no longer holds: the general route.
    if ms >= 253_402_300_800_000 {
        out.extend_from_slice(rfc3339_ms(ms).as_bytes());
        return;
    }
    let days = (ms / 86_400_000) as i64;
    let in_day = ms % 86_400_000;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let digits = |out: &mut Vec<u8>, v: u64, width: u32| {
        for k in (0..width).rev() {
            out.push(b'0' + (v / 10u64.pow(k) % 10) as u8);
        }
    };
    digits(out, year as u64, 4);
    out.push(b'-');
    digits(out, month as u64, 2);
    out.push(b'-');
    digits(out, day as u64, 2);
    out.push(b'T');
    digits(out, in_day / 3_600_000, 2);
    out.push(b':');
    digits(out, in_day / 60_000 % 60, 2);
    out.push(b':');
    digits(out, in_day / 1_000 % 60, 2);
    out.push(b'.');
    digits(out, in_day % 1_000, 3);
    out.push(b'Z');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::UserId;
    use crate::like::Target;

    fn like(seq: u64, created: bool) -> Event {
        Event::like(seq, created, Target::post(42), UserId(7), UserId(9), 1_764_000_000_123, 42)
    }

    #[test]
    fn ids_are_unique_within_a_message_and_stable() {
        // Two messages: seq 5 holds three events, seq 6 one.
        let events = [like(5, true), like(5, false), like(5, true), like(6, true)];
        let ids: Vec<String> = public_events(&events).into_iter().map(|e| e.event_id).collect();
        assert_eq!(ids, ["5.0", "5.1", "5.2", "6.0"]);
        // Redelivered from the second message on: the same ID for the same event.
        let again: Vec<String> = public_events(&events[3..]).into_iter().map(|e| e.event_id).collect();
        assert_eq!(again, ["6.0"]);
    }

    #[test]
    fn fields_follow_the_contract() {
        let e = &public_events(&[like(1, false)])[0];
        assert_eq!(e.kind, "like_removed");
        assert_eq!(e.target_type, "post");
        assert_eq!(e.target_id, "42");
        assert_eq!(e.target_author_id, "7");
        assert_eq!(e.actor_id, "9");
        assert_eq!(e.parent_id, None);
        assert_eq!(e.delta, -1);
        assert_eq!(e.occurred_at, "2025-11-24T16:00:00.123Z");
    }

    proptest::proptest! {
        /// The export's direct encoding is byte for byte the serialized public event.
        #[test]
        fn direct_json_is_the_serialized_public_event(
            seq in 0u64..u64::MAX,
            kind in 0u8..5,
            comment in proptest::bool::ANY,
            id in 0u64..u64::MAX,
            post in 0u64..u64::MAX,
            author in 0u64..u64::MAX,
            actor in 0u64..u64::MAX,
            parent in proptest::prop_oneof![proptest::strategy::Just(0u64), 1u64..u64::MAX],
            delta in -1i8..=1,
            ts in proptest::prop_oneof![0u64..4_102_444_800_000, 0u64..u64::MAX],
            repeat in 1usize..4,
            mention in proptest::option::of(1u64..u64::MAX),
        ) {
            let kind = [
                EventKind::LikeCreated,
                EventKind::LikeRemoved,
                EventKind::CommentCreated,
                EventKind::CommentStatusChanged,
                EventKind::CommentDeleted,
            ][kind as usize];
            let target = crate::like::Target {
                kind: if comment { TargetKind::Comment } else { TargetKind::Post },
                id,
            };
            let e = Event { seq, kind, target, target_author: UserId(author), actor: UserId(actor), parent,
                delta, ts_ms: ts, post, mention: mention.map(UserId) , trace: None};
            let events = vec![e; repeat];
            for (i, p) in public_events(&events).iter().enumerate() {
                let mut direct = Vec::new();
                write_json(&mut direct, &e, i as u32);
                // The @mention stays internal (the notifier's): schema version 1 is unchanged.
                let mut without = Vec::new();
                write_json(&mut without, &Event { mention: None, ..e }, i as u32);
                proptest::prop_assert_eq!(&direct, &without);
                proptest::prop_assert_eq!(
                    String::from_utf8(direct).expect("utf-8"),
                    serde_json::to_string(p).expect("json")
                );
            }
        }
    }

    #[test]
    fn the_schema_is_json_and_names_every_kind() {
        for kind in [
            EventKind::LikeCreated,
            EventKind::LikeRemoved,
            EventKind::CommentCreated,
            EventKind::CommentStatusChanged,
            EventKind::CommentDeleted,
        ] {
            assert!(SCHEMA_JSON.contains(&format!("\"{}\"", kind_name(kind))), "{kind:?}");
        }
        assert!(SCHEMA_JSON.trim_start().starts_with('{') && SCHEMA_JSON.trim_end().ends_with('}'));
    }
}
