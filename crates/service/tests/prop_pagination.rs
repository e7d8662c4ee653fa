//! Pagination under concurrent writes: for random sequences of comment creates and deletes,
//! of likes and unlikes and of comments' scores moving (as comment likes move them)
//! interleaved with the pages of a walk (comments newest first, oldest first, top, the replies
//! of a comment, likers; random page sizes), a walk
//! - never shows an item twice, and keeps its order from page to page (a top walk: the order
//!   of its first page's moment, whatever scores do meanwhile);
//! - never skips an item that existed (unchanged) for the whole walk: everything in both the
//!   quiescent listing taken just before the walk and the one just after it (likers whose like
//!   was toggled during the walk excepted: a new like is a new position);
//! - never shows an item that was in neither listing and was not written during the walk.
//!
//! The quiescent listings are themselves checked against a model of the writes: a moderator
//! sees every top-level comment that exists (deleted ones with replies as placeholders), and
//! the likers are exactly the users whose like is on.

use likewise_store::testing::scratch_dir;

use likewise_core::comment::status::CommentStatus;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::like::LikeAction;
use likewise_core::model::{CommentsPolicy, PostMeta};
use likewise_core::ports::{Liker, RankChange, RankEntry};
use likewise_service::comments::{Order, Reader};
use likewise_service::moderation::ModerationOptions;
use likewise_service::ranking::TopCursor;
use likewise_service::{Engagement, ServiceOptions};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

const AUTHOR: UserId = UserId(1);
const POST: PostId = PostId(1);
const MODERATOR: Reader = Reader { user: UserId(99), moderator: true };
const STRANGER: Reader = Reader { user: UserId(50), moderator: false };

#[derive(Debug, Clone)]
enum Op {
    /// A comment by `user`, a reply to the `reply_to`-th comment written so far.
    Comment { user: u64, reply_to: Option<usize> },
    /// Delete the `nth` comment written so far (by its author).
    Delete { nth: usize },
    /// Like (or unlike) the post as `user`.
    Like { user: u64, on: bool },
    /// Move the `nth` comment's score up or down by `by` steps, as the aggregator does when
    /// its likes change (the service alone runs no aggregator).
    Rescore { nth: usize, up: bool, by: u8 },
    /// Fetch the next page of the walk in progress.
    Page,
}

#[derive(Debug, Clone, Copy)]
enum Walk {
    Newest,
    Oldest,
    /// The replies of the `nth` comment written so far.
    Replies(usize),
    Likers,
    Top,
}

#[derive(Debug, Clone)]
struct Phase {
    setup: Vec<Op>,
    walk: Walk,
    limit: usize,
    moderator: bool,
    during: Vec<Op>,
}

fn write_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (10u64..30, proptest::option::of(0usize..12)).prop_map(|(user, reply_to)| Op::Comment { user, reply_to }),
        2 => (0usize..12).prop_map(|nth| Op::Delete { nth }),
        4 => (10u64..22, any::<bool>()).prop_map(|(user, on)| Op::Like { user, on }),
        4 => (0usize..12, any::<bool>(), 1u8..5).prop_map(|(nth, up, by)| Op::Rescore { nth, up, by }),
    ]
}

fn during_op() -> impl Strategy<Value = Op> {
    prop_oneof![3 => write_op(), 2 => Just(Op::Page)]
}

fn phase() -> impl Strategy<Value = Phase> {
    let walk = prop_oneof![
        Just(Walk::Newest),
        Just(Walk::Oldest),
        (0usize..8).prop_map(Walk::Replies),
        Just(Walk::Likers),
        Just(Walk::Top),
    ];
    (
        proptest::collection::vec(write_op(), 0..14),
        walk,
        1usize..5,
        any::<bool>(),
        proptest::collection::vec(during_op(), 0..16),
    )
        .prop_map(|(setup, walk, limit, moderator, during)| Phase {
            setup,
            walk,
            limit,
            moderator,
            during,
        })
}

/// A top walk over a post with a dozen comments or so whose scores move between its pages.
fn top_phase() -> impl Strategy<Value = Phase> {
    let comment = (10u64..30).prop_map(|user| Op::Comment { user, reply_to: None });
    let rescore = (0usize..16, any::<bool>(), 1u8..5).prop_map(|(nth, up, by)| Op::Rescore { nth, up, by });
    let during = prop_oneof![4 => rescore, 3 => Just(Op::Page), 1 => write_op()];
    (
        proptest::collection::vec(comment, 6..16),
        1usize..4,
        any::<bool>(),
        proptest::collection::vec(during, 4..24),
    )
        .prop_map(|(setup, limit, moderator, during)| Phase {
            setup,
            walk: Walk::Top,
            limit,
            moderator,
            during,
        })
}

/// The writes, as the test made them.
#[derive(Default)]
struct Model {
    /// Every comment written: (id, author, top-level parent).
    written: Vec<(CommentId, UserId, Option<CommentId>)>,
    /// Comments that exist, with `true` for deleted placeholders.
    live: BTreeMap<CommentId, bool>,
    likers: BTreeSet<UserId>,
    /// Comments per user (kept low so the velocity signal never holds one back).
    per_user: BTreeMap<UserId, usize>,
}

impl Model {
    fn top_level(&self) -> BTreeSet<CommentId> {
        let tops: HashSet<CommentId> =
            self.written.iter().filter(|(_, _, p)| p.is_none()).map(|(id, _, _)| *id).collect();
        self.live.keys().copied().filter(|id| tops.contains(id)).collect()
    }

    fn replies_of(&self, parent: CommentId) -> BTreeSet<CommentId> {
        self.written
            .iter()
            .filter(|(id, _, p)| *p == Some(parent) && self.live.contains_key(id))
            .map(|(id, _, _)| *id)
            .collect()
    }
}

/// What the writes during a walk changed.
#[derive(Default)]
struct Touched {
    comments: HashSet<CommentId>,
    likers: HashSet<UserId>,
}

async fn service(dir: &std::path::Path) -> Arc<Engagement> {
    // Generous limits: this test is about pages, not about rate limits or near-duplicates.
    let moderation = ModerationOptions {
        comments_per_minute: 10_000,
        comment_burst: 10_000,
        duplicate_copies: 10_000,
        ..ModerationOptions::default()
    };
    let svc = Engagement::new(
        likewise_store::testing::open_small(dir),
        ServiceOptions { moderation, ..ServiceOptions::default() },
    );
    let meta = PostMeta { author: AUTHOR, hide_like_count: false, comments: CommentsPolicy::Everyone };
    svc.upstream.put_post(POST, meta).await.expect("post");
    svc
}

const WORDS: [&str; 12] = [
    "sunny", "garden", "river", "coffee", "morning", "bright", "music", "window", "paper", "green", "quiet",
    "bridge",
];

async fn apply(svc: &Engagement, model: &mut Model, op: &Op, touched: &mut Touched, serial: &mut usize) {
    match *op {
        Op::Comment { user, reply_to } => {
            let user = UserId(user);
            if model.per_user.get(&user).copied().unwrap_or(0) >= 6 {
                return;
            }
            *serial += 1;
            let text = format!(
                "{} {} {} number {serial}",
                WORDS[*serial % 12],
                WORDS[*serial * 7 % 12],
                WORDS[user.0 as usize % 12]
            );
            let parent = reply_to.and_then(|n| model.written.get(n)).map(|(id, _, _)| *id);
            let res = svc.comments.create(user, POST, &text, parent, None).await;
            // A reply goes under the top-level parent; replying to a deleted comment is refused.
            let top = parent.map(|p| {
                model.written.iter().find(|(id, _, _)| *id == p).and_then(|(_, _, pp)| *pp).unwrap_or(p)
            });
            let parent_ok = parent.is_none_or(|p| model.live.get(&p) == Some(&false));
            match res {
                Ok(v) => {
                    assert!(parent_ok, "a reply to a deleted comment was accepted");
                    assert_eq!(v.record.parent, top, "replies go under the top-level parent");
                    model.written.push((v.record.id, user, top));
                    model.live.insert(v.record.id, false);
                    *model.per_user.entry(user).or_default() += 1;
                    touched.comments.insert(v.record.id);
                }
                Err(e) => assert!(!parent_ok, "comment refused: {e}"),
            }
        }
        Op::Delete { nth } => {
            let Some(&(id, author, parent)) = model.written.get(nth) else { return };
            let reader = Reader { user: author, moderator: false };
            let res = svc.comments.delete(reader, id).await;
            match model.live.get(&id).copied() {
                None => assert!(res.is_err(), "deleting a removed comment succeeded"),
                Some(true) => assert!(res.is_ok(), "deleting a placeholder again: {res:?}"),
                Some(false) => {
                    res.expect("delete");
                    if parent.is_none() && !model.replies_of(id).is_empty() {
                        model.live.insert(id, true);
                    } else {
                        model.live.remove(&id);
                        // The last reply of a placeholder takes it along.
                        if let Some(p) = parent
                            && model.live.get(&p) == Some(&true)
                            && model.replies_of(p).is_empty()
                        {
                            model.live.remove(&p);
                            touched.comments.insert(p);
                        }
                    }
                    touched.comments.insert(id);
                }
            }
        }
        Op::Like { user, on } => {
            let action = if on { LikeAction::Like } else { LikeAction::Unlike };
            let r = svc.likes.set_post_like(UserId(user), POST, action).await.expect("like");
            let was = model.likers.contains(&UserId(user));
            assert_eq!((r.liked, r.changed), (on, on != was));
            if r.changed {
                touched.likers.insert(UserId(user));
            }
            if on {
                model.likers.insert(UserId(user));
            } else {
                model.likers.remove(&UserId(user));
            }
        }
        Op::Rescore { nth, up, by } => {
            let Some(&(id, _, None)) = model.written.get(nth) else { return };
            let ranks = &svc.stores().ranks;
            let Some(e) = ranks.ranks_of(POST, &[id]).await.expect("entry")[0] else { return };
            // A step is about a tripling of its likes: enough to pass its neighbours.
            let step = if up { 0.5 } else { -0.5 };
            let moved = RankEntry { score: e.score + step * f64::from(by), ..e };
            ranks.change_ranks(&[RankChange::Put(moved)]).await.expect("rescore");
        }
        Op::Page => {}
    }
}

/// One item of a walk: a comment ID, or a liker's (time, user) position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Item {
    Comment(CommentId),
    Liker(u64, UserId),
}

impl Item {
    fn key(self) -> u64 {
        match self {
            Item::Comment(id) => id.0,
            Item::Liker(_, u) => u.0,
        }
    }
}

/// Where a walk is; `done` once its last page was read.
struct Cursor {
    comment: Option<CommentId>,
    liker: Option<Liker>,
    top: Option<TopCursor>,
    done: bool,
}

/// Fetch one page; `None` when the walk cannot go on (its parent comment is gone).
async fn page(
    svc: &Engagement,
    reader: Reader,
    walk: Walk,
    parent: Option<CommentId>,
    limit: usize,
    c: &mut Cursor,
) -> Option<Vec<Item>> {
    if c.done {
        return Some(Vec::new());
    }
    let items = match walk {
        Walk::Newest | Walk::Oldest | Walk::Replies(_) => {
            let p = match walk {
                Walk::Newest => svc.comments.list(reader, POST, Order::Newest, c.comment, limit).await,
                Walk::Oldest => svc.comments.list(reader, POST, Order::Oldest, c.comment, limit).await,
                _ => match svc.comments.replies(reader, parent?, c.comment, limit).await {
                    Ok(p) => Ok(p),
                    Err(_) => return None,
                },
            }
            .expect("page");
            assert!(p.items.len() <= limit, "page longer than its limit");
            c.comment = p.next_after;
            c.done = p.next_after.is_none();
            p.items.iter().map(|v| Item::Comment(v.record.id)).collect()
        }
        Walk::Top => {
            let p = svc.ranking.list_top(reader, POST, c.top, limit).await.expect("top page");
            assert!(p.items.len() <= limit, "page longer than its limit");
            c.top = p.next;
            c.done = p.next.is_none();
            p.items.iter().map(|v| Item::Comment(v.record.id)).collect()
        }
        Walk::Likers => {
            let p = svc.likes.post_likers(POST, c.liker, limit).await.expect("likers");
            assert!(p.items.len() <= limit, "page longer than its limit");
            c.liker = p.next;
            c.done = p.next.is_none();
            p.items.iter().map(|(l, _)| Item::Liker(l.liked_at_ms, l.user)).collect()
        }
    };
    Some(items)
}

async fn full(svc: &Engagement, reader: Reader, walk: Walk, parent: Option<CommentId>) -> Option<Vec<Item>> {
    let mut c = Cursor { comment: None, liker: None, top: None, done: false };
    let mut out = Vec::new();
    while !c.done {
        out.extend(page(svc, reader, walk, parent, 100, &mut c).await?);
    }
    Some(out)
}

fn ordered(walk: Walk, items: &[Item]) -> bool {
    items.windows(2).all(|w| match walk {
        Walk::Newest | Walk::Likers => w[0] > w[1],
        Walk::Oldest | Walk::Replies(_) => w[0] < w[1],
        Walk::Top => true, // by score: checked against the listing before the walk
    })
}

async fn run(phases: Vec<Phase>) {
    let dir = scratch_dir();
    let svc = service(dir.path()).await;
    let mut model = Model::default();
    let mut serial = 0;
    for ph in phases {
        let mut scratch = Touched::default();
        for op in &ph.setup {
            apply(&svc, &mut model, op, &mut scratch, &mut serial).await;
        }
        let reader = if ph.moderator { MODERATOR } else { STRANGER };
        let parent = match ph.walk {
            Walk::Replies(n) => match model.written.get(n) {
                Some(&(id, _, None)) => Some(id),
                _ => continue,
            },
            _ => None,
        };
        let Some(before) = full(&svc, reader, ph.walk, parent).await else { continue };
        assert!(ordered(ph.walk, &before), "a quiescent listing is out of order: {before:?}");
        // The quiescent listings agree with the model.
        let keys: BTreeSet<u64> = before.iter().map(|i| i.key()).collect();
        match ph.walk {
            Walk::Likers => {
                assert_eq!(keys, model.likers.iter().map(|u| u.0).collect(), "likers == likes that are on")
            }
            Walk::Newest | Walk::Oldest | Walk::Top if reader.moderator => {
                let want: BTreeSet<u64> = model.top_level().iter().map(|c| c.0).collect();
                assert_eq!(keys, want, "a moderator sees every existing top-level comment");
            }
            Walk::Replies(_) if reader.moderator => {
                let want: BTreeSet<u64> =
                    model.replies_of(parent.expect("parent")).iter().map(|c| c.0).collect();
                assert_eq!(keys, want, "a moderator sees every existing reply");
            }
            _ => {}
        }

        // The walk, with writes between its pages.
        let mut cursor = Cursor { comment: None, liker: None, top: None, done: false };
        let mut seen: Vec<Item> = Vec::new();
        let mut touched = Touched::default();
        let mut broken = false;
        // The top order at the moment of the walk's first page (writes may come before it).
        let mut at_start: Option<Vec<Item>> = None;
        for op in ph.during.iter().chain(std::iter::repeat(&Op::Page)) {
            if cursor.done || broken {
                break;
            }
            if matches!(op, Op::Page) {
                if matches!(ph.walk, Walk::Top) && at_start.is_none() {
                    at_start = full(&svc, reader, ph.walk, parent).await;
                }
                match page(&svc, reader, ph.walk, parent, ph.limit, &mut cursor).await {
                    Some(items) => seen.extend(items),
                    None => broken = true,
                }
            } else {
                apply(&svc, &mut model, op, &mut touched, &mut serial).await;
            }
        }
        if broken {
            // Only a walk over replies can break, and only because its parent was removed.
            assert!(!model.live.contains_key(&parent.expect("replies walk")), "replies walk failed");
            continue;
        }
        let Some(after) = full(&svc, reader, ph.walk, parent).await else { continue };

        let once: HashSet<u64> = seen.iter().map(|i| i.key()).collect();
        assert_eq!(once.len(), seen.len(), "a walk showed an item twice: {seen:?}");
        assert!(ordered(ph.walk, &seen), "a walk went out of order: {seen:?}");
        if let Some(start) = &at_start {
            // The walk keeps the order of its first page's moment, whatever scores did since:
            // it is that listing less what went meanwhile, and skips nothing that stayed.
            let kept: Vec<Item> = start.iter().filter(|i| once.contains(&i.key())).copied().collect();
            assert_eq!(seen, kept, "a top walk left the order of its first page's moment");
            for k in start.iter().map(|i| i.key()).filter(|k| after.iter().any(|a| a.key() == *k)) {
                assert!(once.contains(&k), "the top walk skipped {k}, there at its start and after it");
            }
        }
        let before_keys: HashSet<u64> = before.iter().map(|i| i.key()).collect();
        let after_keys: HashSet<u64> = after.iter().map(|i| i.key()).collect();
        let changed =
            |k: u64| touched.comments.contains(&CommentId(k)) || touched.likers.contains(&UserId(k));
        for k in before_keys.intersection(&after_keys) {
            if matches!(ph.walk, Walk::Likers) && changed(*k) {
                continue;
            }
            assert!(once.contains(k), "the walk skipped {k}, there before and after it: {seen:?}");
        }
        for k in &once {
            assert!(
                before_keys.contains(k) || after_keys.contains(k) || changed(*k),
                "the walk showed {k}, which it should never have seen"
            );
        }
    }
    // Sanity: every comment the model thinks exists is stored with the expected shape.
    let ids: Vec<CommentId> = model.live.keys().copied().collect();
    let stored = svc.stores().comments.comments(&ids).await.expect("read");
    for (id, rec) in ids.iter().zip(stored) {
        let rec = rec.unwrap_or_else(|| panic!("comment {id:?} is missing"));
        assert_eq!(rec.status == CommentStatus::Deleted, model.live[id], "placeholder state of {id:?}");
    }
    svc.stores().close().expect("close");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, .. ProptestConfig::default() })]
    #[test]
    fn walks_never_repeat_or_skip_under_concurrent_writes(phases in proptest::collection::vec(phase(), 1..4)) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
        rt.block_on(run(phases));
    }

    #[test]
    fn top_walks_keep_their_first_moments_order_while_scores_move(phases in proptest::collection::vec(top_phase(), 1..3)) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
        rt.block_on(run(phases));
    }
}
