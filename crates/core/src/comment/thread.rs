//! Threads follow their parent: which comments are counted, and the counts a post's stored
//! comments should have.
//!
//! A comment is counted in its post's `comment_count` (and, a reply, in its parent's
//! `reply_count`) when it is visible and, for a reply, while its top-level parent opens its
//! thread ([`CommentStatus::opens_thread`]: visible, or the public `deleted` placeholder).
//! Replies under a parent others cannot see are hidden from them and not counted; when the
//! parent becomes visible they come back and count again. The write path moves the counts
//! by this rule (`transition`); reconciliation recounts by it ([`tally`]).

use crate::comment::record::CommentRecord;
use crate::ids::CommentId;
use std::collections::BTreeMap;

/// Is `r` counted? A visible top-level comment is; a visible reply only while its parent
/// (`parent`, as read; `None` when missing) opens its thread.
pub fn counted(r: &CommentRecord, parent: Option<&CommentRecord>) -> bool {
    r.status.counts_as_visible() && (r.parent.is_none() || parent.is_some_and(|p| p.status.opens_thread()))
}

/// The counts a post's comments should have.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// The post's `comment_count`: every counted comment.
    pub comments: i64,
    /// The `reply_count` of each top-level comment with replies (of any status): its
    /// counted replies, 0 under a parent that does not open its thread.
    pub replies: BTreeMap<CommentId, i64>,
}

/// The counts of a post whose stored comments (top-level and replies, any order) are
/// `records`.
pub fn tally<'a>(records: impl IntoIterator<Item = &'a CommentRecord>) -> Tally {
    let records: Vec<&CommentRecord> = records.into_iter().collect();
    let tops: BTreeMap<CommentId, &CommentRecord> =
        records.iter().filter(|r| r.parent.is_none()).map(|r| (r.id, *r)).collect();
    let mut t = Tally::default();
    for r in &records {
        let parent = r.parent.and_then(|p| tops.get(&p).copied());
        let n = i64::from(counted(r, parent));
        t.comments += n;
        if let Some(p) = r.parent {
            *t.replies.entry(p).or_insert(0) += n;
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comment::status::CommentStatus::{self, *};
    use crate::ids::{PostId, UserId};

    fn record(id: u64, parent: Option<u64>, status: CommentStatus) -> CommentRecord {
        CommentRecord {
            id: CommentId(id),
            post: PostId(42),
            author: UserId(100 + id),
            post_author: UserId(7),
            parent: parent.map(CommentId),
            reply_to_user: None,
            status,
            text: String::new(),
            simhash: 0,
        }
    }

    #[test]
    fn a_visible_reply_counts_only_under_a_parent_everyone_sees() {
        let reply = record(2, Some(1), Visible);
        for parent in CommentStatus::ALL {
            let p = record(1, None, parent);
            assert_eq!(counted(&reply, Some(&p)), matches!(parent, Visible | Deleted), "{parent:?}");
        }
        assert!(!counted(&reply, None), "under a missing parent");
        assert!(!counted(&record(2, Some(1), Pending), Some(&record(1, None, Visible))));
        assert!(counted(&record(1, None, Visible), None));
    }

    #[test]
    fn a_tally_counts_replies_with_their_parent() {
        let rows = [
            record(1, None, Visible),
            record(2, Some(1), Visible),
            record(3, Some(1), Pending),
            record(4, None, Pending),
            record(5, Some(4), Visible),
            record(6, None, Deleted),
            record(7, Some(6), Visible),
            record(8, None, DeletedWhileHeld),
            record(9, Some(8), Visible),
            record(10, None, Visible),
        ];
        let t = tally(rows.iter().rev());
        assert_eq!(t.comments, 4, "1, 2, 7 and 10");
        let want: BTreeMap<CommentId, i64> =
            [(1, 1), (4, 0), (6, 1), (8, 0)].into_iter().map(|(k, v)| (CommentId(k), v)).collect();
        assert_eq!(t.replies, want);
    }
}
