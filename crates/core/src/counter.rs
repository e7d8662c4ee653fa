//! Counter aggregation: many event deltas in, one counter update per (target, field) out.
//!
//! The aggregator worker feeds every event of a window into a [`DeltaBatch`], then hands the
//! sums to the counter store together with the log position they cover, in one atomic write.
//! Deltas that cancel out (like then unlike) produce no write at all.

use crate::event::Event;
use crate::like::Target;
use std::collections::HashMap;

/// The offset name of the counter aggregator (per shard on the scale-out engine:
/// [`crate::ports::cluster::shard_consumer`]).
pub const COUNTERS_CONSUMER: &str = "counters";

/// Which counter of a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CounterField {
    /// Likes of a post or comment.
    Likes,
    /// Visible comments of a post.
    Comments,
    /// Visible replies of a top-level comment.
    Replies,
}

impl CounterField {
    /// Stable one-byte code used in stored keys.
    pub fn code(self) -> u8 {
        match self {
            CounterField::Likes => 1,
            CounterField::Comments => 2,
            CounterField::Replies => 3,
        }
    }

    /// Inverse of [`CounterField::code`].
    pub fn from_code(code: u8) -> Option<Self> {
        [CounterField::Likes, CounterField::Comments, CounterField::Replies]
            .into_iter()
            .find(|f| f.code() == code)
    }
}

/// One counter: a field of a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CounterKey {
    /// The post or comment.
    pub target: Target,
    /// Which of its counters.
    pub field: CounterField,
}

/// The counters of one target, as read by the read path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Like count.
    pub likes: i64,
    /// Visible comment count (posts).
    pub comments: i64,
    /// Visible reply count (top-level comments).
    pub replies: i64,
}

impl Counts {
    /// Add a delta to one field.
    pub fn add(&mut self, field: CounterField, delta: i64) {
        match field {
            CounterField::Likes => self.likes += delta,
            CounterField::Comments => self.comments += delta,
            CounterField::Replies => self.replies += delta,
        }
    }
}

/// Deltas summed over a window of events.
#[derive(Debug, Default)]
pub struct DeltaBatch {
    sums: HashMap<CounterKey, i64>,
    last_seq: Option<u64>,
    events: u64,
}

impl DeltaBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fold one event in. Events must be added in log order.
    pub fn add(&mut self, event: &Event) {
        if event.kind.is_like() {
            self.add_delta(CounterKey { target: event.target, field: CounterField::Likes }, event.delta());
        } else if event.delta != 0 {
            // A comment became (in)visible: the post's comment count moves, and for a reply
            // its top-level parent's reply count too.
            let post = CounterKey { target: Target::post(event.post), field: CounterField::Comments };
            self.add_delta(post, event.delta());
            if event.parent != 0 {
                let parent =
                    CounterKey { target: Target::comment(event.parent), field: CounterField::Replies };
                self.add_delta(parent, event.delta());
            }
        }
        self.last_seq = Some(event.seq);
        self.events += 1;
    }

    /// Fold in a delta that did not come from an event (a reconciliation repair).
    pub fn add_delta(&mut self, key: CounterKey, delta: i64) {
        *self.sums.entry(key).or_insert(0) += delta;
    }

    /// The log position this batch covers up to (inclusive), if it saw any event.
    pub fn last_seq(&self) -> Option<u64> {
        self.last_seq
    }

    /// How many events were folded in.
    pub fn event_count(&self) -> u64 {
        self.events
    }

    /// True when no event and no repair was added.
    pub fn is_empty(&self) -> bool {
        self.events == 0 && self.sums.is_empty()
    }

    /// The non-zero sums, sorted by key (deterministic write order).
    pub fn into_deltas(self) -> Vec<(CounterKey, i64)> {
        let mut v: Vec<_> = self.sums.into_iter().filter(|(_, d)| *d != 0).collect();
        v.sort_unstable_by_key(|(k, _)| *k);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventKind;
    use crate::ids::UserId;
    use proptest::prelude::*;

    fn ev(seq: u64, post: u64, created: bool) -> Event {
        Event::like(seq, created, Target::post(post), UserId(1), UserId(seq), 0, post)
    }

    #[test]
    fn visible_replies_move_the_post_and_parent_counts() {
        let mut b = DeltaBatch::new();
        let reply = Event {
            seq: 1,
            kind: EventKind::CommentCreated,
            target: Target::comment(900),
            target_author: UserId(1),
            actor: UserId(2),
            ts_ms: 0,
            post: 42,
            parent: 800,
            delta: 1,
            mention: None,
            trace: None,
        };
        b.add(&reply);
        b.add(&Event { seq: 2, kind: EventKind::CommentStatusChanged, delta: 0, ..reply });
        let d = b.into_deltas();
        assert_eq!(
            d,
            vec![
                (CounterKey { target: Target::post(42), field: CounterField::Comments }, 1),
                (CounterKey { target: Target::comment(800), field: CounterField::Replies }, 1),
            ]
        );
    }

    #[test]
    fn like_then_unlike_writes_nothing() {
        let mut b = DeltaBatch::new();
        b.add(&ev(1, 42, true));
        b.add(&ev(2, 42, false));
        assert_eq!(b.last_seq(), Some(2));
        assert!(b.into_deltas().is_empty());
    }

    #[test]
    fn many_likes_on_one_post_become_one_update() {
        let mut b = DeltaBatch::new();
        for s in 1..=1000 {
            b.add(&ev(s, 42, true));
        }
        b.add(&ev(1001, 7, true));
        let d = b.into_deltas();
        assert_eq!(d.len(), 2);
        let key = CounterKey { target: Target::post(42), field: CounterField::Likes };
        assert_eq!(d.iter().find(|(k, _)| *k == key).map(|(_, v)| *v), Some(1000));
    }

    proptest! {
        #[test]
        fn batch_sums_equal_per_event_sums(evs in proptest::collection::vec((1u64..5, any::<bool>()), 0..200)) {
            let mut b = DeltaBatch::new();
            let mut expect: HashMap<u64, i64> = HashMap::new();
            for (i, (post, created)) in evs.iter().enumerate() {
                b.add(&ev(i as u64 + 1, *post, *created));
                *expect.entry(*post).or_insert(0) += if *created { 1 } else { -1 };
            }
            let got: HashMap<u64, i64> = b.into_deltas().into_iter().map(|(k, d)| (k.target.id, d)).collect();
            expect.retain(|_, d| *d != 0);
            prop_assert_eq!(got, expect);
        }
    }
}
