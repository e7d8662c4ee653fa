//! Write operations the PostgreSQL engine's tests submit (placement, resharding).

use likewise_core::comment::status::CommentStatus;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::like::{LikeAction, LikeOp, Target};
use likewise_core::write::{CommentOp, CommentRecord, WriteOp};

/// A visible comment on `post` (a reply under `parent`) by `author`, on a post of user 7.
pub(crate) fn comment(post: u64, parent: Option<CommentId>, author: u64) -> WriteOp {
    WriteOp::Comment(CommentOp::Create(
        CommentRecord {
            id: CommentId(0),
            post: PostId(post),
            author: UserId(author),
            post_author: UserId(7),
            parent,
            reply_to_user: None,
            status: CommentStatus::Visible,
            text: format!("on {post} by {author}"),
            simhash: author,
        },
        None,
    ))
}

/// `user` likes (`on`) or unlikes `target` of `post` (authored by user 7).
pub(crate) fn like(target: Target, post: u64, user: u64, on: bool) -> WriteOp {
    WriteOp::Like(LikeOp {
        target,
        user: UserId(user),
        action: if on { LikeAction::Like } else { LikeAction::Unlike },
        target_author: UserId(7),
        post,
        ts_ms: 1_800_000_000_000 + user,
        trace: None,
    })
}
