//! Feed hydration makes a fixed number of store calls, whatever the page size: one batched
//! read per kind of data (pins, previews' records, the viewer's likes), never one per post.
//! The service runs on an embedded store whose read ports are wrapped by a counting proxy.

use async_trait::async_trait;
use likewise_core::StoreResult;
use likewise_core::comment::appeal::{HeldBy, QueueNote};
use likewise_core::comment::pins::PinChange;
use likewise_core::counter::{CounterKey, Counts};
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::like::{LikeAction, Target, TargetKind};
use likewise_core::model::{CommentsPolicy, PostMeta, UserProfile, ViewerSettings};
use likewise_core::ports::{
    CommentReader, CounterStore, LikeReader, Liker, MetaStore, ModerationStore, RankChange, RankEntry,
    RankIndex, Recount, ReportReason,
};
use likewise_core::write::CommentRecord;
use likewise_engine::Stores;
use likewise_service::{Engagement, ServiceOptions};
use likewise_workers::{Aggregator, AggregatorOptions};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Delegates every call to the embedded store's ports, counting calls by method.
struct Counting {
    inner: Stores,
    calls: Mutex<BTreeMap<&'static str, u64>>,
}

impl Counting {
    fn count(&self, method: &'static str) {
        *self.calls.lock().expect("lock").entry(method).or_default() += 1;
    }
    fn take(&self) -> BTreeMap<&'static str, u64> {
        std::mem::take(&mut *self.calls.lock().expect("lock"))
    }
}

#[async_trait]
impl LikeReader for Counting {
    async fn liked_among(&self, user: UserId, kind: TargetKind, ids: &[u64]) -> StoreResult<Vec<bool>> {
        self.count("liked_among");
        self.inner.likes.liked_among(user, kind, ids).await
    }
    async fn liked_ids(&self, user: UserId, kind: TargetKind, limit: usize) -> StoreResult<Vec<u64>> {
        self.count("liked_ids");
        self.inner.likes.liked_ids(user, kind, limit).await
    }
    async fn likers(&self, target: Target, after: Option<Liker>, limit: usize) -> StoreResult<Vec<Liker>> {
        self.count("likers");
        self.inner.likes.likers(target, after, limit).await
    }
}

#[async_trait]
impl CounterStore for Counting {
    async fn counts(&self, targets: &[Target]) -> StoreResult<Vec<Counts>> {
        self.count("counts");
        self.inner.counters.counts(targets).await
    }
    async fn apply_deltas(
        &self,
        consumer: &str,
        from: u64,
        upto: u64,
        deltas: &[(CounterKey, i64)],
    ) -> StoreResult<Vec<(CounterKey, i64)>> {
        self.count("apply_deltas");
        self.inner.counters.apply_deltas(consumer, from, upto, deltas).await
    }
    async fn offset(&self, consumer: &str) -> StoreResult<u64> {
        self.count("offset");
        self.inner.counters.offset(consumer).await
    }
    async fn recount_likes(&self, consumer: &str, target: Target) -> StoreResult<Recount> {
        self.count("recount_likes");
        self.inner.counters.recount_likes(consumer, target).await
    }
    async fn recount_comments(&self, consumer: &str, post: PostId) -> StoreResult<Recount> {
        self.count("recount_comments");
        self.inner.counters.recount_comments(consumer, post).await
    }
    async fn recount_replies(&self, consumer: &str, post: PostId) -> StoreResult<Vec<(CommentId, Recount)>> {
        self.count("recount_replies");
        self.inner.counters.recount_replies(consumer, post).await
    }
    async fn counted_posts(&self, after: Option<PostId>, limit: usize) -> StoreResult<Vec<PostId>> {
        self.count("counted_posts");
        self.inner.counters.counted_posts(after, limit).await
    }
    async fn fresh_post_likes(&self, consumer: &str, posts: &[PostId]) -> StoreResult<Vec<i64>> {
        self.count("fresh_post_likes");
        self.inner.counters.fresh_post_likes(consumer, posts).await
    }
}

#[async_trait]
impl MetaStore for Counting {
    async fn put_post(&self, id: PostId, meta: PostMeta) -> StoreResult<()> {
        self.count("put_post");
        self.inner.meta.put_post(id, meta).await
    }
    async fn posts(&self, ids: &[PostId]) -> StoreResult<Vec<Option<PostMeta>>> {
        self.count("posts");
        self.inner.meta.posts(ids).await
    }
    async fn put_user(&self, id: UserId, profile: UserProfile) -> StoreResult<()> {
        self.count("put_user");
        self.inner.meta.put_user(id, profile).await
    }
    async fn users(&self, ids: &[UserId]) -> StoreResult<Vec<Option<UserProfile>>> {
        self.count("users");
        self.inner.meta.users(ids).await
    }
    async fn set_follow(&self, follower: UserId, followee: UserId, follows: bool) -> StoreResult<()> {
        self.count("set_follow");
        self.inner.meta.set_follow(follower, followee, follows).await
    }
    async fn followees(&self, follower: UserId, limit: usize) -> StoreResult<Vec<UserId>> {
        self.count("followees");
        self.inner.meta.followees(follower, limit).await
    }
    async fn put_settings(&self, user: UserId, settings: ViewerSettings) -> StoreResult<()> {
        self.count("put_settings");
        self.inner.meta.put_settings(user, settings).await
    }
    async fn settings(&self, user: UserId) -> StoreResult<ViewerSettings> {
        self.count("settings");
        self.inner.meta.settings(user).await
    }
    async fn ping(&self) -> StoreResult<()> {
        self.count("ping");
        self.inner.meta.ping().await
    }
}

#[async_trait]
impl CommentReader for Counting {
    async fn comments(&self, ids: &[CommentId]) -> StoreResult<Vec<Option<CommentRecord>>> {
        self.count("comments");
        self.inner.comments.comments(ids).await
    }
    async fn top_level(
        &self,
        post: PostId,
        newest_first: bool,
        after: Option<CommentId>,
        limit: usize,
    ) -> StoreResult<Vec<CommentRecord>> {
        self.count("top_level");
        self.inner.comments.top_level(post, newest_first, after, limit).await
    }
    async fn replies(
        &self,
        parent: CommentId,
        after: Option<CommentId>,
        limit: usize,
    ) -> StoreResult<Vec<CommentRecord>> {
        self.count("replies");
        self.inner.comments.replies(parent, after, limit).await
    }
    async fn held_replies_by(
        &self,
        author: UserId,
        posts: &[PostId],
        limit: usize,
    ) -> StoreResult<Vec<CommentRecord>> {
        self.count("held_replies_by");
        self.inner.comments.held_replies_by(author, posts, limit).await
    }
    async fn visible_reply_counts(&self, parents: &[CommentId]) -> StoreResult<Vec<i64>> {
        self.count("visible_reply_counts");
        self.inner.comments.visible_reply_counts(parents).await
    }
}

#[async_trait]
impl ModerationStore for Counting {
    async fn set_block(&self, owner: UserId, other: UserId, on: bool) -> StoreResult<()> {
        self.count("set_block");
        self.inner.moderation.set_block(owner, other, on).await
    }
    async fn is_blocked(&self, owner: UserId, other: UserId) -> StoreResult<bool> {
        self.count("is_blocked");
        self.inner.moderation.is_blocked(owner, other).await
    }
    async fn blocked_users(&self, owner: UserId, limit: usize) -> StoreResult<Vec<UserId>> {
        self.count("blocked_users");
        self.inner.moderation.blocked_users(owner, limit).await
    }
    async fn set_restrict(&self, owner: UserId, other: UserId, on: bool) -> StoreResult<()> {
        self.count("set_restrict");
        self.inner.moderation.set_restrict(owner, other, on).await
    }
    async fn is_restricted(&self, owner: UserId, other: UserId) -> StoreResult<bool> {
        self.count("is_restricted");
        self.inner.moderation.is_restricted(owner, other).await
    }
    async fn put_hidden_words(&self, owner: UserId, words: &[String]) -> StoreResult<()> {
        self.count("put_hidden_words");
        self.inner.moderation.put_hidden_words(owner, words).await
    }
    async fn hidden_words(&self, owner: UserId) -> StoreResult<Vec<String>> {
        self.count("hidden_words");
        self.inner.moderation.hidden_words(owner).await
    }
    async fn set_pins(&self, post: PostId, pins: &[CommentId]) -> StoreResult<()> {
        self.count("set_pins");
        self.inner.moderation.set_pins(post, pins).await
    }
    async fn pins(&self, post: PostId) -> StoreResult<Vec<CommentId>> {
        self.count("pins");
        self.inner.moderation.pins(post).await
    }
    async fn pins_of(&self, posts: &[PostId]) -> StoreResult<Vec<Vec<CommentId>>> {
        self.count("pins_of");
        self.inner.moderation.pins_of(posts).await
    }
    async fn change_pin(&self, post: PostId, comment: CommentId, pin: bool) -> StoreResult<PinChange> {
        self.count("change_pin");
        self.inner.moderation.change_pin(post, comment, pin).await
    }
    async fn add_report(
        &self,
        comment: CommentId,
        reporter: UserId,
        reason: ReportReason,
    ) -> StoreResult<likewise_core::comment::report::ReportOutcome> {
        self.count("add_report");
        self.inner.moderation.add_report(comment, reporter, reason).await
    }
    async fn report_counts(&self, comments: &[CommentId]) -> StoreResult<Vec<u32>> {
        self.count("report_counts");
        self.inner.moderation.report_counts(comments).await
    }
    async fn set_queued(&self, comment: CommentId, queued: bool) -> StoreResult<()> {
        self.count("set_queued");
        self.inner.moderation.set_queued(comment, queued).await
    }
    async fn queue(&self, after: Option<CommentId>, limit: usize) -> StoreResult<Vec<CommentId>> {
        self.count("queue");
        self.inner.moderation.queue(after, limit).await
    }
    async fn set_held_by(&self, comment: CommentId, held_by: Option<HeldBy>) -> StoreResult<()> {
        self.count("set_held_by");
        self.inner.moderation.set_held_by(comment, held_by).await
    }
    async fn add_appeal(&self, comment: CommentId, message: &str) -> StoreResult<bool> {
        self.count("add_appeal");
        self.inner.moderation.add_appeal(comment, message).await
    }
    async fn queue_notes(&self, comments: &[CommentId]) -> StoreResult<Vec<QueueNote>> {
        self.count("queue_notes");
        self.inner.moderation.queue_notes(comments).await
    }
    async fn add_fingerprint(&self, user: UserId, comment: CommentId, simhash: u64) -> StoreResult<()> {
        self.count("add_fingerprint");
        self.inner.moderation.add_fingerprint(user, comment, simhash).await
    }
    async fn fingerprints(
        &self,
        user: UserId,
        since_comment: CommentId,
        limit: usize,
    ) -> StoreResult<Vec<(CommentId, u64)>> {
        self.count("fingerprints");
        self.inner.moderation.fingerprints(user, since_comment, limit).await
    }
}

#[async_trait]
impl RankIndex for Counting {
    async fn change_ranks(&self, changes: &[RankChange]) -> StoreResult<()> {
        self.count("change_ranks");
        self.inner.ranks.change_ranks(changes).await
    }
    async fn ranks_of(&self, post: PostId, comments: &[CommentId]) -> StoreResult<Vec<Option<RankEntry>>> {
        self.count("ranks_of");
        self.inner.ranks.ranks_of(post, comments).await
    }
    async fn held_ranks(
        &self,
        post: PostId,
        author: Option<UserId>,
        limit: usize,
    ) -> StoreResult<Vec<RankEntry>> {
        self.count("held_ranks");
        self.inner.ranks.held_ranks(post, author, limit).await
    }
    async fn held_by_author(
        &self,
        author: UserId,
        posts: &[PostId],
        limit: usize,
    ) -> StoreResult<Vec<RankEntry>> {
        self.count("held_by_author");
        self.inner.ranks.held_by_author(author, posts, limit).await
    }
    async fn ranked(
        &self,
        post: PostId,
        after: Option<(f64, CommentId)>,
        limit: usize,
    ) -> StoreResult<Vec<RankEntry>> {
        self.count("ranked");
        self.inner.ranks.ranked(post, after, limit).await
    }
    async fn rank_version(&self, post: PostId) -> StoreResult<u64> {
        self.count("rank_version");
        self.inner.ranks.rank_version(post).await
    }
    async fn ranked_at(
        &self,
        post: PostId,
        version: u64,
        after: Option<(f64, CommentId)>,
        limit: usize,
    ) -> StoreResult<Vec<RankEntry>> {
        self.count("ranked_at");
        self.inner.ranks.ranked_at(post, version, after, limit).await
    }
    async fn held_ranks_at(
        &self,
        post: PostId,
        version: u64,
        author: Option<UserId>,
        limit: usize,
    ) -> StoreResult<Vec<RankEntry>> {
        self.count("held_ranks_at");
        self.inner.ranks.held_ranks_at(post, version, author, limit).await
    }
}

const AUTHOR: u64 = 7;
const VIEWER: u64 = 9;

async fn setup(dir: &std::path::Path) -> (Arc<Engagement>, Arc<Counting>) {
    let base = likewise_store::testing::open_small(dir);
    let counting = Arc::new(Counting { inner: base.clone(), calls: Mutex::default() });
    let mut stores = base;
    stores.likes = counting.clone();
    stores.counters = counting.clone();
    stores.meta = counting.clone();
    stores.comments = counting.clone();
    stores.moderation = counting.clone();
    stores.ranks = counting.clone();
    let svc = Engagement::new(stores, ServiceOptions::default());
    let (mut agg, _) = Aggregator::new(svc.clone(), AggregatorOptions::default()).await.expect("aggregator");
    let meta =
        PostMeta { author: UserId(AUTHOR), hide_like_count: false, comments: CommentsPolicy::Everyone };
    for p in 1..=20u64 {
        svc.upstream.put_post(PostId(p), meta).await.expect("post");
        let mut ids = Vec::new();
        // Each comment by its own author (one author repeating a text would be held as spam).
        for (c, text) in ["a fine morning for a walk", "the bakery opens at seven", "who won the match"]
            .into_iter()
            .enumerate()
        {
            let user = UserId(1_000 + p * 10 + c as u64);
            let v = svc.comments.create(user, PostId(p), text, None, None).await.expect("comment");
            ids.push(v.record.id);
        }
        // A like on a comment and on the post by the viewer, a pin on every other post.
        svc.likes.set_comment_like(UserId(VIEWER), ids[1], LikeAction::Like).await.expect("like comment");
        svc.likes.set_post_like(UserId(VIEWER), PostId(p), LikeAction::Like).await.expect("like post");
        if p % 2 == 0 {
            svc.review.set_pin(UserId(AUTHOR), PostId(p), ids[0], true).await.expect("pin");
        }
    }
    while agg.step(&[]).await.expect("step").more {}
    (svc, counting)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_page_costs_the_same_store_calls_for_5_and_20_posts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (svc, counting) = setup(dir.path()).await;
    let all: Vec<PostId> = (1..=20).map(PostId).collect();
    // Warm the caches the way a feed does (rankings, metadata, names), then measure.
    let first = svc.posts.post_views(UserId(VIEWER), &all).await.expect("warm");
    assert!(first.iter().all(|v| v.preview_comments.len() == 2), "every post previews two comments");
    assert!(first.iter().all(|v| v.comment_count == 3 && v.viewer_has_liked));
    let pinned: Vec<bool> = first.iter().map(|v| v.preview_comments[0].pinned).collect();
    assert_eq!(pinned, (1..=20).map(|p| p % 2 == 0).collect::<Vec<_>>(), "pins lead their previews");
    // The viewer's first read starts building their like filter in the background (one
    // `liked_ids`): wait for it, or it lands in whichever page is measured next.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !counting.take().contains_key("liked_ids") {
        assert!(std::time::Instant::now() < deadline, "the viewer's like filter was never built");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    svc.posts.post_views(UserId(VIEWER), &all).await.expect("warm with the filter");
    counting.take();
    let small = svc.posts.post_views(UserId(VIEWER), &all[..5]).await.expect("5 posts");
    let small_calls = counting.take();
    let large = svc.posts.post_views(UserId(VIEWER), &all).await.expect("20 posts");
    let large_calls = counting.take();
    assert_eq!((small.len(), large.len()), (5, 20));
    assert_eq!(small_calls, large_calls, "the same store calls for 5 posts as for 20");
    // One batched read of every post's pins; no per-post pin read, no scan of a post.
    assert_eq!(large_calls.get("pins_of"), Some(&1), "{large_calls:?}");
    assert_eq!(large_calls.get("pins"), None, "{large_calls:?}");
    assert_eq!(large_calls.get("top_level"), None, "{large_calls:?}");
    // One lookup of the viewer's held comments (they have none), whatever the page's size.
    assert_eq!(large_calls.get("held_by_author"), Some(&1), "{large_calls:?}");
    // And one of their held replies, for the counts and the previews alike.
    assert_eq!(large_calls.get("held_replies_by"), Some(&1), "{large_calls:?}");
    // No held comment of theirs: no read of the replies under one.
    assert_eq!(large_calls.get("visible_reply_counts"), None, "{large_calls:?}");
    let total: u64 = large_calls.values().sum();
    assert!(total <= 5, "a warm 20-post page makes at most 5 store calls: {large_calls:?}");
}
