//! Comment records by ID, for the read paths that fetch a handful of known comments per post
//! (feed previews, top-comment pages): the soak showed those point reads taking a fifth of the
//! service's CPU once many posts had comments.
//!
//! A record changes only when its status changes or it is deleted, and both go through
//! [`Engagement`](crate::Engagement), which calls [`RecordCache::forget`] after the write is
//! durable (and tells the other nodes). A reader that loaded a record from storage stores it
//! only if no record was forgotten meanwhile (an epoch check), so a load that raced a change
//! can never put the old record back. Reads that decide permissions (delete, like, report)
//! keep reading storage.

use super::ttl::TtlMap;
use likewise_core::comment::record::CommentRecord;
use likewise_core::ids::CommentId;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// See the module documentation.
pub struct RecordCache {
    map: TtlMap<CommentId, Arc<CommentRecord>>,
    /// Bumped by every `forget`, before the entry is removed.
    epoch: AtomicU64,
}

impl RecordCache {
    /// A cache of about `capacity` records, each kept at most `ttl`.
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        RecordCache { map: TtlMap::new("comment_records", ttl, capacity), epoch: AtomicU64::new(0) }
    }

    /// The epoch to pass to [`put_if_unchanged`](Self::put_if_unchanged), taken before the
    /// storage read.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// A cached record.
    pub fn get(&self, id: CommentId) -> Option<Arc<CommentRecord>> {
        self.map.get(&id)
    }

    /// Cache records read from storage, unless a record was forgotten since `epoch`.
    pub fn put_if_unchanged(&self, epoch: u64, recs: impl IntoIterator<Item = CommentRecord>) {
        for r in recs {
            if self.epoch.load(Ordering::Acquire) != epoch {
                return;
            }
            self.map.put(r.id, Arc::new(r));
        }
    }

    /// A record changed or is gone.
    pub fn forget(&self, id: CommentId) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.map.remove(&id);
    }

    /// Entries, capacity and estimated bytes (for `/metrics`).
    pub fn usage(&self) -> super::Usage {
        self.map.usage()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use likewise_core::comment::status::CommentStatus;
    use likewise_core::ids::{PostId, UserId};

    fn rec(id: u64, status: CommentStatus) -> CommentRecord {
        CommentRecord {
            id: CommentId(id),
            post: PostId(1),
            author: UserId(2),
            post_author: UserId(3),
            parent: None,
            reply_to_user: None,
            status,
            text: "hi".into(),
            simhash: 0,
        }
    }

    #[test]
    fn a_load_that_raced_a_change_is_not_cached() {
        let c = RecordCache::new(100, Duration::from_secs(60));
        let before = c.epoch();
        // The status changes while the (old) record is being read from storage.
        c.forget(CommentId(7));
        c.put_if_unchanged(before, [rec(7, CommentStatus::Visible)]);
        assert!(c.get(CommentId(7)).is_none());
        // A load that started after the change is cached, and forgetting drops it.
        let e = c.epoch();
        c.put_if_unchanged(e, [rec(7, CommentStatus::Pending)]);
        assert_eq!(c.get(CommentId(7)).map(|r| r.status), Some(CommentStatus::Pending));
        c.forget(CommentId(7));
        assert!(c.get(CommentId(7)).is_none());
    }
}
