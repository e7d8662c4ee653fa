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
use std::sync::Arc;

/// A window of consecutive events, newest at the back, kept as the committed batches
/// themselves (shared, immutable): a reader clones the handles of the batches it needs under
/// the lock and copies the events after releasing it. Copying thousands of events under the
/// lock stalled the group-commit writer, which appends here after every commit (with the
/// export, trending and integrity consumers reading too, it cost the in-process storm a
/// third of its likes per second; docs/benchmarks.md).
pub(super) struct EventTail {
    chunks: VecDeque<Arc<[Event]>>,
    /// Events of the front chunk already dropped (by the cap or a truncation).
    front_skip: usize,
    /// Events held.
    len: usize,
    cap: usize,
}

/// What [`EventTail::read_after`] found: batches to copy from, outside the lock.
pub(super) struct TailRead {
    chunks: Vec<Arc<[Event]>>,
    /// Index of the first wanted event in the first chunk.
    start: usize,
    max: usize,
}

impl TailRead {
    /// The events, oldest first.
    pub(super) fn events(self) -> Vec<Event> {
        let mut out = Vec::with_capacity(self.max.min(self.chunks.iter().map(|c| c.len()).sum()));
        let mut skip = self.start;
        for c in &self.chunks {
            let want = self.max - out.len();
            out.extend(c[skip..].iter().take(want).copied());
            skip = 0;
        }
        out
    }
}

impl EventTail {
    /// An empty window of at most `cap` events.
    pub(super) fn new(cap: usize) -> Self {
        EventTail { chunks: VecDeque::new(), front_skip: 0, len: 0, cap }
    }

    fn clear(&mut self) {
        self.chunks.clear();
        self.front_skip = 0;
        self.len = 0;
    }

    fn first_seq(&self) -> Option<u64> {
        self.chunks.front().map(|c| c[self.front_skip].seq)
    }

    /// Append a committed batch's events (consecutive sequence numbers). Anything that does
    /// not continue the window (which the write path never produces) restarts it, so the
    /// window can never claim to hold an event it lacks.
    #[cfg(test)]
    pub(super) fn extend(&mut self, batch: &[Event]) {
        self.push(Arc::from(batch));
    }

    /// [`EventTail::extend`] with a batch the caller shared before taking the lock.
    pub(super) fn push(&mut self, batch: Arc<[Event]>) {
        let Some(first) = batch.first() else { return };
        let continues =
            self.chunks.back().is_none_or(|c| c[c.len() - 1].seq.checked_add(1) == Some(first.seq));
        let consecutive = batch.windows(2).all(|w| w[0].seq.checked_add(1) == Some(w[1].seq));
        if !continues || !consecutive {
            self.clear();
        }
        if !consecutive {
            return;
        }
        self.len += batch.len();
        self.chunks.push_back(batch);
        let excess = self.len.saturating_sub(self.cap);
        self.drop_front(excess);
    }

    /// Drop the `n` oldest events.
    fn drop_front(&mut self, mut n: usize) {
        while n > 0 {
            let Some(front) = self.chunks.front() else { return };
            let left = front.len() - self.front_skip;
            if left <= n {
                self.chunks.pop_front();
                self.front_skip = 0;
                self.len -= left;
                n -= left;
            } else {
                self.front_skip += n;
                self.len -= n;
                return;
            }
        }
    }

    /// Drop the events up to `upto`, as the keyspace's truncation does.
    pub(super) fn truncate(&mut self, upto: u64) {
        if let Some(first) = self.first_seq() {
            let n = upto.saturating_add(1).saturating_sub(first);
            self.drop_front(usize::try_from(n).unwrap_or(usize::MAX).min(self.len));
        }
    }

    /// Up to `max` events after `after`, oldest first, if the window holds every one of
    /// them; `None` when the window starts later (or is empty) and the keyspace must answer.
    pub(super) fn read_after(&self, after: u64, max: usize) -> Option<TailRead> {
        let first = self.first_seq()?;
        let from = after.checked_add(1)?;
        if from < first {
            return None;
        }
        let skip = usize::try_from(from - first).unwrap_or(usize::MAX);
        if skip >= self.len || max == 0 {
            return Some(TailRead { chunks: Vec::new(), start: 0, max: 0 });
        }
        // The chunk holding `from`: the last one starting at or before it.
        let at = self.chunks.partition_point(|c| c[0].seq <= from) - 1;
        let start = usize::try_from(from - self.chunks[at][0].seq).unwrap_or(usize::MAX);
        let mut chunks = Vec::new();
        let mut held = 0;
        for c in self.chunks.range(at..) {
            held += c.len() - if chunks.is_empty() { start } else { 0 };
            chunks.push(c.clone());
            if held >= max {
                break;
            }
        }
        Some(TailRead { chunks, start, max })
    }

    /// Events held, capacity, and bytes.
    pub(super) fn usage(&self) -> (usize, usize, usize) {
        let size = std::mem::size_of::<Event>();
        let held: usize = self.chunks.iter().map(|c| c.len()).sum();
        (self.len, self.cap, held * size + self.chunks.len() * 16)
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
        assert_eq!(seqs(&t.read_after(0, 10).expect("inside").events()), [1, 2, 3]);
        assert_eq!(seqs(&t.read_after(1, 1).expect("inside").events()), [2]);
        assert_eq!(t.read_after(3, 10).expect("at the head").events(), []);
        t.extend(&[ev(4), ev(5), ev(6)]);
        // The cap dropped 1 and 2: a reader at 0 or 1 must go to the keyspace.
        assert!(t.read_after(0, 10).is_none());
        assert!(t.read_after(1, 10).is_none());
        assert_eq!(seqs(&t.read_after(2, 10).expect("inside").events()), [3, 4, 5, 6]);
        assert_eq!(t.usage().0, 4);
        t.truncate(4);
        assert!(t.read_after(2, 10).is_none(), "truncated events are gone");
        assert_eq!(seqs(&t.read_after(4, 10).expect("inside").events()), [5, 6]);
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
                        trace: None,
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

    /// Batches of random sizes, random caps and truncations: the window answers exactly
    /// what a plain list of the same events, cut the same way, would.
    #[test]
    fn the_window_of_batches_answers_like_a_plain_list() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for _ in 0..200 {
            let cap = 1 + (next() % 40) as usize;
            let mut t = EventTail::new(cap);
            let mut model: VecDeque<u64> = VecDeque::new();
            let mut seq = 0u64;
            for _ in 0..30 {
                if next() % 5 == 0 {
                    let upto = seq.saturating_sub(next() % 10);
                    t.truncate(upto);
                    model.retain(|s| *s > upto);
                } else {
                    let n = 1 + next() % 12;
                    let batch: Vec<Event> = (seq + 1..=seq + n).map(ev).collect();
                    seq += n;
                    t.extend(&batch);
                    model.extend(seq + 1 - n..=seq);
                    while model.len() > cap {
                        model.pop_front();
                    }
                }
                assert_eq!(t.usage().0, model.len());
                for after in 0..=seq + 1 {
                    for max in [0, 1, 3, 50] {
                        let got = t.read_after(after, max).map(|r| seqs(&r.events()));
                        let want = match model.front() {
                            Some(first) if after + 1 >= *first => Some(
                                model.iter().copied().filter(|s| *s > after).take(max).collect::<Vec<_>>(),
                            ),
                            _ => None,
                        };
                        assert_eq!(got, want, "cap {cap}, after {after}, max {max}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_gap_restarts_the_window() {
        let mut t = EventTail::new(100);
        t.extend(&[ev(1), ev(2)]);
        t.extend(&[ev(5), ev(6)]);
        assert!(t.read_after(1, 10).is_none(), "3 and 4 are not held");
        assert_eq!(seqs(&t.read_after(4, 10).expect("inside").events()), [5, 6]);
        t.extend(&[ev(7), ev(9)]);
        assert!(t.read_after(6, 10).is_none(), "a batch with a gap is not held");
    }
}
