//! Comment statuses, and what each audience is shown for each status.
//!
//! Filtered comments are *shadowed*: their author keeps seeing them as visible, so a spammer or
//! harasser gets no signal to rephrase and try again, while everyone else sees nothing. Only the
//! people who can act on a comment see its real status: moderators always, and the post author
//! for comments waiting on their approval.

use crate::ids::UserId;

/// Where a comment stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommentStatus {
    /// Shown to everyone.
    Visible,
    /// Waiting for the post author's (or a moderator's) approval.
    Pending,
    /// Held back by a filter (hidden words, toxicity, spam).
    HiddenByFilter,
    /// The commenter is restricted by the post author; their comments need approval.
    Restricted,
    /// Deleted; kept as a placeholder while it has replies.
    Deleted,
    /// Deleted while held back (pending, filtered or restricted): a placeholder too, but only
    /// for those who could see the comment whatever its status (its author and moderators),
    /// so deleting never reveals a held comment, or who wrote it, to anyone else. Its wire
    /// name is `deleted`.
    DeletedWhileHeld,
}

impl CommentStatus {
    /// Every status, for exhaustive checks.
    pub const ALL: [CommentStatus; 6] = [
        CommentStatus::Visible,
        CommentStatus::Pending,
        CommentStatus::HiddenByFilter,
        CommentStatus::Restricted,
        CommentStatus::Deleted,
        CommentStatus::DeletedWhileHeld,
    ];

    /// The wire and log name.
    pub fn as_str(self) -> &'static str {
        match self {
            CommentStatus::Visible => "visible",
            CommentStatus::Pending => "pending",
            CommentStatus::HiddenByFilter => "hidden_by_filter",
            CommentStatus::Restricted => "restricted",
            CommentStatus::Deleted | CommentStatus::DeletedWhileHeld => "deleted",
        }
    }

    /// Stable one-byte code used in stored rows; never renumber.
    pub fn code(self) -> u8 {
        match self {
            CommentStatus::Visible => 1,
            CommentStatus::Pending => 2,
            CommentStatus::HiddenByFilter => 3,
            CommentStatus::Restricted => 4,
            CommentStatus::Deleted => 5,
            CommentStatus::DeletedWhileHeld => 6,
        }
    }

    /// Inverse of [`CommentStatus::code`].
    pub fn from_code(code: u8) -> Option<Self> {
        CommentStatus::ALL.into_iter().find(|s| s.code() == code)
    }

    /// Deleted, whatever it was before.
    pub fn is_deleted(self) -> bool {
        matches!(self, CommentStatus::Deleted | CommentStatus::DeletedWhileHeld)
    }

    /// The status a deletion leaves: a placeholder for everyone only if everyone could see it.
    pub fn deleted_from(self) -> Self {
        match self {
            CommentStatus::Visible | CommentStatus::Deleted => CommentStatus::Deleted,
            _ => CommentStatus::DeletedWhileHeld,
        }
    }

    /// Does the comment count in a post's `comment_count` and its parent's `reply_count`?
    /// Only visible ones do, so counts never leak the existence of shadowed comments.
    pub fn counts_as_visible(self) -> bool {
        self == CommentStatus::Visible
    }

    /// Held back from others while it stands (pending, hidden by a filter, restricted): shown
    /// to its author as visible (shadowed), to nobody else as itself but those who review it.
    pub fn is_held(self) -> bool {
        matches!(self, CommentStatus::Pending | CommentStatus::HiddenByFilter | CommentStatus::Restricted)
    }

    /// Does a top-level comment in this status keep its thread open to everyone: are its
    /// replies shown to whoever may see them, and counted? Only while everyone can see the
    /// parent, as itself or as the public `deleted` placeholder: replies under a parent held
    /// from others (or deleted while held) are hidden from them and not counted.
    pub fn opens_thread(self) -> bool {
        matches!(self, CommentStatus::Visible | CommentStatus::Deleted)
    }
}

/// Who is looking at a comment, relative to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Audience {
    /// The comment's author (also when they wrote the post).
    CommentAuthor,
    /// The author of the post the comment is on.
    PostAuthor,
    /// A moderator of the service.
    Moderator,
    /// Anyone else, signed in or not.
    Other,
}

impl Audience {
    /// Classify a viewer (`None` when signed out).
    ///
    /// The comment's author wins over the post author, so a post author's own filtered comment
    /// stays shadowed for them. A moderator sees real statuses even on their own comments: they
    /// can read the moderation queue anyway, so shadowing them hides nothing.
    pub fn of(
        viewer: Option<UserId>,
        comment_author: UserId,
        post_author: UserId,
        viewer_is_moderator: bool,
    ) -> Self {
        match viewer {
            _ if viewer_is_moderator => Audience::Moderator,
            Some(v) if v == comment_author => Audience::CommentAuthor,
            Some(v) if v == post_author => Audience::PostAuthor,
            _ => Audience::Other,
        }
    }
}

/// What `audience` is shown for a comment in `status`: `None` hides it entirely.
///
/// - Visible: visible to all.
/// - Pending, hidden by filter, restricted: shown as visible to its author (shadowed), with the
///   real status to moderators, and to the post author only when pending or restricted (they
///   approve those); hidden from everyone else.
/// - Deleted: a "deleted" placeholder for everyone while it has replies, so the thread keeps
///   its shape; a deleted leaf disappears. Deleted while held: the same placeholder, but only
///   for its author and moderators (the only ones sure to have seen it).
pub fn shown_as(status: CommentStatus, audience: Audience, has_replies: bool) -> Option<CommentStatus> {
    use CommentStatus::*;
    match (status, audience) {
        (Visible, _) => Some(Visible),
        (Deleted, _) => has_replies.then_some(Deleted),
        (DeletedWhileHeld, Audience::CommentAuthor | Audience::Moderator) => has_replies.then_some(Deleted),
        (DeletedWhileHeld, _) => None,
        (_, Audience::CommentAuthor) => Some(Visible),
        (_, Audience::Moderator) => Some(status),
        (Pending | Restricted, Audience::PostAuthor) => Some(status),
        (HiddenByFilter, Audience::PostAuthor) | (_, Audience::Other) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::Audience::*;
    use super::CommentStatus::*;
    use super::*;

    #[test]
    fn codes_and_names_are_stable_and_round_trip() {
        let names: Vec<_> = CommentStatus::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(names, ["visible", "pending", "hidden_by_filter", "restricted", "deleted", "deleted"]);
        let codes: Vec<_> = CommentStatus::ALL.iter().map(|s| s.code()).collect();
        assert_eq!(codes, [1, 2, 3, 4, 5, 6]);
        for s in CommentStatus::ALL {
            assert_eq!(CommentStatus::from_code(s.code()), Some(s));
        }
        assert_eq!(CommentStatus::from_code(0), None);
        assert_eq!(CommentStatus::from_code(7), None);
    }

    #[test]
    fn a_deletion_leaves_a_public_placeholder_only_for_a_public_comment() {
        assert_eq!(Visible.deleted_from(), Deleted);
        for held in [Pending, HiddenByFilter, Restricted] {
            assert_eq!(held.deleted_from(), DeletedWhileHeld);
        }
        let deleted: Vec<_> = CommentStatus::ALL.into_iter().filter(|s| s.is_deleted()).collect();
        assert_eq!(deleted, [Deleted, DeletedWhileHeld]);
    }

    #[test]
    fn only_visible_comments_count() {
        let counted: Vec<_> = CommentStatus::ALL.into_iter().filter(|s| s.counts_as_visible()).collect();
        assert_eq!(counted, [Visible]);
    }

    #[test]
    fn only_a_parent_everyone_sees_opens_its_thread() {
        let open: Vec<_> = CommentStatus::ALL.into_iter().filter(|s| s.opens_thread()).collect();
        assert_eq!(open, [Visible, Deleted]);
        // A thread is open exactly when everyone is shown its parent (with replies under it).
        for s in CommentStatus::ALL {
            assert_eq!(s.opens_thread(), shown_as(s, Other, true).is_some(), "{s:?}");
        }
    }

    #[test]
    fn every_status_audience_and_reply_case_is_shown_as_specified() {
        // (status, audience, has_replies) -> shown as
        #[rustfmt::skip]
        let table = [
            (Visible, CommentAuthor, false, Some(Visible)),
            (Visible, CommentAuthor, true, Some(Visible)),
            (Visible, PostAuthor, false, Some(Visible)),
            (Visible, PostAuthor, true, Some(Visible)),
            (Visible, Moderator, false, Some(Visible)),
            (Visible, Moderator, true, Some(Visible)),
            (Visible, Other, false, Some(Visible)),
            (Visible, Other, true, Some(Visible)),
            (Pending, CommentAuthor, false, Some(Visible)),
            (Pending, CommentAuthor, true, Some(Visible)),
            (Pending, PostAuthor, false, Some(Pending)),
            (Pending, PostAuthor, true, Some(Pending)),
            (Pending, Moderator, false, Some(Pending)),
            (Pending, Moderator, true, Some(Pending)),
            (Pending, Other, false, None),
            (Pending, Other, true, None),
            (HiddenByFilter, CommentAuthor, false, Some(Visible)),
            (HiddenByFilter, CommentAuthor, true, Some(Visible)),
            (HiddenByFilter, PostAuthor, false, None),
            (HiddenByFilter, PostAuthor, true, None),
            (HiddenByFilter, Moderator, false, Some(HiddenByFilter)),
            (HiddenByFilter, Moderator, true, Some(HiddenByFilter)),
            (HiddenByFilter, Other, false, None),
            (HiddenByFilter, Other, true, None),
            (Restricted, CommentAuthor, false, Some(Visible)),
            (Restricted, CommentAuthor, true, Some(Visible)),
            (Restricted, PostAuthor, false, Some(Restricted)),
            (Restricted, PostAuthor, true, Some(Restricted)),
            (Restricted, Moderator, false, Some(Restricted)),
            (Restricted, Moderator, true, Some(Restricted)),
            (Restricted, Other, false, None),
            (Restricted, Other, true, None),
            (Deleted, CommentAuthor, false, None),
            (Deleted, CommentAuthor, true, Some(Deleted)),
            (Deleted, PostAuthor, false, None),
            (Deleted, PostAuthor, true, Some(Deleted)),
            (Deleted, Moderator, false, None),
            (Deleted, Moderator, true, Some(Deleted)),
            (Deleted, Other, false, None),
            (Deleted, Other, true, Some(Deleted)),
            (DeletedWhileHeld, CommentAuthor, false, None),
            (DeletedWhileHeld, CommentAuthor, true, Some(Deleted)),
            (DeletedWhileHeld, PostAuthor, false, None),
            (DeletedWhileHeld, PostAuthor, true, None),
            (DeletedWhileHeld, Moderator, false, None),
            (DeletedWhileHeld, Moderator, true, Some(Deleted)),
            (DeletedWhileHeld, Other, false, None),
            (DeletedWhileHeld, Other, true, None),
        ];
        assert_eq!(table.len(), CommentStatus::ALL.len() * 4 * 2);
        for (status, audience, has_replies, expected) in table {
            assert_eq!(
                shown_as(status, audience, has_replies),
                expected,
                "{status:?} to {audience:?}, replies: {has_replies}"
            );
        }
    }

    #[test]
    fn a_post_author_commenting_on_their_own_post_is_the_comment_author() {
        let me = UserId(7);
        assert_eq!(Audience::of(Some(me), me, me, false), CommentAuthor);
        // So their own filtered comment stays shadowed rather than showing the real status.
        assert_eq!(shown_as(HiddenByFilter, Audience::of(Some(me), me, me, false), false), Some(Visible));
    }

    #[test]
    fn viewers_are_classified_relative_to_the_comment() {
        let (commenter, poster, stranger) = (UserId(1), UserId(2), UserId(3));
        assert_eq!(Audience::of(Some(poster), commenter, poster, false), PostAuthor);
        assert_eq!(Audience::of(Some(stranger), commenter, poster, false), Other);
        assert_eq!(Audience::of(None, commenter, poster, false), Other);
        assert_eq!(Audience::of(Some(stranger), commenter, poster, true), Moderator);
        assert_eq!(Audience::of(Some(commenter), commenter, poster, true), Moderator);
    }
}
