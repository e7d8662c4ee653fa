//! The "top comments" order: a viewer-independent base score, a per-viewer boost, and the
//! final ordering with pinned comments first.
//!
//! The base score is the logarithm of a comment's weighted engagement plus its creation time,
//! scaled so that ten times the engagement is worth [`DECADE_SECS`] (12.5 hours) of recency:
//!
//! ```text
//! points = 1 + likes + 2·replies + 5·[liked by post author] + 3·[replied to by post author]
//! weight = points · 1.3[verified author] · 1.2[post author's own] · (1 − integrity)²
//! base   = log10(weight) + created_secs / 45,000
//! ```
//!
//! - Replies weigh twice a like: a conversation is worth more than a tap.
//! - The post author's like (5) and reply (3) are strong curation signals: they know their
//!   audience, and acknowledging a comment is what people most want to see.
//! - Verified authors and the post author's own comments get modest multipliers so that they
//!   surface, without outranking a comment the community clearly prefers.
//! - `(1 − integrity)²` demotes likely spam quadratically: a 0.5 spam likelihood quarters the
//!   weight, so bought likes cannot carry a spam comment to the top.
//! - Time decay is the creation-time term: a comment 12.5 hours younger than another needs a
//!   tenth of its engagement to rank beside it, so a fresh good comment still rises on a busy
//!   post and old ones sink.
//!
//! Why this form rather than engagement divided by an age gravity: the order of two comments
//! never changes while nothing happens to them. A score therefore only moves when an event
//! touches its comment, and a store can keep every comment of a post in one sorted index,
//! updated from events, instead of re-scoring a whole post as time passes. The per-viewer
//! follow boost is a multiplier, so it adds a constant to the logarithm: a viewer's order is
//! still a walk over that index.

use crate::ids::CommentId;
use std::collections::HashSet;

/// Seconds of recency worth ten times the engagement.
pub const DECADE_SECS: f64 = 45_000.0;

/// Inputs to a comment's base score.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RankInput {
    /// Like count.
    pub likes: i64,
    /// Visible reply count.
    pub replies: i64,
    /// When the comment was created (milliseconds since the Unix epoch).
    pub created_ms: u64,
    /// The post author liked the comment.
    pub liked_by_post_author: bool,
    /// The post author replied to the comment.
    pub replied_by_post_author: bool,
    /// The comment was written by the post author.
    pub by_post_author: bool,
    /// The comment's author is verified.
    pub author_verified: bool,
    /// Spam likelihood, 0..=1 (see [`super::spam::spam_score`]).
    pub integrity: f32,
}

/// Multiplier for a comment whose author the viewer follows.
pub const FOLLOW_BOOST: f64 = 2.0;

/// At most this many pinned comments lead the list.
pub const MAX_PINS: usize = 3;

/// The weight of a certain spam comment (integrity 1): ranked as if it had a millionth of a
/// point, below every other comment of the last three days.
const MIN_WEIGHT: f64 = 1e-6;

/// The engagement points of the formula (see the module documentation).
pub fn points(r: &RankInput) -> f64 {
    // Counters can briefly read negative while deltas are in flight; never rank below zero.
    1.0 + r.likes.max(0) as f64
        + 2.0 * r.replies.max(0) as f64
        + if r.liked_by_post_author { 5.0 } else { 0.0 }
        + if r.replied_by_post_author { 3.0 } else { 0.0 }
}

/// The multiplier of the points: verified author, the post author's own, integrity. Fixed for
/// a comment's life (its text and author do not change), so an index can keep it and score
/// a new like count without reading the comment again.
pub fn weight_factor(r: &RankInput) -> f64 {
    let verified = if r.author_verified { 1.3 } else { 1.0 };
    let own = if r.by_post_author { 1.2 } else { 1.0 };
    // An unknown (NaN) spam likelihood is no evidence of spam.
    let integrity = if r.integrity.is_nan() { 0.0 } else { f64::from(r.integrity).clamp(0.0, 1.0) };
    verified * own * (1.0 - integrity).powi(2)
}

/// The score of `points` weighted by `factor`, for a comment created at `created_ms`.
pub fn score(points: f64, factor: f64, created_ms: u64) -> f64 {
    (points * factor).max(MIN_WEIGHT).log10() + (created_ms / 1000) as f64 / DECADE_SECS
}

/// The viewer-independent score; see the module documentation for the formula.
pub fn base_score(r: &RankInput) -> f64 {
    score(points(r), weight_factor(r), r.created_ms)
}

/// The score for one viewer: boosted when the viewer follows the comment's author.
pub fn viewer_score(base: f64, author_followed_by_viewer: bool) -> f64 {
    if author_followed_by_viewer { base + FOLLOW_BOOST.log10() } else { base }
}

/// The "top comments" order: up to [`MAX_PINS`] pinned comments first, in pin order (even if
/// absent from `scored`: a pin is the author's explicit choice), then the rest by score
/// descending, ties broken by the newer (higher) ID first. Each ID appears once.
pub fn order_top(pinned: &[CommentId], scored: &[(CommentId, f64)]) -> Vec<CommentId> {
    let mut seen: HashSet<CommentId> = HashSet::with_capacity(scored.len() + MAX_PINS);
    let mut out: Vec<CommentId> = Vec::with_capacity(scored.len() + MAX_PINS);
    for &id in pinned {
        if out.len() == MAX_PINS {
            break;
        }
        if seen.insert(id) {
            out.push(id);
        }
    }
    let mut rest: Vec<(CommentId, f64)> = scored
        .iter()
        // A NaN score would sort unpredictably; rank it last instead.
        .map(|&(id, s)| (id, if s.is_nan() { f64::NEG_INFINITY } else { s }))
        .collect();
    rest.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
    // Sorted best-first, so the first occurrence of a duplicate carries its best score.
    out.extend(rest.into_iter().map(|(id, _)| id).filter(|&id| seen.insert(id)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-01, a creation time for the tests.
    const T0: u64 = 1_796_083_200_000;

    fn fresh(likes: i64) -> RankInput {
        RankInput { likes, created_ms: T0, ..RankInput::default() }
    }

    #[test]
    fn a_comment_with_ten_likes_ranks_above_unliked_ones_of_the_same_age() {
        let liked = base_score(&fresh(10));
        let scored = [
            (CommentId(3), base_score(&fresh(0))),
            (CommentId(1), liked),
            (CommentId(2), base_score(&fresh(0))),
        ];
        assert_eq!(order_top(&[], &scored), [CommentId(1), CommentId(3), CommentId(2)]);
    }

    #[test]
    fn a_pinned_comment_ranks_first() {
        let scored = [(CommentId(1), 50.0), (CommentId(2), 0.1)];
        assert_eq!(order_top(&[CommentId(2)], &scored), [CommentId(2), CommentId(1)]);
    }

    #[test]
    fn pins_lead_in_pin_order_even_when_unscored_and_at_most_three() {
        let pins = [CommentId(9), CommentId(8), CommentId(9), CommentId(7), CommentId(6)];
        let scored = [(CommentId(6), 5.0), (CommentId(8), 1.0), (CommentId(5), 2.0)];
        let expected = [CommentId(9), CommentId(8), CommentId(7), CommentId(6), CommentId(5)];
        assert_eq!(order_top(&pins, &scored), expected);
    }

    #[test]
    fn ties_go_to_the_newer_comment_and_duplicates_appear_once() {
        let scored =
            [(CommentId(1), 1.0), (CommentId(2), 1.0), (CommentId(1), 0.5), (CommentId(3), f64::NAN)];
        assert_eq!(order_top(&[], &scored), [CommentId(2), CommentId(1), CommentId(3)]);
    }

    #[test]
    fn a_followed_author_is_boosted_as_if_the_comment_had_twice_the_weight() {
        let base = base_score(&fresh(2));
        let (followed, other) = (viewer_score(base, true), viewer_score(base_score(&fresh(3)), false));
        assert!(
            (followed - base_score(&RankInput { likes: 5, ..fresh(0) })).abs() < 1e-9,
            "3 points x 2 = 6"
        );
        assert_eq!(viewer_score(base, false), base);
        assert!(followed > other);
    }

    #[test]
    fn an_old_comment_with_few_likes_falls_below_a_fresh_one_with_more() {
        let old = RankInput { likes: 5, created_ms: T0 - 2 * 86_400_000, ..RankInput::default() };
        let new = RankInput { likes: 3, created_ms: T0 - 1_800_000, ..RankInput::default() };
        assert!(base_score(&new) > base_score(&old));
    }

    #[test]
    fn an_hour_old_comment_with_hundreds_of_likes_beats_fresh_ones_with_none() {
        let old = RankInput { likes: 300, created_ms: T0 - 3_600_000, ..RankInput::default() };
        assert!(base_score(&old) > base_score(&fresh(0)));
    }

    #[test]
    fn two_comments_keep_their_order_as_time_passes() {
        // The score is fixed at creation: no clock in it, so an index never goes stale.
        let a = RankInput { likes: 400, created_ms: T0 - 86_400_000, ..RankInput::default() };
        let b = RankInput { likes: 2, created_ms: T0, ..RankInput::default() };
        assert_eq!(base_score(&a), base_score(&a));
        assert!(base_score(&a) > base_score(&b), "400 likes a day ago beat 2 now");
        let c = RankInput { likes: 2, created_ms: T0 + 3 * 86_400_000, ..RankInput::default() };
        assert!(base_score(&c) > base_score(&a), "three days later, 2 likes beat 400");
    }

    #[test]
    fn spam_integrity_demotes() {
        let clean = fresh(10);
        let spammy = RankInput { integrity: 0.8, ..clean };
        assert!(base_score(&spammy) < base_score(&fresh(0)));
        let certain = base_score(&RankInput { integrity: 1.0, ..clean });
        assert!(certain < base_score(&RankInput { created_ms: T0 - 3 * 86_400_000, ..fresh(0) }));
        assert_eq!(base_score(&RankInput { integrity: f32::NAN, ..clean }), base_score(&clean));
    }

    #[test]
    fn the_post_authors_attention_and_status_raise_the_score() {
        let plain = base_score(&fresh(0));
        assert!(base_score(&RankInput { liked_by_post_author: true, ..fresh(0) }) > base_score(&fresh(4)));
        assert!(base_score(&RankInput { replied_by_post_author: true, ..fresh(0) }) > plain);
        let verified = base_score(&RankInput { author_verified: true, ..fresh(0) });
        assert!((verified - plain - 1.3f64.log10()).abs() < 1e-9);
        let own = base_score(&RankInput { by_post_author: true, ..fresh(0) });
        assert!((own - plain - 1.2f64.log10()).abs() < 1e-9);
    }

    #[test]
    fn the_formula_matches_its_documentation() {
        let r = RankInput {
            likes: 4,
            replies: 2,
            created_ms: 90_000_000,
            integrity: 0.5,
            ..RankInput::default()
        };
        // log10((1 + 4 + 4) · 0.25) + 90,000 / 45,000
        assert!((base_score(&r) - (2.25f64.log10() + 2.0)).abs() < 1e-12);
        assert_eq!(base_score(&RankInput { likes: -5, ..RankInput::default() }), 0.0);
    }
}
