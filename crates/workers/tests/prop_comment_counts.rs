//! Comment counters converge to the rows under any interleaving of comments, replies,
//! deletions, moderation decisions, comment likes, aggregation steps and crash-restarts (the
//! store dropped without draining the aggregator, then reopened). `aggregator.rs` covers the
//! same for post likes; this covers `comment_count`, `reply_count` and comment like counts
//! (a reply counts only while its top-level parent is shown or is a placeholder).

use likewise_core::comment::status::CommentStatus;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::like::{LikeAction, Target};
use likewise_core::model::{CommentsPolicy, PostMeta};
use likewise_engine::Stores;
use likewise_service::comments::Reader;
use likewise_service::moderation::ModerationOptions;
use likewise_service::review::Decision;
use likewise_service::{Engagement, ServiceOptions};
use likewise_store::testing::scratch_dir;
use likewise_workers::{Aggregator, AggregatorOptions};
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

const AUTHOR: UserId = UserId(1);
const POST: PostId = PostId(1);

#[derive(Debug, Clone)]
enum Step {
    Comment { user: u64, reply_to: Option<usize> },
    Delete { nth: usize },
    Moderate { nth: usize, approve: bool },
    Like { user: u64, nth: usize, on: bool },
    Aggregate,
    Crash,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        5 => (2u64..9, proptest::option::of(0usize..10)).prop_map(|(user, reply_to)| Step::Comment { user, reply_to }),
        2 => (0usize..10).prop_map(|nth| Step::Delete { nth }),
        2 => (0usize..10, any::<bool>()).prop_map(|(nth, approve)| Step::Moderate { nth, approve }),
        3 => (2u64..6, 0usize..10, any::<bool>()).prop_map(|(user, nth, on)| Step::Like { user, nth, on }),
        2 => Just(Step::Aggregate),
        1 => Just(Step::Crash),
    ]
}

fn open(dir: &Path) -> (Stores, Arc<Engagement>) {
    let stores = likewise_store::testing::open_small(dir);
    let moderation = ModerationOptions {
        comments_per_minute: 10_000,
        comment_burst: 10_000,
        duplicate_copies: 10_000,
        ..ModerationOptions::default()
    };
    let svc = Engagement::new(stores.clone(), ServiceOptions { moderation, ..ServiceOptions::default() });
    (stores, svc)
}

async fn run(steps: Vec<Step>) {
    let dir = scratch_dir();
    let (mut stores, mut svc) = open(dir.path());
    let meta = PostMeta { author: AUTHOR, hide_like_count: false, comments: CommentsPolicy::Everyone };
    svc.upstream.put_post(POST, meta).await.expect("post");
    // User 8 is restricted: their comments start hidden, so statuses vary.
    svc.moderation.set_restrict(AUTHOR, UserId(8), true).await.expect("restrict");
    let opts = AggregatorOptions::default();
    let (mut agg, _) = Aggregator::new(svc.clone(), opts.clone()).await.expect("agg");
    let mut written: Vec<CommentId> = Vec::new();
    let mut likes: BTreeSet<(u64, CommentId)> = BTreeSet::new();
    let mut serial = 0usize;
    for s in steps {
        match s {
            Step::Comment { user, reply_to } => {
                serial += 1;
                let parent = reply_to.and_then(|n| written.get(n).copied());
                let text = format!("comment {serial} by {user}, about the river and the garden");
                if let Ok(v) = svc.comments.create(UserId(user), POST, &text, parent, None).await {
                    written.push(v.record.id);
                }
            }
            Step::Delete { nth } => {
                if let Some(id) = written.get(nth) {
                    let _ = svc.comments.delete(Reader { user: AUTHOR, moderator: false }, *id).await;
                }
            }
            Step::Moderate { nth, approve } => {
                if let Some(id) = written.get(nth) {
                    let d = if approve { Decision::Approve } else { Decision::Hide };
                    let _ = svc.review.moderate(UserId(99), *id, d).await;
                }
            }
            Step::Like { user, nth, on } => {
                if let Some(id) = written.get(nth) {
                    let action = if on { LikeAction::Like } else { LikeAction::Unlike };
                    if let Ok(r) = svc.likes.set_comment_like(UserId(user), *id, action).await {
                        assert_eq!(r.liked, on);
                        if on {
                            likes.insert((user, *id));
                        } else {
                            likes.remove(&(user, *id));
                        }
                    }
                }
            }
            Step::Aggregate => {
                agg.step(&[]).await.expect("step");
            }
            Step::Crash => {
                stores.writer.close();
                drop(agg);
                drop(svc);
                drop(stores);
                (stores, svc) = open(dir.path());
                (agg, _) = Aggregator::new(svc.clone(), opts.clone()).await.expect("agg");
            }
        }
    }
    while agg.step(&[]).await.expect("step").more {}

    // The rows.
    let rows: Vec<_> =
        stores.comments.comments(&written).await.expect("rows").into_iter().flatten().collect();
    let visible = |r: &&likewise_core::write::CommentRecord| r.status == CommentStatus::Visible;
    // A reply counts only while its top-level parent opens its thread (shown, or a placeholder).
    let status_of: std::collections::HashMap<CommentId, CommentStatus> =
        rows.iter().map(|r| (r.id, r.status)).collect();
    let open =
        |p: CommentId| matches!(status_of.get(&p), Some(CommentStatus::Visible | CommentStatus::Deleted));
    let want_comments = rows.iter().filter(visible).filter(|r| r.parent.is_none_or(open)).count() as i64;
    let post = stores.counters.counts(&[Target::post(POST.0)]).await.expect("counts")[0];
    assert_eq!(post.comments, want_comments, "comment_count == visible comment rows");
    let recount = stores.counters.recount_comments("counters", POST).await.expect("recount");
    assert_eq!((recount.rows, recount.drift()), (want_comments, 0), "recount agrees, no drift");

    let tops: Vec<_> = rows.iter().filter(|r| r.parent.is_none()).collect();
    let targets: Vec<Target> = tops.iter().map(|r| Target::comment(r.id.0)).collect();
    let counts = stores.counters.counts(&targets).await.expect("counts");
    for (top, c) in tops.iter().zip(counts) {
        let replies = if open(top.id) {
            rows.iter().filter(|r| r.parent == Some(top.id)).filter(visible).count() as i64
        } else {
            0
        };
        assert_eq!(c.replies, replies, "reply_count of {:?} == its visible reply rows", top.id);
    }
    for id in &written {
        let want = likes.iter().filter(|(_, c)| c == id).count() as i64;
        let c = stores.counters.counts(&[Target::comment(id.0)]).await.expect("counts")[0].likes;
        assert_eq!(c, want, "likes of {id:?} == like rows");
        let r = stores.counters.recount_likes("counters", Target::comment(id.0)).await.expect("recount");
        assert_eq!((r.rows, r.drift()), (want, 0), "like rows of {id:?}, no drift");
    }
    stores.close().expect("close");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]
    #[test]
    fn comment_counts_equal_rows_across_crashes(steps in proptest::collection::vec(step(), 1..40)) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
        rt.block_on(run(steps));
    }
}
