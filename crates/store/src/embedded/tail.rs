//! The newest events of the log, kept decoded in memory.
//!
//! Three consumers on a node follow the head of the event log: the counter aggregator, the
//! notifier and the ranker. Reading the `events` keyspace, each of them walked the memtable
//! and decoded every record, so each like was read and decoded three times (6% of a like's
//! server CPU in a profile of the HTTP hot-post run). The write path already holds every
//! event decoded when it commits it, so it appends the batch's events here, after the commit
//! and under the write lock. `read_after` answers from here whenever the whole answer lies
//! inside the window and reads the keyspace otherwise: after a restart (the window starts
//! empty) or for a consumer that lags by more than the window. The window holds at most
//! `cap` events, so its memory is bounded; `/metrics` reports it as the `event_tail` cache.
//!
//! What a consumer sees is unchanged: the same events in the same order, visible at the same
//! moment (after the batch's commit, as the keyspace makes them visible).

use likewise_core::event::Event;
use std::collections::VecDeque;

/// A window of consecutive events, newest at the back.
pub(super) struct EventTail {
    events: VecDeque<Event>,
    cap: usize,
}

impl EventTail {
    /// An empty window of at most `cap` events.
    pub(super) fn new(cap: usize) -> Self {
        EventTail { events: VecDeque::new(), cap }
    }

    /// Append a committed batch's events (consecutive sequence numbers). Anything that does
    /// not continue the window (which the write path never produces) restarts it, so the
    /// window can never claim to hold an event it lacks.
    pub(super) fn extend(&mut self, batch: &[Event]) {
        let Some(first) = batch.first() else { return };
        let continues = self.events.back().is_none_or(|last| last.seq.checked_add(1) == Some(first.seq));
        let consecutive = batch.windows(2).all(|w| w[0].seq.checked_add(1) == Some(w[1].seq));
        if !continues || !consecutive {
            self.events.clear();
        }
        if !consecutive {
            return;
        }
        self.events.extend(batch.iter().copied());
        let excess = self.events.len().saturating_sub(self.cap);
        self.events.drain(..excess);
    }

    /// Drop the events up to `upto`, as the keyspace's truncation does.
    pub(super) fn truncate(&mut self, upto: u64) {
        while self.events.front().is_some_and(|e| e.seq <= upto) {
            self.events.pop_front();
        }
    }

    /// Up to `max` events after `after`, oldest first, if the window holds every one of
    /// them; `None` when the window starts later (or is empty) and the keyspace must answer.
    pub(super) fn read_after(&self, after: u64, max: usize) -> Option<Vec<Event>> {
        let first = self.events.front()?.seq;
        let from = after.checked_add(1)?;
        if from < first {
            return None;
        }
        let skip = usize::try_from(from - first).unwrap_or(usize::MAX);
        if skip >= self.events.len() {
            return Some(Vec::new());
        }
        Some(self.events.range(skip..).take(max).copied().collect())
    }

    /// Events held, capacity, and bytes.
    pub(super) fn usage(&self) -> (usize, usize, usize) {
        let size = std::mem::size_of::<Event>();
        (self.events.len(), self.cap, self.events.capacity() * size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use likewise_core::ids::UserId;
    use likewise_core::like::Target;

    fn ev(seq: u64) -> Event {
        Event::like(seq, true, Target::post(1), UserId(2), UserId(seq), seq, 1)
    }

    fn seqs(v: &[Event]) -> Vec<u64> {
        v.iter().map(|e| e.seq).collect()
    }

    #[test]
    fn answers_only_what_the_window_fully_holds() {
        let mut t = EventTail::new(4);
        assert!(t.read_after(0, 10).is_none(), "an empty window answers nothing");
        t.extend(&[ev(1), ev(2), ev(3)]);
        assert_eq!(seqs(&t.read_after(0, 10).expect("inside")), [1, 2, 3]);
        assert_eq!(seqs(&t.read_after(1, 1).expect("inside")), [2]);
        assert_eq!(t.read_after(3, 10).expect("at the head"), []);
        t.extend(&[ev(4), ev(5), ev(6)]);
        // The cap dropped 1 and 2: a reader at 0 or 1 must go to the keyspace.
        assert!(t.read_after(0, 10).is_none());
        assert!(t.read_after(1, 10).is_none());
        assert_eq!(seqs(&t.read_after(2, 10).expect("inside")), [3, 4, 5, 6]);
        assert_eq!(t.usage().0, 4);
        t.truncate(4);
        assert!(t.read_after(2, 10).is_none(), "truncated events are gone");
        assert_eq!(seqs(&t.read_after(4, 10).expect("inside")), [5, 6]);
    }

    /// Through the real write path, with a small window: every read answers exactly what
    /// the keyspace holds, whether the window or the keyspace serves it.
    #[tokio::test]
    async fn the_store_answers_from_the_window_exactly_as_from_the_keyspace() {
        use crate::embedded::{EmbeddedOptions, EmbeddedStore};
        use likewise_core::like::{LikeAction, LikeOp};
        use likewise_core::ports::{EventLog, WriteEngine};
        use likewise_core::write::WriteOp;
        let dir = tempfile::tempdir().expect("tempdir");
        let store = EmbeddedStore::open(dir.path(), &EmbeddedOptions::default()).expect("open");
        *store.inner.tail.lock() = EventTail::new(50);
        for round in 0..30u64 {
            // Seven ops a batch; a repeated like and an unlike of nothing change nothing.
            let ops: Vec<WriteOp> = (0..7u64)
                .map(|i| {
                    let action = if i == 6 { LikeAction::Unlike } else { LikeAction::Like };
                    let user = if i == 5 { round * 10 } else { round * 10 + i };
                    let (target, post) = (Target::post(1 + round % 3), 1 + round % 3);
                    WriteOp::Like(LikeOp {
                        target,
                        user: UserId(user),
                        action,
                        target_author: UserId(9),
                        post,
                        ts_ms: round,
                    })
                })
                .collect();
            store.apply(&ops).expect("apply");
        }
        let head = store.head().await.expect("head");
        assert_eq!(head, 30 * 5, "five changes a batch");
        let (held, _, _) = store.event_tail_usage();
        assert_eq!(held, 50);
        let mut from_window = 0;
        for after in 0..=head + 1 {
            for max in [1, 4, 60, 1_000] {
                let got = store.read_after(after, max).await.expect("read");
                let want =
                    crate::embedded::counters::read_events(&store.inner.db, &store.inner.events, after, max)
                        .expect("scan");
                assert_eq!(got, want, "after {after}, max {max}");
                from_window += usize::from(store.inner.tail.lock().read_after(after, max).is_some());
            }
        }
        assert!(from_window > 100, "the window answered {from_window} reads");
    }

    #[test]
    fn a_gap_restarts_the_window() {
        let mut t = EventTail::new(100);
        t.extend(&[ev(1), ev(2)]);
        t.extend(&[ev(5), ev(6)]);
        assert!(t.read_after(1, 10).is_none(), "3 and 4 are not held");
        assert_eq!(seqs(&t.read_after(4, 10).expect("inside")), [5, 6]);
        t.extend(&[ev(7), ev(9)]);
        assert!(t.read_after(6, 10).is_none(), "a batch with a gap is not held");
    }
}
