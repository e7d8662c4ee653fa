//! Visibility under any sequence of actions, against a reference model written from
//! `docs/moderation.md` (not from the code): posts with and without hidden like counts, viewers
//! who hide counts, follower-only comments, restricted and blocked commenters, hidden-words
//! hits, reports that make a comment pending (a repeat report never does, and an approved
//! comment only with a fresh threshold of new reporters), approvals, appeals (once each, only
//! by the author), moderators' decisions, deletions, likes of posts and comments. After any prefix, for every viewer:
//! - comment lists (newest, oldest; random page sizes), replies and top comments show exactly
//!   the comments the rules let this viewer see, each with the status the rules say they are
//!   shown (shadowed ones as `visible` to their author), placeholders without text;
//! - a like count is present exactly when the viewer is the author or neither the post nor the
//!   viewer's own settings hide it;
//! - `viewer_has_liked` (posts and comments) and the settings read back are the viewer's own.

use likewise_store::testing::scratch_dir;

use likewise_core::comment::status::CommentStatus::{self, *};
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::like::LikeAction;
use likewise_core::model::{CommentsPolicy, PostMeta, ViewerSettings};
use likewise_core::ports::ReportReason;
use likewise_service::comments::{CommentView, Order, Reader};
use likewise_service::moderation::ModerationOptions;
use likewise_service::ranking::TopCursor;
use likewise_service::review::Decision;
use likewise_service::{Engagement, ServiceError, ServiceOptions};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Posts: (id, author, comments policy). Post 2 starts with its like count hidden.
const POSTS: [(PostId, UserId, CommentsPolicy); 3] = [
    (PostId(1), UserId(1), CommentsPolicy::Everyone),
    (PostId(2), UserId(2), CommentsPolicy::Everyone),
    (PostId(3), UserId(1), CommentsPolicy::Followers),
];
const MODERATOR: UserId = UserId(99);
const REPORTS_TO_HIDE: u32 = 2;
const HIDDEN_WORD: &str = "pineapple";

#[derive(Debug, Clone)]
enum Op {
    Comment {
        user: u64,
        post: usize,
        bad: bool,
        reply_to: Option<usize>,
    },
    Like {
        user: u64,
        post: usize,
        on: bool,
    },
    CommentLike {
        user: u64,
        nth: usize,
        on: bool,
    },
    Restrict {
        owner: u64,
        other: u64,
        on: bool,
    },
    Block {
        owner: u64,
        other: u64,
        on: bool,
    },
    HiddenWords {
        owner: u64,
        on: bool,
    },
    Settings {
        user: u64,
        hide: bool,
    },
    PostFlag {
        post: usize,
        hide: bool,
    },
    /// `user` follows (or unfollows) user 1, the author of the followers-only post.
    Follow {
        user: u64,
        on: bool,
    },
    Report {
        user: u64,
        nth: usize,
    },
    Approve {
        user: u64,
        nth: usize,
    },
    Appeal {
        user: u64,
        nth: usize,
    },
    Moderate {
        nth: usize,
        approve: bool,
    },
    Delete {
        user: u64,
        nth: usize,
    },
    Check {
        limit: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let user = || 1u64..7;
    let owner = || 1u64..3;
    let nth = || 0usize..14;
    prop_oneof![
        8 => (user(), 0usize..3, any::<bool>(), proptest::option::of(nth()))
            .prop_map(|(user, post, bad, reply_to)| Op::Comment { user, post, bad, reply_to }),
        2 => (user(), 0usize..3, any::<bool>()).prop_map(|(user, post, on)| Op::Like { user, post, on }),
        2 => (user(), nth(), any::<bool>()).prop_map(|(user, nth, on)| Op::CommentLike { user, nth, on }),
        1 => (owner(), 3u64..7, any::<bool>()).prop_map(|(owner, other, on)| Op::Restrict { owner, other, on }),
        1 => (owner(), 3u64..7, any::<bool>()).prop_map(|(owner, other, on)| Op::Block { owner, other, on }),
        1 => (owner(), any::<bool>()).prop_map(|(owner, on)| Op::HiddenWords { owner, on }),
        1 => (user(), any::<bool>()).prop_map(|(user, hide)| Op::Settings { user, hide }),
        1 => (0usize..3, any::<bool>()).prop_map(|(post, hide)| Op::PostFlag { post, hide }),
        1 => (3u64..7, any::<bool>()).prop_map(|(user, on)| Op::Follow { user, on }),
        2 => (user(), nth()).prop_map(|(user, nth)| Op::Report { user, nth }),
        2 => (user(), nth()).prop_map(|(user, nth)| Op::Approve { user, nth }),
        1 => (user(), nth()).prop_map(|(user, nth)| Op::Appeal { user, nth }),
        1 => (nth(), any::<bool>()).prop_map(|(nth, approve)| Op::Moderate { nth, approve }),
        2 => (user(), nth()).prop_map(|(user, nth)| Op::Delete { user, nth }),
        2 => (1usize..5).prop_map(|limit| Op::Check { limit }),
    ]
}

#[derive(Debug, Clone)]
struct MComment {
    id: CommentId,
    post: PostId,
    author: UserId,
    post_author: UserId,
    /// The top-level parent, for a reply.
    parent: Option<CommentId>,
    status: CommentStatus,
    removed: bool,
    text: String,
    reporters: BTreeSet<UserId>,
    /// Reporters weighed by the last approval (author's or moderator's).
    reviewed: usize,
    appealed: bool,
}

/// The reference model: what the rules say, kept independently of the service.
#[derive(Default)]
struct Model {
    comments: Vec<MComment>,
    post_hides: [bool; 3],
    settings: BTreeMap<UserId, bool>,
    restricts: BTreeSet<(UserId, UserId)>,
    blocks: BTreeSet<(UserId, UserId)>,
    hidden_words: BTreeSet<UserId>,
    follows_author_1: BTreeSet<UserId>,
    post_likes: BTreeSet<(UserId, PostId)>,
    comment_likes: BTreeSet<(UserId, CommentId)>,
    per_user: BTreeMap<UserId, usize>,
}

/// The table of `docs/moderation.md`: what `reader` is shown of `c`, if anything.
fn shown(reader: Reader, c: &MComment) -> Option<CommentStatus> {
    if c.removed {
        return None;
    }
    match c.status {
        Visible => Some(Visible),
        // A stored placeholder (a deleted comment with replies) is shown to everyone, unless it
        // was held back when deleted: then only to those who saw it whatever its status.
        Deleted => Some(Deleted),
        DeletedWhileHeld if reader.moderator || reader.user == c.author => Some(Deleted),
        DeletedWhileHeld => None,
        s if reader.moderator => Some(s),
        _ if reader.user == c.author => Some(Visible),
        Pending | Restricted if reader.user == c.post_author => Some(c.status),
        _ => None,
    }
}

/// [`shown`] in lists (every order, top, previews): a placeholder only over a reply the
/// reader is shown.
fn listed(m: &Model, reader: Reader, c: &MComment) -> Option<CommentStatus> {
    let s = shown(reader, c)?;
    let over_a_shown_reply =
        || m.comments.iter().any(|r| r.parent == Some(c.id) && shown(reader, r).is_some());
    (!c.status.is_deleted() || over_a_shown_reply()).then_some(s)
}

fn user_reader(user: u64) -> Reader {
    Reader { user: UserId(user), moderator: false }
}

impl Model {
    fn by_id(&self, id: CommentId) -> &MComment {
        self.comments.iter().find(|c| c.id == id).expect("known comment")
    }

    fn has_replies(&self, id: CommentId) -> bool {
        self.comments.iter().any(|c| c.parent == Some(id) && !c.removed)
    }

    fn count_visible(&self, viewer: UserId, post: usize) -> bool {
        let (_, author, _) = POSTS[post];
        viewer == author || !(self.post_hides[post] || self.settings.get(&viewer).copied().unwrap_or(false))
    }

    fn may_comment(&self, user: UserId, post: usize) -> bool {
        let (_, author, policy) = POSTS[post];
        !self.blocks.contains(&(author, user))
            && match policy {
                CommentsPolicy::Everyone => true,
                CommentsPolicy::Off => false,
                CommentsPolicy::Followers => user == author || self.follows_author_1.contains(&user),
            }
    }
}

async fn service(dir: &std::path::Path) -> Arc<Engagement> {
    let moderation = ModerationOptions {
        comments_per_minute: 10_000,
        comment_burst: 10_000,
        duplicate_copies: 10_000,
        report_threshold: REPORTS_TO_HIDE,
        ..ModerationOptions::default()
    };
    let svc = Engagement::new(
        likewise_store::testing::open_small(dir),
        ServiceOptions { moderation, ..ServiceOptions::default() },
    );
    for (i, (post, author, comments)) in POSTS.into_iter().enumerate() {
        let meta = PostMeta { author, hide_like_count: i == 1, comments };
        svc.upstream.put_post(post, meta).await.expect("post");
    }
    svc
}

const WORDS: [&str; 12] = [
    "sunny", "garden", "river", "coffee", "morning", "bright", "music", "window", "paper", "green", "quiet",
    "bridge",
];

async fn apply(svc: &Engagement, m: &mut Model, op: &Op, serial: &mut usize) {
    match *op {
        Op::Comment { user, post, bad, reply_to } => {
            let user = UserId(user);
            // Few comments per user, so the velocity signal of the classifier never fires.
            if m.per_user.get(&user).copied().unwrap_or(0) >= 6 {
                return;
            }
            *serial += 1;
            let (post_id, post_author, _) = POSTS[post];
            let w = |k: usize| WORDS[(*serial * k + k) % WORDS.len()];
            let text = if bad {
                format!("{} {HIDDEN_WORD} {} note {serial}", w(1), w(5))
            } else {
                format!("{} {} {} note {serial}", w(1), w(5), w(7))
            };
            let parent = reply_to.and_then(|n| m.comments.get(n)).cloned();
            let res = svc.comments.create(user, post_id, &text, parent.as_ref().map(|p| p.id), None).await;
            // A parent must exist, be on this post, not be deleted, and be one the replier is
            // shown (a held comment does not exist for them: 404).
            let parent_ok = parent.as_ref().is_none_or(|p| {
                p.post == post_id
                    && !p.removed
                    && !p.status.is_deleted()
                    && shown(Reader { user, moderator: false }, p).is_some()
            });
            // No reply to, or under, a comment whose author blocked the replier.
            let unblocked = parent.as_ref().is_none_or(|p| {
                let top = p.parent.map_or(p.author, |t| m.by_id(t).author);
                !m.blocks.contains(&(p.author, user)) && !m.blocks.contains(&(top, user))
            });
            if !m.may_comment(user, post) || !parent_ok || !unblocked {
                assert!(res.is_err(), "comment by {user:?} on post {post} should be refused");
                return;
            }
            let v = res.expect("comment accepted");
            let status = if user == post_author {
                Visible
            } else if m.restricts.contains(&(post_author, user)) {
                Restricted
            } else if bad && m.hidden_words.contains(&post_author) {
                HiddenByFilter
            } else {
                Visible
            };
            assert_eq!(v.record.status, Visible, "the author sees their own comment as visible");
            let top = parent.map(|p| p.parent.unwrap_or(p.id));
            assert_eq!(v.record.parent, top);
            *m.per_user.entry(user).or_default() += 1;
            m.comments.push(MComment {
                id: v.record.id,
                post: post_id,
                author: user,
                post_author,
                parent: top,
                status,
                removed: false,
                text,
                reporters: BTreeSet::new(),
                reviewed: 0,
                appealed: false,
            });
        }
        Op::Like { user, post, on } => {
            let (post_id, author, _) = POSTS[post];
            let action = if on { LikeAction::Like } else { LikeAction::Unlike };
            let res = svc.likes.set_post_like(UserId(user), post_id, action).await;
            // A block refuses likes, never unlikes: a blocked user may take a like back.
            if on && m.blocks.contains(&(author, UserId(user))) {
                assert!(res.is_err(), "a blocked user's like was accepted");
            } else {
                let r = res.expect("like");
                assert_eq!((r.liked, r.changed), (on, on != m.post_likes.contains(&(UserId(user), post_id))));
                if on {
                    m.post_likes.insert((UserId(user), post_id));
                } else {
                    m.post_likes.remove(&(UserId(user), post_id));
                }
            }
        }
        Op::CommentLike { user, nth, on } => {
            let Some(c) = m.comments.get(nth).cloned() else { return };
            let action = if on { LikeAction::Like } else { LikeAction::Unlike };
            let res = svc.likes.set_comment_like(UserId(user), c.id, action).await;
            let ok = !c.status.is_deleted()
                && shown(user_reader(user), &c).is_some()
                && (!on
                    || !m.blocks.contains(&(c.post_author, UserId(user)))
                        && !m.blocks.contains(&(c.author, UserId(user))));
            assert_eq!(res.is_ok(), ok, "like of {c:?} by {user}: {res:?}");
            if ok {
                if on {
                    m.comment_likes.insert((UserId(user), c.id));
                } else {
                    m.comment_likes.remove(&(UserId(user), c.id));
                }
            }
        }
        Op::Restrict { owner, other, on } => {
            svc.moderation.set_restrict(UserId(owner), UserId(other), on).await.expect("restrict");
            toggle(&mut m.restricts, (UserId(owner), UserId(other)), on);
        }
        Op::Block { owner, other, on } => {
            svc.moderation.set_block(UserId(owner), UserId(other), on).await.expect("block");
            toggle(&mut m.blocks, (UserId(owner), UserId(other)), on);
        }
        Op::HiddenWords { owner, on } => {
            let words = if on { vec![HIDDEN_WORD.to_string()] } else { Vec::new() };
            svc.moderation.put_hidden_words(UserId(owner), words).await.expect("hidden words");
            toggle(&mut m.hidden_words, UserId(owner), on);
        }
        Op::Settings { user, hide } => {
            svc.upstream
                .put_settings(UserId(user), ViewerSettings { hide_like_counts: hide, ..Default::default() })
                .await
                .expect("settings");
            m.settings.insert(UserId(user), hide);
        }
        Op::PostFlag { post, hide } => {
            let (id, author, comments) = POSTS[post];
            svc.upstream
                .put_post(id, PostMeta { author, hide_like_count: hide, comments })
                .await
                .expect("post");
            m.post_hides[post] = hide;
        }
        Op::Follow { user, on } => {
            svc.upstream.set_follow(UserId(user), UserId(1), on).await.expect("follow");
            toggle(&mut m.follows_author_1, UserId(user), on);
        }
        Op::Report { user, nth } => {
            let Some(c) = m.comments.get(nth).cloned() else { return };
            let res = svc.review.report(user_reader(user), c.id, ReportReason::Other).await;
            let ok = !c.status.is_deleted() && shown(user_reader(user), &c).is_some();
            assert_eq!(res.is_ok(), ok, "report of {c:?} by {user}: {res:?}");
            if ok {
                let mc = &mut m.comments[nth];
                let fresh = mc.reporters.insert(UserId(user));
                let unreviewed = mc.reporters.len() - mc.reviewed;
                if fresh && unreviewed >= REPORTS_TO_HIDE as usize && mc.status == Visible {
                    mc.status = Pending;
                }
            }
        }
        Op::Approve { user, nth } => {
            let Some(c) = m.comments.get(nth).cloned() else { return };
            let res = svc.review.approve(UserId(user), c.id).await;
            let ok = shown(user_reader(user), &c).is_some()
                && c.post_author == UserId(user)
                && matches!(c.status, Restricted | Pending);
            assert_eq!(res.is_ok(), ok, "approval of {c:?} by {user}: {res:?}");
            if ok {
                let mc = &mut m.comments[nth];
                mc.status = Visible;
                mc.reviewed = mc.reporters.len();
            }
        }
        Op::Appeal { user, nth } => {
            let Some(c) = m.comments.get(nth).cloned() else { return };
            let res = svc.review.appeal(UserId(user), c.id, Some("please look again")).await;
            if c.removed {
                // A removed comment's record may be gone: nothing the rules promise about it.
                return;
            }
            if c.author != UserId(user) {
                assert!(matches!(res, Err(ServiceError::NotFound(_))), "appeal of {c:?} by {user}: {res:?}");
            } else if c.appealed {
                assert!(matches!(res, Err(ServiceError::Conflict(_))), "second appeal of {c:?}: {res:?}");
            } else {
                assert!(res.is_ok(), "first appeal of {c:?}: {res:?}");
                m.comments[nth].appealed = true;
            }
        }
        Op::Moderate { nth, approve } => {
            let Some(c) = m.comments.get(nth).cloned() else { return };
            let d = if approve { Decision::Approve } else { Decision::Hide };
            let res = svc.review.moderate(MODERATOR, c.id, d).await;
            let ok = !c.removed && !c.status.is_deleted();
            assert_eq!(res.is_ok(), ok, "decision on {c:?}: {res:?}");
            if ok {
                let mc = &mut m.comments[nth];
                mc.status = if approve { Visible } else { HiddenByFilter };
                if approve {
                    mc.reviewed = mc.reporters.len();
                }
            }
        }
        Op::Delete { user, nth } => {
            let Some(c) = m.comments.get(nth).cloned() else { return };
            let res = svc.comments.delete(user_reader(user), c.id).await;
            let ok =
                shown(user_reader(user), &c).is_some() && (c.author.0 == user || c.post_author.0 == user);
            assert_eq!(res.is_ok(), ok, "deletion of {c:?} by {user}: {res:?}");
            if ok && !c.status.is_deleted() {
                if c.parent.is_none() && m.has_replies(c.id) {
                    m.comments[nth].status = c.status.deleted_from();
                } else {
                    m.comments[nth].removed = true;
                    // The last reply of a placeholder takes it along.
                    if let Some(p) = c.parent
                        && m.by_id(p).status.is_deleted()
                        && !m.has_replies(p)
                        && let Some(pc) = m.comments.iter_mut().find(|x| x.id == p)
                    {
                        pc.removed = true;
                    }
                }
            }
        }
        Op::Check { limit } => {
            for user in 1..7 {
                check(svc, m, user_reader(user), limit).await;
            }
            check(svc, m, Reader { user: MODERATOR, moderator: true }, limit).await;
        }
    }
}

fn toggle<T: Ord>(set: &mut BTreeSet<T>, item: T, on: bool) {
    if on {
        set.insert(item);
    } else {
        set.remove(&item);
    }
}

/// Compare what `reader` was shown with what the model says, item by item.
fn compare(m: &Model, reader: Reader, got: &[CommentView], want: &[(CommentId, CommentStatus)], what: &str) {
    let got_ids: Vec<(CommentId, CommentStatus)> =
        got.iter().map(|v| (v.record.id, v.record.status)).collect();
    assert_eq!(got_ids, want, "{what} as seen by {reader:?}");
    for v in got {
        let c = m.by_id(v.record.id);
        let text = if v.record.status.is_deleted() { "" } else { c.text.as_str() };
        assert_eq!(v.record.text, text, "{what}: text of {:?} as seen by {reader:?}", c.id);
        let liked = m.comment_likes.contains(&(reader.user, c.id));
        assert_eq!(v.viewer_has_liked, liked, "{what}: viewer_has_liked of {:?} for {reader:?}", c.id);
    }
}

async fn walk_comments(
    svc: &Engagement,
    reader: Reader,
    post: PostId,
    order: Order,
    limit: usize,
) -> Vec<CommentView> {
    let (mut out, mut after) = (Vec::new(), None);
    loop {
        let page = svc.comments.list(reader, post, order, after, limit).await.expect("comments page");
        out.extend(page.items);
        match page.next_after {
            Some(a) => after = Some(a),
            None => return out,
        }
    }
}

async fn check(svc: &Engagement, m: &Model, reader: Reader, limit: usize) {
    for (post, _, _) in POSTS {
        let top_level = |c: &&MComment| c.post == post && c.parent.is_none();
        let mut want: Vec<(CommentId, CommentStatus)> =
            m.comments.iter().filter(top_level).filter_map(|c| Some((c.id, listed(m, reader, c)?))).collect();
        want.sort_by_key(|(id, _)| *id);
        let oldest = walk_comments(svc, reader, post, Order::Oldest, limit).await;
        compare(m, reader, &oldest, &want, "oldest first");
        let newest = walk_comments(svc, reader, post, Order::Newest, limit).await;
        want.reverse();
        compare(m, reader, &newest, &want, "newest first");

        // Replies, under every top-level comment (a hidden parent is a 404).
        for parent in m.comments.iter().filter(top_level) {
            let first = svc.comments.replies(reader, parent.id, None, limit).await;
            if shown(reader, parent).is_none() {
                assert!(first.is_err(), "replies of {:?}, hidden from {reader:?}, were listed", parent.id);
                continue;
            }
            let mut page = first.expect("replies page");
            let mut got = Vec::new();
            loop {
                got.extend(page.items);
                let Some(a) = page.next_after else { break };
                page = svc.comments.replies(reader, parent.id, Some(a), limit).await.expect("replies page");
            }
            let mut want: Vec<(CommentId, CommentStatus)> = m
                .comments
                .iter()
                .filter(|c| c.parent == Some(parent.id))
                .filter_map(|c| Some((c.id, shown(reader, c)?)))
                .collect();
            want.sort_by_key(|(id, _)| *id);
            compare(m, reader, &got, &want, "replies");
        }

        // Top comments, freshly ranked (the ranker worker is not running here), placeholders
        // included.
        svc.shared.top.invalidate(post);
        let (mut got, mut cursor) = (Vec::new(), None::<TopCursor>);
        loop {
            let page = svc.ranking.list_top(reader, post, cursor, limit).await.expect("top page");
            got.extend(page.items);
            match page.next {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        got.sort_by_key(|v| v.record.id);
        let mut want: Vec<(CommentId, CommentStatus)> =
            m.comments.iter().filter(top_level).filter_map(|c| Some((c.id, listed(m, reader, c)?))).collect();
        want.sort_by_key(|(id, _)| *id);
        compare(m, reader, &got, &want, "top comments");
    }

    // Posts: counts, liked state and the comment box, as this viewer.
    let ids: Vec<PostId> = POSTS.iter().map(|(p, _, _)| *p).collect();
    let views = svc.posts.post_views(reader.user, &ids).await.expect("post views");
    assert_eq!(views.len(), POSTS.len());
    for (i, v) in views.iter().enumerate() {
        let visible = m.count_visible(reader.user, i);
        assert_eq!(v.like_count.is_some(), visible, "like count of post {i} for {reader:?}");
        assert_eq!(v.like_count_text.is_some(), visible, "like count text of post {i} for {reader:?}");
        let liked = m.post_likes.contains(&(reader.user, v.post_id));
        assert_eq!(v.viewer_has_liked, liked, "viewer_has_liked of post {i} for {reader:?}");
        let (_, author, policy) = POSTS[i];
        let enabled = match policy {
            CommentsPolicy::Followers => reader.user == author || m.follows_author_1.contains(&reader.user),
            CommentsPolicy::Everyone => true,
            CommentsPolicy::Off => false,
        };
        assert_eq!(v.comments_enabled, enabled, "comments_enabled of post {i} for {reader:?}");
        for p in &v.preview_comments {
            let c = m.by_id(p.record.id);
            assert_eq!(
                shown(Reader { user: reader.user, moderator: false }, c),
                Some(p.record.status),
                "preview"
            );
        }
    }
    let settings = svc.upstream.viewer_settings(reader.user).await.expect("settings");
    assert_eq!(
        settings.hide_like_counts,
        m.settings.get(&reader.user).copied().unwrap_or(false),
        "own settings"
    );
}

async fn run(ops: Vec<Op>) {
    let dir = scratch_dir();
    let svc = service(dir.path()).await;
    let mut model = Model { post_hides: [false, true, false], ..Model::default() };
    let mut serial = 0;
    for op in ops.iter().chain(std::iter::once(&Op::Check { limit: 3 })) {
        apply(&svc, &mut model, op, &mut serial).await;
    }
    svc.stores().close().expect("close");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, .. ProptestConfig::default() })]
    #[test]
    fn no_viewer_sees_what_the_rules_hide_from_them(ops in proptest::collection::vec(op(), 1..40)) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
        rt.block_on(run(ops));
    }
}
