//! The embedded engine's write path: one fjall batch per group-commit batch, holding likes and
//! comment changes in arrival order. Each module resolves its ops against its own overlay
//! (`likes.rs`, `comments.rs`) into the shared [`Batch`] (`batch.rs`); this file drives them
//! and owns the commit.

use super::batch::Batch;
use super::comments::CommentOverlay;
use super::idempotency::KeyOverlay;
use super::likes::LikeOverlay;
use super::state::EmbeddedStore;
use likewise_core::StoreResult;
use likewise_core::ports::WriteEngine;
use likewise_core::write::{WriteOp, WriteOutcome};
use std::sync::atomic::Ordering;

impl WriteEngine for EmbeddedStore {
    fn apply(&self, ops: &[WriteOp]) -> StoreResult<Vec<WriteOutcome>> {
        let s = &*self.inner;
        // Refused whole, before anything is written, while the disk is nearly full.
        s.space.check()?;
        let _serial = s.write_lock.lock();
        let first_seq = s.next_seq.load(Ordering::SeqCst);
        let mut st = Batch {
            s,
            // Sized up front (a like writes at most three rows, a comment change about as many,
            // plus the batch's one event row): growing it by doubling showed in profiles as
            // fresh pages zeroed on the writer thread.
            batch: fjall::OwnedWriteBatch::with_capacity(s.db.clone(), ops.len() * 3 + 1).durability(None),
            seq: first_seq,
            first_seq,
            events: Vec::with_capacity(ops.len()),
        };
        let mut likes = LikeOverlay::default();
        let mut comments = CommentOverlay::default();
        let mut keys = KeyOverlay::default();
        let now = likewise_engine::now_ms();
        let mut out = Vec::with_capacity(ops.len());
        for op in ops {
            out.push(match op {
                WriteOp::Like(l) => WriteOutcome::Like(likes.like(&mut st, l)?),
                WriteOp::Comment(c) => WriteOutcome::Comment(comments.apply(&mut st, c, now)?),
                WriteOp::KeyedComment(rec, held_by, keyed) => {
                    WriteOutcome::Comment(keys.apply(&mut st, &mut comments, rec, *held_by, keyed, now)?)
                }
            });
        }
        likes.flush(&mut st)?;
        comments.flush(&mut st);
        // The whole batch's events as ONE row, keyed by the first one's sequence: an event
        // row per like cost the writer a quarter of its likes per second (docs/benchmarks.md).
        if let Some(first) = st.events.first() {
            st.batch.insert(&s.events, first.seq.to_be_bytes(), likewise_core::event::pack(&st.events));
        }
        let seq = st.seq;
        let shared: std::sync::Arc<[likewise_core::event::Event]> = std::sync::Arc::from(&st.events[..]);
        let (before, empty) = (s.db.seqno(), st.batch.is_empty());
        st.batch.commit().map_err(super::space::commit_err)?;
        // The batch took `before` unless a flush or compaction took a number meanwhile; then
        // its own is unknown and the last known one stays (smaller: sound, less precise). An
        // empty batch takes none.
        if !empty && s.db.seqno() == before + 1 {
            s.last_batch.fetch_max(before, Ordering::SeqCst);
        }
        // Into the tail before `next_seq` moves, still under the write lock: the tail then
        // never misses an event that a reader could already find in the keyspace.
        s.tail.lock().push(shared);
        s.next_seq.store(seq, Ordering::SeqCst);
        s.key_count.fetch_add(keys.len() as u64, Ordering::SeqCst);
        if likes.reads_skipped > 0 {
            metrics::counter!("likewise_store_like_reads_skipped_total").increment(likes.reads_skipped);
        }
        Ok(out)
    }

    fn sync(&self) -> StoreResult<()> {
        // Every batch committed before this load is in the journal the sync below flushes
        // and fsyncs (`next_seq` moves only after a commit).
        let upto = self.inner.next_seq.load(Ordering::SeqCst).saturating_sub(1);
        // The same for the last batch's fjall sequence number, recorded for the check at the
        // next open (not fjall's counter: flushes and compactions take numbers too).
        let batches = self.inner.last_batch.load(Ordering::SeqCst);
        // Not `persist`: that holds fjall's journal lock through the fsync, so the writer
        // could not commit the next batch meanwhile (`journal_sync.rs`).
        let journal = self.inner.journal_sync.sync(&self.inner.db)?;
        self.inner.progress.durable(batches, journal);
        self.inner.durable_seq.fetch_max(upto, Ordering::SeqCst);
        Ok(())
    }

    fn name(&self) -> &'static str {
        "embedded"
    }
}
