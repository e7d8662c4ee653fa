//! Who sees what: the statuses each reader is shown (shadow visibility), and a reply only
//! where its parent is seen ([`reply_seen_by`]).

use crate::ServiceResult;
use crate::upstream::Upstream;
use likewise_core::comment::record::CommentRecord;
use likewise_core::comment::status::{Audience, CommentStatus, shown_as};
use likewise_core::ids::{CommentId, UserId};

/// Who is reading.
#[derive(Debug, Clone, Copy)]
pub struct Reader {
    /// The viewer.
    pub user: UserId,
    /// Moderators (service role) see real statuses.
    pub moderator: bool,
}

/// A comment as one viewer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommentView {
    /// The stored comment (its `status` is the one shown to this viewer).
    pub record: CommentRecord,
    /// The author's display name.
    pub author_username: String,
    /// Likes of the comment.
    pub like_count: i64,
    /// Visible replies (top-level comments).
    pub reply_count: i64,
    /// Has the viewer liked it.
    pub viewer_has_liked: bool,
    /// Pinned by the post's author.
    pub pinned: bool,
}

/// Order of a comments page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Newest first (keyset on the ID).
    Newest,
    /// Oldest first (keyset on the ID).
    Oldest,
}

/// A page of comments and where the next one starts.
#[derive(Debug, Clone)]
pub struct CommentPage {
    /// The comments shown to this viewer.
    pub items: Vec<CommentView>,
    /// The last ID scanned, when there may be more.
    pub next_after: Option<CommentId>,
}

fn audience(reader: Reader, r: &CommentRecord) -> Audience {
    audience_of(reader, r.author, r.post_author)
}

fn audience_of(reader: Reader, author: UserId, post_author: UserId) -> Audience {
    if reader.user == author {
        Audience::CommentAuthor
    } else if reader.moderator {
        Audience::Moderator
    } else if reader.user == post_author {
        Audience::PostAuthor
    } else {
        Audience::Other
    }
}

/// How `reader` sees `r`: `None` when hidden from them; otherwise the record with the status
/// they are shown (a shadow-hidden comment looks visible to its author).
pub fn as_seen_by(reader: Reader, r: &CommentRecord) -> Option<CommentRecord> {
    // A stored Deleted record is always a placeholder that had replies.
    let shown = shown_as(r.status, audience(reader, r), r.status.is_deleted())?;
    Some(CommentRecord { status: shown, ..r.clone() })
}

/// How `reader` sees the reply `r` under its top-level `parent` (as read; `None` when
/// missing): as [`as_seen_by`] decides, and only where `reader` is shown the parent too.
/// Threads follow their parent: to whom the parent does not exist, neither do its replies
/// (see `likewise_core::comment::thread`). The reply's own author keeps seeing it, whatever
/// became of the parent (shadow visibility); moderators see every parent anyway.
pub fn reply_seen_by(
    reader: Reader,
    r: &CommentRecord,
    parent: Option<&CommentRecord>,
) -> Option<CommentRecord> {
    let seen = as_seen_by(reader, r)?;
    let own = reader.user == r.author;
    (own || parent.is_some_and(|p| as_seen_by(reader, p).is_some())).then_some(seen)
}

/// How `reader` sees `r` in its thread: [`as_seen_by`] for a top-level comment,
/// [`reply_seen_by`] for a reply, whose parent is read through the record cache.
pub(crate) async fn seen_in_thread(
    upstream: &Upstream,
    reader: Reader,
    r: &CommentRecord,
) -> ServiceResult<Option<CommentRecord>> {
    match r.parent {
        None => Ok(as_seen_by(reader, r)),
        Some(_) if as_seen_by(reader, r).is_none() => Ok(None),
        Some(p) => {
            let parent = upstream.comment_record(p).await?;
            Ok(reply_seen_by(reader, r, parent.as_ref()))
        }
    }
}

/// The stored comment `id` (as stored, not as shown) when `reader` may act on it: standing
/// (not deleted) and shown to them in its thread; else not found, as for a comment that does
/// not exist.
pub(crate) async fn standing_for(
    upstream: &Upstream,
    reader: Reader,
    id: CommentId,
) -> ServiceResult<CommentRecord> {
    let r = upstream.comment_record(id).await?.filter(|r| !r.status.is_deleted());
    match r {
        Some(r) if seen_in_thread(upstream, reader, &r).await?.is_some() => Ok(r),
        _ => Err(crate::ServiceError::NotFound("comment")),
    }
}

/// Whether `reader` is shown a comment by `author` on a post by `post_author` in `status`
/// (what [`as_seen_by`] decides, from the fields a ranked candidate keeps).
pub fn seen_by(reader: Reader, author: UserId, post_author: UserId, status: CommentStatus) -> bool {
    shown_as(status, audience_of(reader, author, post_author), status.is_deleted()).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use CommentStatus::*;
    use likewise_core::ids::PostId;

    const POST_AUTHOR: u64 = 7;

    fn record(id: u64, parent: Option<u64>, author: u64, status: CommentStatus) -> CommentRecord {
        CommentRecord {
            id: CommentId(id),
            post: PostId(1),
            author: UserId(author),
            post_author: UserId(POST_AUTHOR),
            parent: parent.map(CommentId),
            reply_to_user: None,
            status,
            text: String::new(),
            simhash: 0,
        }
    }

    fn reader(user: u64) -> Reader {
        Reader { user: UserId(user), moderator: false }
    }

    #[test]
    fn a_visible_reply_is_seen_only_by_those_who_see_its_parent() {
        let (parent_author, reply_author, other) = (10, 11, 12);
        let reply = record(2, Some(1), reply_author, Visible);
        let moderator = Reader { user: UserId(99), moderator: true };
        #[rustfmt::skip]
        let table = [
            // (parent's status, viewer, seen)
            (Visible, reader(other), true),
            (Deleted, reader(other), true),
            (Pending, reader(other), false),
            (HiddenByFilter, reader(other), false),
            (Restricted, reader(other), false),
            (DeletedWhileHeld, reader(other), false),
            // The parent's author is shown the parent (shadowed), so the thread too.
            (HiddenByFilter, reader(parent_author), true),
            // The post's author sees pending and restricted comments, not filtered ones.
            (Pending, reader(POST_AUTHOR), true),
            (Restricted, reader(POST_AUTHOR), true),
            (HiddenByFilter, reader(POST_AUTHOR), false),
            // The reply's own author and moderators always.
            (HiddenByFilter, reader(reply_author), true),
            (DeletedWhileHeld, reader(reply_author), true),
            (HiddenByFilter, moderator, true),
        ];
        for (status, viewer, seen) in table {
            let parent = record(1, None, parent_author, status);
            let shown = reply_seen_by(viewer, &reply, Some(&parent));
            assert_eq!(shown.is_some(), seen, "{status:?} parent, viewer {:?}", viewer.user);
        }
        assert!(reply_seen_by(reader(other), &reply, None).is_none(), "under a missing parent");
        assert!(reply_seen_by(reader(reply_author), &reply, None).is_some());
        // A held reply stays shadowed under any parent: shown to its author as visible.
        let held = record(3, Some(1), reply_author, HiddenByFilter);
        let open = record(1, None, parent_author, Visible);
        assert_eq!(reply_seen_by(reader(other), &held, Some(&open)), None);
        assert_eq!(reply_seen_by(reader(reply_author), &held, Some(&open)).map(|r| r.status), Some(Visible));
    }
}
