//! One write batch of the embedded engine while its operations are resolved: the fjall batch
//! every change goes into, and the batch's events with their sequence numbers.
//!
//! The likes and comments modules each keep an overlay of the keys they touched and write
//! into this; the write path (`write.rs`) creates it, feeds it the operations and commits it.

use super::state::Inner;
use likewise_core::event::Event;

/// What a batch accumulates before its single commit.
pub(super) struct Batch<'a> {
    pub(super) s: &'a Inner,
    pub(super) batch: fjall::OwnedWriteBatch,
    /// The next event sequence number.
    pub(super) seq: u64,
    /// The batch's first event sequence number: names the likers pages it writes.
    pub(super) first_seq: u64,
    /// This batch's events, decoded, for the in-memory tail once the batch is committed.
    pub(super) events: Vec<Event>,
}

impl Batch<'_> {
    /// Append an event with the next sequence number; returns it. The batch's events are
    /// written together, as one packed row, when the batch is committed.
    pub(super) fn event(&mut self, mut e: Event) -> u64 {
        e.seq = self.seq;
        self.events.push(e);
        self.seq += 1;
        e.seq
    }
}
