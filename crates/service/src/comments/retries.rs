//! Safe retries of comment creation (`Idempotency-Key`): which keys this node is still
//! working on, and the answer a repeat gets.
//!
//! The stored key ([`likewise_core::comment::idempotency`]) makes one comment per key on
//! every node. What only this node can tell is that the first call with a key is still
//! running here: a repeat meanwhile is a 409, so a client that retries too eagerly learns to
//! wait instead of racing itself. (A repeat reaching another node meanwhile waits on the key
//! in the store and then answers as a repeat.)

use super::{CommentView, Reader, as_seen_by};
use crate::{ServiceError, ServiceResult};
use likewise_core::comment::idempotency::IdempotencyKey;
use likewise_core::ids::UserId;
use likewise_core::write::CommentRecord;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::Arc;

/// Keys whose first call is running on this node.
#[derive(Default)]
pub(super) struct InFlight(Arc<Mutex<HashSet<(UserId, IdempotencyKey)>>>);

/// Holds a key as running until dropped (also when the call fails or is cancelled).
pub(super) struct Claim {
    keys: Arc<Mutex<HashSet<(UserId, IdempotencyKey)>>>,
    key: (UserId, IdempotencyKey),
}

impl InFlight {
    /// Claim `key` for `caller`, or 409 when a call with it is running here.
    pub(super) fn claim(&self, caller: UserId, key: &IdempotencyKey) -> ServiceResult<Claim> {
        let entry = (caller, key.clone());
        if !self.0.lock().insert(entry.clone()) {
            metrics::counter!("likewise_comment_key_conflicts_total").increment(1);
            return Err(ServiceError::Conflict(
                "a request with this Idempotency-Key is still being processed; retry later".into(),
            ));
        }
        Ok(Claim { keys: self.0.clone(), key: entry })
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.keys.lock().remove(&self.key);
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
