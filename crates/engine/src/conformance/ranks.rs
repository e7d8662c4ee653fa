//! The rank index as it was at a version (`RankIndex::ranked_at`): what a top-comments walk
//! pages through while likes and moderation move entries.

use crate::Stores;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::ports::{RankChange, RankEntry};

fn put(post: u64, comment: u64, author: u64, score: f64, listed: bool) -> RankChange {
    RankChange::Put(RankEntry {
        post: PostId(post),
        comment: CommentId(comment),
        author: UserId(author),
        score,
        author_replied: false,
        author_liked: false,
        factor: 1.0,
        listed,
    })
}

fn placed(v: Vec<RankEntry>) -> Vec<(u64, f64)> {
    v.into_iter().map(|e| (e.comment.0, e.score)).collect()
}

/// Read at a version, the index shows every entry where it was then, whatever moved since
/// (rose past a cursor, fell below it, was removed, held or approved), leaves out entries
/// made later, and pages by keyset over that order; a later version reads as now.
pub async fn the_rank_index_reads_as_it_was_at_a_version(s: &Stores) {
    let r = &s.ranks;
    let p = PostId(1);
    assert_eq!(r.rank_version(p).await.expect("version"), 0, "no change yet");
    r.change_ranks(&[
        put(1, 10, 1, 5.0, true),
        put(1, 11, 2, 4.0, true),
        put(1, 12, 3, 3.0, true),
        put(1, 13, 4, 2.0, true),
        put(1, 14, 5, 1.0, false),
        put(2, 20, 1, 8.0, true),
    ])
    .await
    .expect("put");
    let v = r.rank_version(p).await.expect("version");
    let first = r.ranked_at(p, v, None, 2).await.expect("first page");
    assert_eq!(placed(first), [(10, 5.0), (11, 4.0)]);
    // Meanwhile: 12 rises past the cursor, 10 falls below it, 11 goes, 13 is held, 14 is
    // approved, 15 is new; 12 moves again.
    r.change_ranks(&[put(1, 12, 3, 9.0, true), put(1, 10, 1, 0.5, true)]).await.expect("likes");
    r.change_ranks(&[
        RankChange::Remove { post: p, comment: CommentId(11) },
        put(1, 13, 4, 2.0, false),
        put(1, 14, 5, 6.0, true),
        put(1, 15, 6, 7.0, true),
    ])
    .await
    .expect("moderation");
    r.change_ranks(&[put(1, 12, 3, 1.5, true), put(2, 20, 1, 0.1, true)]).await.expect("more likes");
    let now = r.ranked(p, None, 10).await.expect("now");
    assert_eq!(placed(now), [(15, 7.0), (14, 6.0), (12, 1.5), (10, 0.5)], "today's order");
    let rest = r.ranked_at(p, v, Some((4.0, CommentId(11))), 10).await.expect("next page");
    assert_eq!(placed(rest), [(12, 3.0), (13, 2.0)], "the rest of the walk, as it was");
    let all = r.ranked_at(p, v, None, 10).await.expect("all then");
    assert_eq!(placed(all.clone()), [(10, 5.0), (11, 4.0), (12, 3.0), (13, 2.0)]);
    assert!(all.iter().all(|e| e.listed));
    assert_eq!(all[1].author, UserId(2), "a removed entry keeps its author");
    let short = r.ranked_at(p, v, Some((5.0, CommentId(10))), 1).await.expect("short page");
    assert_eq!(placed(short), [(11, 4.0)]);
    // Unlisted then: 14 (its author's), not 13.
    let held = r.held_ranks_at(p, v, Some(UserId(5)), 10).await.expect("held then");
    assert_eq!(placed(held.clone()), [(14, 1.0)]);
    assert!(!held[0].listed);
    assert_eq!(placed(r.held_ranks_at(p, v, None, 10).await.expect("all held then")), [(14, 1.0)]);
    assert!(r.held_ranks_at(p, v, Some(UserId(4)), 10).await.expect("13 was listed").is_empty());
    // The latest version reads as now; other posts keep their own versions.
    let latest = r.rank_version(p).await.expect("latest");
    assert!(latest > v, "moves raise the version");
    let again = r.ranked_at(p, latest, None, 10).await.expect("latest");
    assert_eq!(placed(again), placed(r.ranked(p, None, 10).await.expect("now")));
    assert_eq!(placed(r.held_ranks_at(p, latest, None, 10).await.expect("held now")), [(13, 2.0)]);
    let other = r.rank_version(PostId(2)).await.expect("other post");
    assert_eq!(placed(r.ranked_at(PostId(2), 0, None, 10).await.expect("other at 0")), Vec::new());
    assert_eq!(placed(r.ranked_at(PostId(2), other, None, 10).await.expect("other now")), [(20, 0.1)]);
    // A change of flags alone moves nothing: the walk at `v` still reads the same.
    r.change_ranks(&[RankChange::Put(RankEntry {
        author_liked: true,
        ..r.ranks_of(p, &[CommentId(15)]).await.expect("of")[0].expect("15")
    })])
    .await
    .expect("flag");
    let all = r.ranked_at(p, v, None, 10).await.expect("after flag");
    assert_eq!(placed(all), [(10, 5.0), (11, 4.0), (12, 3.0), (13, 2.0)]);
}
