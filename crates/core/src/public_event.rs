//! The public event contract: the JSON form of log events that other systems consume
//! (API.md, "Events (for other systems)"; documented field by field in `docs/events.md`).
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
