//! Deadlines that travel with writes: a request's writes are dropped before they run when
//! the request has gone, and waited for once they are in a committing batch.
//!
//! The HTTP layer runs each request inside a [`RequestWrites`] scope. Every operation that
//! request hands to the group committer carries an [`OpGate`]. The committer's writer takes
//! an operation into a batch only by moving its gate from *queued* to *taken*; at the
//! request's deadline the HTTP layer moves every gate still *queued* to *cancelled*. Exactly
//! one of the two wins for each operation, so:
//! - an operation cancelled at the deadline never runs, and the request can honestly answer
//!   503 (nothing was created);
//! - an operation taken before the deadline runs to its end, and the request waits for its
//!   real outcome instead of answering a 503 for a write that may be stored.
//!
//! An operation whose caller dropped its answer (the client disconnected) is skipped by the
//! writer as well. Outside a scope (workers, tests, the CLI), operations have no gate and
//! always run.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

const QUEUED: u8 = 0;
const TAKEN: u8 = 1;
const CANCELLED: u8 = 2;

/// One queued operation's fate: taken into a batch by the writer, or cancelled by its
/// request's deadline; whichever comes first.
#[derive(Debug, Default)]
pub struct OpGate(AtomicU8);

impl OpGate {
    /// The writer takes the operation into a batch; false when its request cancelled it.
    pub fn take(&self) -> bool {
        matches!(
            self.0.compare_exchange(QUEUED, TAKEN, Ordering::AcqRel, Ordering::Acquire),
            Ok(_) | Err(TAKEN)
        )
    }

    /// The writer hands a taken operation back to its queue: the engine wrote nothing of it
    /// and it runs in a later batch (`WriteEngine::retry_later`). Until then its request's
    /// deadline may cancel it again.
    pub fn requeue(&self) {
        let _ = self.0.compare_exchange(TAKEN, QUEUED, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The request gives up on the operation; false when the writer has taken it already.
    fn cancel(&self) -> bool {
        matches!(
            self.0.compare_exchange(QUEUED, CANCELLED, Ordering::AcqRel, Ordering::Acquire),
            Ok(_) | Err(CANCELLED)
        )
    }
}

tokio::task_local! {
    static REQUEST: Arc<RequestWrites>;
}

/// The writes one request has handed to the committer, and its deadline.
#[derive(Debug, Default)]
pub struct RequestWrites {
    gates: parking_lot::Mutex<Vec<Arc<OpGate>>>,
    deadline: Option<std::time::Instant>,
}

impl RequestWrites {
    /// A request that must be answered by `deadline`.
    pub fn until(deadline: std::time::Instant) -> Self {
        RequestWrites { gates: Default::default(), deadline: Some(deadline) }
    }

    /// The current request's deadline, if the caller runs inside a scope that has one.
    pub fn deadline() -> Option<std::time::Instant> {
        REQUEST.try_with(|r| r.deadline).ok().flatten()
    }

    /// Run `f` (a request's handler) with this request's writes tracked.
    pub fn scope<F: Future>(self: Arc<Self>, f: F) -> impl Future<Output = F::Output> {
        REQUEST.scope(self, f)
    }

    /// The request's deadline has passed: cancel every write not yet taken into a batch.
    /// Returns true when one was taken already (it is committing, or committed): the request
    /// must then wait for its handler, whose answer is the write's real outcome.
    pub fn cancel_pending(&self) -> bool {
        let gates = self.gates.lock();
        // A write already taken (a handler's earlier write, or one committing now): let the
        // handler finish, its later writes included, so its answer tells what it did.
        if gates.iter().any(|g| g.0.load(Ordering::Acquire) == TAKEN) {
            return true;
        }
        let mut taken = false;
        for g in gates.iter() {
            taken |= !g.cancel();
        }
        taken
    }

    /// How many writes the request has handed over.
    #[cfg(test)]
    pub(crate) fn writes(&self) -> usize {
        self.gates.lock().len()
    }

    /// A gate for a new operation of the current request, if the caller runs inside a
    /// [`RequestWrites::scope`].
    pub(crate) fn gate() -> Option<Arc<OpGate>> {
        REQUEST
            .try_with(|r| {
                let g = Arc::new(OpGate::default());
                r.gates.lock().push(g.clone());
                g
            })
            .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_operation_cannot_be_cancelled_and_a_cancelled_one_cannot_be_taken() {
        let taken = OpGate::default();
        assert!(taken.take());
        assert!(!taken.cancel());
        assert!(taken.take(), "taking twice is harmless");
        let cancelled = OpGate::default();
        assert!(cancelled.cancel());
        assert!(!cancelled.take());
    }

    /// A request that handed over two writes, and their gates.
    async fn request_with_two_writes() -> (Arc<RequestWrites>, Arc<OpGate>, Arc<OpGate>) {
        let req = Arc::new(RequestWrites::default());
        let (a, b) = req
            .clone()
            .scope(async {
                (RequestWrites::gate().expect("in scope"), RequestWrites::gate().expect("in scope"))
            })
            .await;
        (req, a, b)
    }

    #[tokio::test]
    async fn a_request_must_wait_only_when_one_of_its_writes_was_taken() {
        let (req, a, b) = request_with_two_writes().await;
        assert!(RequestWrites::gate().is_none(), "outside a scope, no gate");
        assert!(!req.cancel_pending(), "nothing taken: the request may give up");
        assert!(!a.take() && !b.take(), "cancelled writes never run");

        let (req, a, b) = request_with_two_writes().await;
        assert!(a.take());
        assert!(req.cancel_pending(), "one write is committing: wait for it");
        assert!(b.take(), "the handler goes on: its next write still runs");
    }
}
