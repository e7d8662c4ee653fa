//! Safe retries of comment creation (`Idempotency-Key`): which keys this node is still
//! working on, and the answer a repeat gets.
//!
//! The stored key ([`likewise_core::comment::idempotency`]) makes one comment per key on
//! every node. What only this node can tell is that the first call with a key is still
//! running here. A repeat meanwhile waits for it, for at most half the time its own request
//! has left, and then runs as a repeat (answering what the first call stored, or creating if
//! the first stored nothing); a first call still running after that wait is a 409, so a client
//! that retries too eagerly learns to wait instead of racing itself. The repeat waits rather
//! than answering at once because a retry storm answered at once retries at once: every
//! sender then costs a request per round trip for as long as the first call runs, and on a
//! busy machine those requests took the CPU that first call needed (each of its reads waited
//! its turn behind them), so the first calls outlived the request timeout. (A repeat reaching
//! another node meanwhile waits on the key in the store and then answers as a repeat.)

use super::{CommentView, Reader, as_seen_by};
use crate::{ServiceError, ServiceResult};
use likewise_core::comment::idempotency::IdempotencyKey;
use likewise_core::ids::UserId;
use likewise_core::write::CommentRecord;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// The longest a repeat waits for the first call outside a request with a deadline.
const REPEAT_WAIT: Duration = Duration::from_secs(5);

type Running = Arc<Mutex<HashMap<(UserId, IdempotencyKey), Arc<Notify>>>>;

/// Keys whose first call is running on this node, each with what wakes the repeats waiting
/// for it.
#[derive(Default)]
pub(super) struct InFlight(Running);

/// Holds a key as running until dropped (also when the call fails or is cancelled), then
/// wakes the repeats waiting for it.
pub(super) struct Claim {
    keys: Running,
    key: (UserId, IdempotencyKey),
}

impl InFlight {
    /// Claim `key` for `caller`, waiting while a call with it runs here (see the module
    /// docs); 409 when it still runs after the wait.
    pub(super) async fn claim(&self, caller: UserId, key: &IdempotencyKey) -> ServiceResult<Claim> {
        let entry = (caller, key.clone());
        let now = Instant::now();
        let until = match likewise_engine::write_gate::RequestWrites::deadline() {
            Some(deadline) => now + deadline.saturating_duration_since(now) / 2,
            None => now + REPEAT_WAIT,
        };
        loop {
            let released = {
                let mut running = self.0.lock();
                match running.get(&entry) {
                    None => {
                        running.insert(entry.clone(), Arc::new(Notify::new()));
                        return Ok(Claim { keys: self.0.clone(), key: entry });
                    }
                    // Made under the lock: it hears the release even before it is polled.
                    Some(n) => n.clone().notified_owned(),
                }
            };
            if tokio::time::timeout_at(until.into(), released).await.is_err() {
                metrics::counter!("likewise_comment_key_conflicts_total").increment(1);
                return Err(ServiceError::Conflict(
                    "a request with this Idempotency-Key is still being processed; retry later".into(),
                ));
            }
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(n) = self.keys.lock().remove(&self.key) {
            n.notify_waiters();
        }
    }
}

/// What a repeat answers: the comment as the first call showed it to its author (new, so no
/// likes, replies or pin yet; a held comment looks visible to them), under the author's
/// current name.
pub(super) fn first_answer(
    author: UserId,
    created: &CommentRecord,
    username: String,
) -> ServiceResult<CommentView> {
    let reader = Reader { user: author, moderator: false };
    let shown = as_seen_by(reader, created).ok_or(ServiceError::NotFound("comment"))?;
    Ok(CommentView {
        record: shown,
        author_username: username,
        like_count: 0,
        reply_count: 0,
        viewer_has_liked: false,
        pinned: false,
    })
}

/// The answer to a key reused with another request.
pub(super) fn other_request() -> ServiceError {
    metrics::counter!("likewise_comment_key_mismatches_total").increment(1);
    ServiceError::Unprocessable("this Idempotency-Key was already used with another request".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use likewise_engine::write_gate::RequestWrites;

    fn key(k: &str) -> IdempotencyKey {
        IdempotencyKey::parse(k.as_bytes()).expect("key")
    }

    /// A repeat waits for the first call and then holds the key itself; other callers' keys
    /// and other keys never wait.
    #[tokio::test]
    async fn a_repeat_waits_for_the_first_call_and_then_runs() {
        let running = Arc::new(InFlight::default());
        let first = running.claim(UserId(1), &key("k")).await.expect("first");
        let repeat = {
            let running = running.clone();
            tokio::spawn(async move { running.claim(UserId(1), &key("k")).await.map(|_| ()) })
        };
        let _other_caller = running.claim(UserId(2), &key("k")).await.expect("another caller's key");
        let _other_key = running.claim(UserId(1), &key("j")).await.expect("another key");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!repeat.is_finished(), "the repeat answered while the first call was running");
        drop(first);
        repeat.await.expect("join").expect("the repeat runs once the first call ended");
    }

    /// Repeats released together take the key one at a time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn repeats_released_together_run_one_at_a_time() {
        let running = Arc::new(InFlight::default());
        let first = running.claim(UserId(1), &key("k")).await.expect("first");
        let holders = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let repeats: Vec<_> = (0..8)
            .map(|_| {
                let (running, holders) = (running.clone(), holders.clone());
                tokio::spawn(async move {
                    let claim = running.claim(UserId(1), &key("k")).await.expect("claim");
                    let at_once = holders.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                    tokio::task::yield_now().await;
                    holders.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    drop(claim);
                    at_once
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(first);
        for r in repeats {
            assert_eq!(r.await.expect("join"), 1, "two calls held one key at once");
        }
    }

    /// A first call still running after the wait (half the time the repeat's request has
    /// left) answers the repeat with a 409.
    #[tokio::test]
    async fn a_first_call_outliving_the_wait_is_a_conflict() {
        let running = Arc::new(InFlight::default());
        let _first = running.claim(UserId(1), &key("k")).await.expect("first");
        let writes = Arc::new(RequestWrites::until(Instant::now() + Duration::from_millis(200)));
        let got = writes.scope(running.claim(UserId(1), &key("k"))).await;
        assert!(matches!(got, Err(ServiceError::Conflict(_))), "{:?}", got.err());
    }
}
