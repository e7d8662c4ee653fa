//! The embedded engine's write path: one fjall batch per group-commit batch, holding likes and
//! comment changes in arrival order. Each module contributes its ops (`likes.rs`,
//! `comments.rs`); this file owns the batch, the event sequence and the commit.

use super::{EmbeddedStore, Inner, engine_err};
use likewise_core::StoreResult;
use likewise_core::event::Event;
use likewise_core::ports::WriteEngine;
use likewise_core::write::{WriteOp, WriteOutcome};
use std::sync::atomic::Ordering;

/// Everything a batch accumulates before its single commit.
pub(super) struct BatchState<'a> {
    pub(super) s: &'a Inner,
    pub(super) batch: fjall::OwnedWriteBatch,
    pub(super) seq: u64,
    /// The batch's first event sequence number: names the likers pages it writes.
    pub(super) first_seq: u64,
    pub(super) likes: super::likes::LikeOverlay,
    pub(super) comments: super::comments::CommentOverlay,
    /// This batch's events, decoded, for the in-memory tail once the batch is committed.
    pub(super) events: Vec<Event>,
}

impl<'a> BatchState<'a> {
    /// Append an event with the next sequence number; returns it. The batch's events are
    /// written together, as one packed row, by `apply`.
    pub(super) fn event(&mut self, mut e: Event) -> u64 {
        e.seq = self.seq;
        self.events.push(e);
        self.seq += 1;
        e.seq
    }
}

impl WriteEngine for EmbeddedStore {
    fn apply(&self, ops: &[WriteOp]) -> StoreResult<Vec<WriteOutcome>> {
        let s = &*self.inner;
        let _serial = s.write_lock.lock();
        let first_seq = s.next_seq.load(Ordering::SeqCst);
        let mut st = BatchState {
            s,
            // Sized up front (a like writes at most three rows, a comment change about as many,
            // plus the batch's one event row): growing it by doubling showed in profiles as
            // fresh pages zeroed on the writer thread.
            batch: fjall::OwnedWriteBatch::with_capacity(s.db.clone(), ops.len() * 3 + 1).durability(None),
            seq: first_seq,
            first_seq,
            likes: Default::default(),
            comments: Default::default(),
            events: Vec::with_capacity(ops.len()),
        };
        let now = crate::now_ms();
        let mut out = Vec::with_capacity(ops.len());
        for op in ops {
            out.push(match op {
                WriteOp::Like(l) => WriteOutcome::Like(st.like(l)?),
                WriteOp::Comment(c) => WriteOutcome::Comment(st.comment(c, now)?),
            });
        }
        st.flush_likes()?;
        st.flush_comments();
        // The whole batch's events as ONE row, keyed by the first one's sequence: an event
        // row per like cost the writer a quarter of its likes per second (docs/benchmarks.md).
        if let Some(first) = st.events.first() {
            st.batch.insert(&s.events, first.seq.to_be_bytes(), likewise_core::event::pack(&st.events));
        }
        let seq = st.seq;
        st.batch.commit().map_err(engine_err)?;
        // Into the tail before `next_seq` moves, still under the write lock: the tail then
        // never misses an event that a reader could already find in the keyspace.
        s.tail.lock().extend(&st.events);
        s.next_seq.store(seq, Ordering::SeqCst);
        if st.likes.reads_skipped > 0 {
            metrics::counter!("likewise_store_like_reads_skipped_total").increment(st.likes.reads_skipped);
        }
        Ok(out)
    }

    fn sync(&self) -> StoreResult<()> {
        // Not `persist`: that holds fjall's journal lock through the fsync, so the writer
        // could not commit the next batch meanwhile (`journal_sync.rs`).
        self.inner.journal_sync.sync(&self.inner.db)
    }
}
