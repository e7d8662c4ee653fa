//! Who may see a like count. Hiding is a presentation decision applied by the server when it
//! builds the response, so a hidden number is absent from the API, not hidden by the client.

use crate::ids::UserId;

/// Whether `viewer` may see the like count of a post by `author`.
///
/// The author always sees their own counts; anyone else sees them unless the post hides them
/// or the viewer chose to hide counts on posts they see.
pub fn like_count_visible(
    viewer: UserId,
    author: UserId,
    post_hides_count: bool,
    viewer_hides_counts: bool,
) -> bool {
    viewer == author || !(post_hides_count || viewer_hides_counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn author_always_sees_their_count() {
        assert!(like_count_visible(UserId(7), UserId(7), true, true));
    }

    #[test]
    fn either_setting_hides_the_count_from_others() {
        assert!(like_count_visible(UserId(1), UserId(7), false, false));
        assert!(!like_count_visible(UserId(1), UserId(7), true, false));
        assert!(!like_count_visible(UserId(1), UserId(7), false, true));
    }
}
