//! The counter aggregator: exact counts under any interleaving of likes, unlikes, retries,
//! aggregation steps and crash-restarts; offsets committed with deltas; drift repaired.

use likewise_core::counter::{CounterField, CounterKey};
use likewise_core::ids::{PostId, UserId};
use likewise_core::like::{LikeAction, Target};
use likewise_core::model::{CommentsPolicy, PostMeta};
use likewise_engine::Stores;
use likewise_service::{Engagement, ServiceOptions};
use likewise_workers::{Aggregator, AggregatorOptions};
use proptest::prelude::*;
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

fn open(dir: &Path) -> (Stores, Arc<Engagement>) {
    let stores = likewise_store::testing::open_small(dir);
    let svc = Engagement::new(stores.clone(), ServiceOptions::default());
    (stores, svc)
}

async fn register(svc: &Engagement, posts: &[u64]) {
    for p in posts {
        let meta = PostMeta { author: UserId(1), hide_like_count: false, comments: CommentsPolicy::Everyone };
        svc.upstream.put_post(PostId(*p), meta).await.expect("post");
    }
}

#[derive(Debug, Clone)]
enum Step {
    Like {
        user: u64,
        post: u64,
        twice: bool,
    },
    Unlike {
        user: u64,
        post: u64,
        twice: bool,
    },
    Aggregate,
    /// Drop everything without draining the aggregator, then reopen.
    Crash,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        5 => (0u64..6, 1u64..3, any::<bool>()).prop_map(|(user, post, twice)| Step::Like { user, post, twice }),
        3 => (0u64..6, 1u64..3, any::<bool>()).prop_map(|(user, post, twice)| Step::Unlike { user, post, twice }),
        2 => Just(Step::Aggregate),
        1 => Just(Step::Crash),
    ]
}

async fn run_model(steps: Vec<Step>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut stores, mut svc) = open(dir.path());
    register(&svc, &[1, 2]).await;
    let opts = AggregatorOptions::default();
    let (mut agg, _) = Aggregator::new(svc.clone(), opts.clone()).await.expect("agg");
    let mut model: HashSet<(u64, u64)> = HashSet::new();
    for s in steps {
        match s {
            Step::Like { user, post, twice } | Step::Unlike { user, post, twice } => {
                let like = matches!(s, Step::Like { .. });
                let action = if like { LikeAction::Like } else { LikeAction::Unlike };
                let key = (user, post);
                let expect_change = like != model.contains(&key);
                let r = svc.likes.set_post_like(UserId(user + 10), PostId(post), action).await.expect("like");
                assert_eq!((r.liked, r.changed), (like, expect_change));
                if twice {
                    let r = svc
                        .likes
                        .set_post_like(UserId(user + 10), PostId(post), action)
                        .await
                        .expect("retry");
                    assert!(!r.changed, "a retry never changes anything");
                }
                if like {
                    model.insert(key);
                } else {
                    model.remove(&key);
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
    for post in [1u64, 2] {
        let want = model.iter().filter(|(_, p)| *p == post).count() as i64;
        let c = stores.counters.counts(&[Target::post(post)]).await.expect("counts")[0];
        assert_eq!(c.likes, want, "post {post}: counter == model");
        let r = stores.counters.recount_likes("counters", Target::post(post)).await.expect("recount");
        assert_eq!((r.rows, r.drift()), (want, 0), "post {post}: rows == model, no drift");
        let cached = svc.shared.counts.get_many(&[Target::post(post)]).await.expect("cache")[0].counts.likes;
        assert_eq!(cached, want, "post {post}: cache == model");
    }
    stores.close().expect("close");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]
    #[test]
    fn count_equals_rows_under_any_interleaving(steps in proptest::collection::vec(step(), 1..40)) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
        rt.block_on(run_model(steps));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_of_likes_becomes_one_counter_write_with_its_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (stores, svc) = open(dir.path());
    register(&svc, &[42]).await;
    let (mut agg, _) = Aggregator::new(svc.clone(), AggregatorOptions::default()).await.expect("agg");
    for u in 0..500u64 {
        svc.likes.set_post_like(UserId(100 + u), PostId(42), LikeAction::Like).await.expect("like");
    }
    let report = agg.step(&[]).await.expect("step");
    assert_eq!((report.events, report.counters_written), (500, 1));
    assert_eq!(stores.counters.offset("counters").await.expect("offset"), 500);
    assert_eq!(agg.step(&[]).await.expect("step").events, 0, "nothing applied twice");
    assert_eq!(svc.shared.counts.get_many(&[Target::post(42)]).await.expect("get")[0].counts.likes, 500);
    stores.close().expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciliation_repairs_a_drifted_counter() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (stores, svc) = open(dir.path());
    register(&svc, &[7]).await;
    let (mut agg, handle) = Aggregator::new(svc.clone(), AggregatorOptions::default()).await.expect("agg");
    for u in 0..10u64 {
        svc.likes.set_post_like(UserId(100 + u), PostId(7), LikeAction::Like).await.expect("like");
    }
    agg.step(&[]).await.expect("step");
    // Corrupt the counter behind the aggregator's back (a simulated bug or restore).
    let key = CounterKey { target: Target::post(7), field: CounterField::Likes };
    let offset = stores.counters.offset("counters").await.expect("offset");
    stores.counters.apply_deltas("counters", offset, offset, &[(key, 5)]).await.expect("corrupt");
    // More likes arrive, not yet aggregated, when the recount happens.
    for u in 10..13u64 {
        svc.likes.set_post_like(UserId(100 + u), PostId(7), LikeAction::Like).await.expect("like");
    }
    let report = agg.step(&[Target::post(7)]).await.expect("reconcile");
    assert_eq!(report.reconciled, vec![(Target::post(7), -5)]);
    let c = stores.counters.counts(&[Target::post(7)]).await.expect("counts")[0].likes;
    assert_eq!(c, 13);
    // The running aggregator serves reconcile requests from its handle too.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(agg.run(stop_rx));
    assert_eq!(handle.reconcile(Target::post(7)).await, Ok(0));
    let _ = stop_tx.send(true);
    task.await.expect("join");
    stores.close().expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciliation_repairs_a_drifted_comment_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (stores, svc) = open(dir.path());
    register(&svc, &[8]).await;
    let (mut agg, _) = Aggregator::new(svc.clone(), AggregatorOptions::default()).await.expect("agg");
    for u in 0..4u64 {
        svc.comments
            .create(UserId(200 + u), PostId(8), &format!("comment {u} here"), None, None)
            .await
            .expect("comment");
    }
    agg.step(&[]).await.expect("step");
    let key = CounterKey { target: Target::post(8), field: CounterField::Comments };
    let offset = stores.counters.offset("counters").await.expect("offset");
    stores.counters.apply_deltas("counters", offset, offset, &[(key, -3)]).await.expect("corrupt");
    svc.comments
        .create(UserId(300), PostId(8), "one more, not yet aggregated", None, None)
        .await
        .expect("comment");
    agg.step(&[Target::post(8)]).await.expect("reconcile");
    let c = stores.counters.counts(&[Target::post(8)]).await.expect("counts")[0].comments;
    assert_eq!(c, 5, "four comments, one more pending, drift of -3 repaired");
    stores.close().expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciliation_repairs_a_drifted_reply_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (stores, svc) = open(dir.path());
    register(&svc, &[9]).await;
    let (mut agg, _) = Aggregator::new(svc.clone(), AggregatorOptions::default()).await.expect("agg");
    let top =
        svc.comments.create(UserId(200), PostId(9), "a parent", None, None).await.expect("comment").record.id;
    for u in 0..3u64 {
        let text = format!("reply {u} here");
        svc.comments.create(UserId(300 + u), PostId(9), &text, Some(top), None).await.expect("reply");
    }
    agg.step(&[]).await.expect("step");
    let key = CounterKey { target: Target::comment(top.0), field: CounterField::Replies };
    let offset = stores.counters.offset("counters").await.expect("offset");
    stores.counters.apply_deltas("counters", offset, offset, &[(key, 4)]).await.expect("corrupt");
    svc.comments
        .create(UserId(400), PostId(9), "one more, not yet aggregated", Some(top), None)
        .await
        .expect("reply");
    agg.step(&[Target::post(9)]).await.expect("reconcile");
    let c = stores.counters.counts(&[Target::comment(top.0), Target::post(9)]).await.expect("counts");
    assert_eq!((c[0].replies, c[1].comments), (4, 5), "three replies, one more pending, drift of 4 repaired");
    stores.close().expect("close");
}

/// A counter store whose next commit lands but answers an error, as a commit does whose
/// connection is cut after the server committed.
struct LostAnswer {
    inner: Arc<dyn likewise_core::ports::CounterStore>,
    lose_next: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl likewise_core::ports::CounterStore for LostAnswer {
    async fn counts(&self, t: &[Target]) -> likewise_core::StoreResult<Vec<likewise_core::counter::Counts>> {
        self.inner.counts(t).await
    }
    async fn apply_deltas(
        &self,
        consumer: &str,
        from: u64,
        upto: u64,
        deltas: &[(CounterKey, i64)],
    ) -> likewise_core::StoreResult<Vec<(CounterKey, i64)>> {
        let out = self.inner.apply_deltas(consumer, from, upto, deltas).await?;
        if self.lose_next.swap(false, std::sync::atomic::Ordering::SeqCst) {
            return Err(likewise_core::StoreError::Engine("connection closed after COMMIT".into()));
        }
        Ok(out)
    }
    async fn offset(&self, consumer: &str) -> likewise_core::StoreResult<u64> {
        self.inner.offset(consumer).await
    }
    async fn recount_likes(
        &self,
        consumer: &str,
        target: Target,
    ) -> likewise_core::StoreResult<likewise_core::ports::Recount> {
        self.inner.recount_likes(consumer, target).await
    }
    async fn recount_comments(
        &self,
        consumer: &str,
        post: PostId,
    ) -> likewise_core::StoreResult<likewise_core::ports::Recount> {
        self.inner.recount_comments(consumer, post).await
    }
    async fn recount_replies(
        &self,
        consumer: &str,
        post: PostId,
    ) -> likewise_core::StoreResult<Vec<(likewise_core::ids::CommentId, likewise_core::ports::Recount)>> {
        self.inner.recount_replies(consumer, post).await
    }
    async fn counted_posts(
        &self,
        after: Option<PostId>,
        limit: usize,
    ) -> likewise_core::StoreResult<Vec<PostId>> {
        self.inner.counted_posts(after, limit).await
    }
    async fn fresh_post_likes(
        &self,
        consumer: &str,
        posts: &[PostId],
    ) -> likewise_core::StoreResult<Vec<i64>> {
        self.inner.fresh_post_likes(consumer, posts).await
    }
}

/// A commit whose answer was lost is never applied twice: the step fails, the aggregator
/// goes on from the stored offset, and the counts stay equal to the rows.
#[tokio::test]
async fn a_commit_whose_answer_was_lost_is_not_applied_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut stores = likewise_store::testing::open_small(dir.path());
    let lossy = Arc::new(LostAnswer { inner: stores.counters.clone(), lose_next: true.into() });
    stores.counters = lossy.clone();
    let svc = Engagement::new(stores.clone(), ServiceOptions::default());
    register(&svc, &[1]).await;
    let (mut agg, _) = Aggregator::new(svc.clone(), AggregatorOptions::default()).await.expect("agg");
    for u in 1..=3 {
        svc.likes.set_post_like(UserId(u), PostId(1), LikeAction::Like).await.expect("like");
    }
    assert!(agg.step(&[]).await.is_err(), "the commit's answer is lost");
    agg.resync_offset().await;
    for u in 4..=5 {
        svc.likes.set_post_like(UserId(u), PostId(1), LikeAction::Like).await.expect("like");
    }
    agg.step(&[]).await.expect("the next step goes on from the stored offset");
    assert_eq!(stores.counters.counts(&[Target::post(1)]).await.expect("counts")[0].likes, 5);
    let r = stores.counters.recount_likes("counters", Target::post(1)).await.expect("recount");
    assert_eq!((r.rows, r.counter, r.pending), (5, 5, 0));
}
