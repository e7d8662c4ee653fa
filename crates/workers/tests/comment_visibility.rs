//! Property tests for comments: under any sequence of writes, moderation decisions and
//! deletions, (1) no viewer ever sees a comment they should not, (2) the post's comment count
//! converges to the comments visible to everyone (a reply only while its parent is), and (3)
//! keyset pages never repeat or skip.

use likewise_core::comment::status::CommentStatus;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::like::Target;
use likewise_core::model::{CommentsPolicy, PostMeta};
use likewise_service::comments::{Order, Reader};
use likewise_service::review::Decision;
use likewise_service::{Engagement, ServiceOptions};
use likewise_workers::{Aggregator, AggregatorOptions};
use proptest::prelude::*;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

const AUTHOR: u64 = 1;
const POST: PostId = PostId(1);

#[derive(Debug, Clone)]
enum Op {
    Comment { user: u64, bad: bool, reply_to: Option<usize> },
    Restrict { user: u64 },
    Approve { nth: usize },
    Moderate { nth: usize, approve: bool },
    Delete { nth: usize, by_author: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (2u64..6, any::<bool>(), proptest::option::of(0usize..8)).prop_map(|(user, bad, reply_to)| Op::Comment { user, bad, reply_to }),
        1 => (2u64..6).prop_map(|user| Op::Restrict { user }),
        1 => (0usize..8).prop_map(|nth| Op::Approve { nth }),
        1 => (0usize..8, any::<bool>()).prop_map(|(nth, approve)| Op::Moderate { nth, approve }),
        2 => (0usize..8, any::<bool>()).prop_map(|(nth, by_author)| Op::Delete { nth, by_author }),
    ]
}

async fn setup(dir: &std::path::Path) -> Arc<Engagement> {
    let svc = Engagement::new(likewise_store::testing::open_small(dir), ServiceOptions::default());
    let meta =
        PostMeta { author: UserId(AUTHOR), hide_like_count: false, comments: CommentsPolicy::Everyone };
    svc.upstream.put_post(POST, meta).await.expect("post");
    svc.moderation.put_hidden_words(UserId(AUTHOR), vec!["forbidden".into()]).await.expect("words");
    svc
}

async fn all_pages(svc: &Engagement, reader: Reader, order: Order, limit: usize) -> Vec<CommentId> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let page = svc.comments.list(reader, POST, order, after, limit).await.expect("page");
        out.extend(page.items.iter().map(|v| v.record.id));
        match page.next_after {
            Some(a) => after = Some(a),
            None => return out,
        }
    }
}

async fn run(ops: Vec<Op>, limit: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = setup(dir.path()).await;
    let (mut agg, _) = Aggregator::new(svc.clone(), AggregatorOptions::default()).await.expect("agg");
    let mut created: Vec<CommentId> = Vec::new();
    for (i, op) in ops.into_iter().enumerate() {
        match op {
            Op::Comment { user, bad, reply_to } => {
                let text = if bad {
                    format!("forbidden words number {i}")
                } else {
                    format!("a kind note number {i}")
                };
                let parent = reply_to.and_then(|n| created.get(n).copied());
                // Replies to deleted or hidden parents are refused: that is fine.
                if let Ok(v) = svc.comments.create(UserId(user), POST, &text, parent, None).await {
                    created.push(v.record.id);
                }
            }
            Op::Restrict { user } => {
                svc.moderation.set_restrict(UserId(AUTHOR), UserId(user), true).await.expect("restrict")
            }
            Op::Approve { nth } => {
                if let Some(id) = created.get(nth) {
                    let _ = svc.review.approve(UserId(AUTHOR), *id).await;
                }
            }
            Op::Moderate { nth, approve } => {
                if let Some(id) = created.get(nth) {
                    let d = if approve { Decision::Approve } else { Decision::Hide };
                    let _ = svc.review.moderate(UserId(99), *id, d).await;
                }
            }
            Op::Delete { nth, by_author } => {
                if let Some(id) = created.get(nth) {
                    let who = if by_author { AUTHOR } else { 2 };
                    let _ = svc.comments.delete(Reader { user: UserId(who), moderator: false }, *id).await;
                }
            }
        }
    }
    // The truth, read as a moderator.
    let truth = svc.stores().comments.comments(&created).await.expect("truth");
    // Counted: visible, and a reply only under a parent everyone sees (or its placeholder).
    let status_of: BTreeMap<CommentId, CommentStatus> =
        truth.iter().flatten().map(|r| (r.id, r.status)).collect();
    let open =
        |p: CommentId| matches!(status_of.get(&p), Some(CommentStatus::Visible | CommentStatus::Deleted));
    let counted = truth
        .iter()
        .flatten()
        .filter(|r| r.status == CommentStatus::Visible && r.parent.is_none_or(open))
        .count() as i64;
    let replies: Vec<(CommentId, UserId, CommentStatus)> =
        truth.iter().flatten().filter_map(|r| Some((r.parent?, r.author, r.status))).collect();
    let truth: BTreeMap<CommentId, (UserId, CommentStatus, bool)> =
        truth.into_iter().flatten().map(|r| (r.id, (r.author, r.status, r.parent.is_none()))).collect();
    // Who is shown a comment that is not a placeholder.
    let sees = |viewer: u64, author: UserId, status: CommentStatus| match status {
        CommentStatus::Visible => true,
        CommentStatus::Restricted | CommentStatus::Pending => viewer == author.0 || viewer == AUTHOR,
        CommentStatus::HiddenByFilter => viewer == author.0,
        CommentStatus::Deleted | CommentStatus::DeletedWhileHeld => false,
    };
    for viewer in [2u64, 3, 4, 5, 7, AUTHOR] {
        let reader = Reader { user: UserId(viewer), moderator: false };
        for order in [Order::Newest, Order::Oldest] {
            let ids = all_pages(&svc, reader, order, limit).await;
            let set: HashSet<_> = ids.iter().copied().collect();
            prop_assert_eq_ok(set.len() == ids.len(), "a page repeated a comment");
            let sorted = match order {
                Order::Newest => ids.windows(2).all(|w| w[0] > w[1]),
                Order::Oldest => ids.windows(2).all(|w| w[0] < w[1]),
            };
            prop_assert_eq_ok(sorted, "pages out of order");
            for (id, (author, status, top)) in &truth {
                if !top {
                    continue;
                }
                // A placeholder only over a reply this viewer is shown.
                let over_a_seen_reply = || replies.iter().any(|(p, a, st)| p == id && sees(viewer, *a, *st));
                let allowed = match status {
                    CommentStatus::Deleted => over_a_seen_reply(),
                    CommentStatus::DeletedWhileHeld => viewer == author.0 && over_a_seen_reply(),
                    _ => sees(viewer, *author, *status),
                };
                // Nothing the viewer may see is skipped, nothing else is shown.
                assert_eq!(
                    set.contains(id),
                    allowed,
                    "viewer {viewer}, comment {id:?} with status {status:?}"
                );
            }
        }
    }
    while agg.step(&[]).await.expect("step").more {}
    let counts = svc.stores().counters.counts(&[Target::post(POST.0)]).await.expect("counts")[0];
    assert_eq!(counts.comments, counted, "comment_count counts visible comments in open threads only");
    for id in truth.iter().filter(|(_, (_, _, top))| *top).map(|(id, _)| id) {
        let want = if open(*id) {
            replies.iter().filter(|(p, _, st)| p == id && *st == CommentStatus::Visible).count() as i64
        } else {
            0
        };
        let got = svc.stores().counters.counts(&[Target::comment(id.0)]).await.expect("counts")[0].replies;
        assert_eq!(got, want, "reply_count of {id:?}: its visible replies while its parent is seen");
    }
    svc.stores().close().expect("close");
}

fn prop_assert_eq_ok(cond: bool, what: &str) {
    assert!(cond, "{what}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]
    #[test]
    fn no_sequence_shows_a_hidden_comment_or_miscounts(ops in proptest::collection::vec(op(), 1..30), limit in 1usize..5) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
        rt.block_on(run(ops, limit));
    }
}
