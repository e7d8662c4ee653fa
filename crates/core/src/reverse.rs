//! The user-keyed reverse index of a sharded deployment (docs/architecture.md, "Scale-out": "what did I like",
//! a second write made from the outbox's events, not in the request): which rows a round of
//! like events leaves, whoever writes them.
//!
//! A post's events arrive in commit order, so within a round the last event of a key is its
//! final state. A key unliked anywhere in the round has its old row removed first, so that a
//! relike inserts into an empty slot: outside a replay, an insert then never meets a row.

use crate::event::{Event, EventKind};
use crate::ids::UserId;
use crate::like::Target;
use std::collections::HashMap;

/// One key's net change in a round of like events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReverseChange {
    /// The liker.
    pub user: UserId,
    /// What was liked.
    pub target: Target,
    /// The final state: `Some(liked_at)` when the last event liked it, `None` when unliked.
    pub liked_at: Option<u64>,
    /// The key was unliked somewhere in the round: an old row goes first.
    pub unliked: bool,
}

/// Collapse a round of events (in log order) to each like key's final state, sorted by key.
/// Events that are not likes are ignored.
pub fn reverse_changes(events: &[Event]) -> Vec<ReverseChange> {
    let mut last: HashMap<(UserId, Target), ReverseChange> = HashMap::new();
    for e in events.iter().filter(|e| e.kind.is_like()) {
        let created = e.kind == EventKind::LikeCreated;
        let liked_at = created.then_some(e.ts_ms);
        last.entry((e.actor, e.target))
            .and_modify(|c| {
                c.liked_at = liked_at;
                c.unliked |= !created;
            })
            .or_insert(ReverseChange { user: e.actor, target: e.target, liked_at, unliked: !created });
    }
    let mut out: Vec<ReverseChange> = last.into_values().collect();
    out.sort_by_key(|c| (c.user, c.target));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(seq: u64, created: bool, user: u64, post: u64, ts: u64) -> Event {
        Event::like(seq, created, Target::post(post), UserId(1), UserId(user), ts, post)
    }

    #[test]
    fn the_last_event_of_a_key_is_its_final_state() {
        let round = [
            ev(1, true, 7, 42, 100),
            ev(2, false, 7, 42, 101),
            ev(3, true, 7, 42, 102),
            ev(4, true, 8, 42, 103),
        ];
        assert_eq!(
            reverse_changes(&round),
            vec![
                ReverseChange {
                    user: UserId(7),
                    target: Target::post(42),
                    liked_at: Some(102),
                    unliked: true
                },
                ReverseChange {
                    user: UserId(8),
                    target: Target::post(42),
                    liked_at: Some(103),
                    unliked: false
                },
            ]
        );
    }

    #[test]
    fn an_unlike_last_leaves_no_row() {
        let round = [ev(1, true, 7, 42, 100), ev(2, false, 7, 42, 101)];
        assert_eq!(
            reverse_changes(&round),
            vec![ReverseChange { user: UserId(7), target: Target::post(42), liked_at: None, unliked: true }]
        );
    }
}
