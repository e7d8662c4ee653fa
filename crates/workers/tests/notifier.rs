//! The notification consumer driven step by step with an explicit clock (no sleeps):
//! hold, release, aggregation, and replay from an earlier offset giving the same inbox.

use likewise_core::ids::{PostId, UserId};
use likewise_core::like::LikeAction;
use likewise_core::model::{CommentsPolicy, PostMeta};
use likewise_service::{Engagement, ServiceOptions, now_ms};
use likewise_workers::notifier::{NOTIFIER, Notifier, NotifierOptions};
use std::sync::Arc;
use std::time::Duration;

async fn setup(dir: &std::path::Path) -> Arc<Engagement> {
    let svc = Engagement::new(likewise_store::testing::open_small(dir), ServiceOptions::default());
    let meta = PostMeta { author: UserId(7), hide_like_count: false, comments: CommentsPolicy::Everyone };
    svc.upstream.put_post(PostId(1), meta).await.expect("post");
    svc
}

fn summary(items: &[likewise_service::notifications::NotifView]) -> Vec<(u64, u64, String)> {
    items.iter().map(|i| (i.id, i.actor_count, i.text.clone())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_likes_release_after_the_window_and_replay_gives_the_same_inbox() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = setup(dir.path()).await;
    let opts = NotifierOptions { hold: Duration::from_secs(5), ..Default::default() };
    let t0 = now_ms();
    for u in 100..110u64 {
        svc.likes.set_post_like(UserId(u), PostId(1), LikeAction::Like).await.expect("like");
    }
    svc.likes.set_post_like(UserId(105), PostId(1), LikeAction::Unlike).await.expect("unlike");
    let mut n = Notifier::new(svc.clone(), &opts).await.expect("notifier");
    assert_eq!(n.step(t0).await.expect("step"), 0, "held");
    assert!(svc.notifications.inbox(UserId(7), None, 10).await.expect("inbox").0.is_empty());
    // The offset stays below the held events, so a crash now would re-read them.
    assert_eq!(svc.stores().counters.offset(NOTIFIER).await.expect("offset"), 0);
    n.step(t0 + 60_000).await.expect("release");
    let (items, _) = svc.notifications.inbox(UserId(7), None, 10).await.expect("inbox");
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].actor_count, 9, "ten likes, one undone within the hold");
    assert!(items[0].text.ends_with("and 7 others liked your post"), "{}", items[0].text);
    let before = summary(&items);

    // Redelivery: rewind the consumer to the start and replay everything.
    let notifications = &svc.stores().notifications;
    let fence = notifications.fence_notifications(NOTIFIER).await.expect("fence");
    notifications.apply_notifications(NOTIFIER, fence, 0, &[]).await.expect("rewind");
    let mut again = Notifier::new(svc.clone(), &opts).await.expect("notifier");
    again.step(t0 + 120_000).await.expect("replay");
    let (items, _) = svc.notifications.inbox(UserId(7), None, 10).await.expect("inbox");
    assert_eq!(summary(&items), before, "replay from an offset gives the same inbox");
    svc.stores().close().expect("close");
}

/// Upstream data whose settings reads fail while `down` is set (the storage cut off between
/// a step's read of the log and its commit).
struct FlakyMeta {
    inner: Arc<dyn likewise_core::ports::MetaStore>,
    down: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl likewise_core::ports::MetaStore for FlakyMeta {
    async fn put_post(&self, id: PostId, meta: PostMeta) -> likewise_core::StoreResult<()> {
        self.inner.put_post(id, meta).await
    }
    async fn posts(&self, ids: &[PostId]) -> likewise_core::StoreResult<Vec<Option<PostMeta>>> {
        self.inner.posts(ids).await
    }
    async fn put_user(
        &self,
        id: UserId,
        p: likewise_core::model::UserProfile,
    ) -> likewise_core::StoreResult<()> {
        self.inner.put_user(id, p).await
    }
    async fn users(
        &self,
        ids: &[UserId],
    ) -> likewise_core::StoreResult<Vec<Option<likewise_core::model::UserProfile>>> {
        self.inner.users(ids).await
    }
    async fn set_follow(&self, a: UserId, b: UserId, follows: bool) -> likewise_core::StoreResult<()> {
        self.inner.set_follow(a, b, follows).await
    }
    async fn followees(&self, a: UserId, limit: usize) -> likewise_core::StoreResult<Vec<UserId>> {
        self.inner.followees(a, limit).await
    }
    async fn put_settings(
        &self,
        u: UserId,
        s: likewise_core::model::ViewerSettings,
    ) -> likewise_core::StoreResult<()> {
        self.inner.put_settings(u, s).await
    }
    async fn settings(&self, u: UserId) -> likewise_core::StoreResult<likewise_core::model::ViewerSettings> {
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(likewise_core::StoreError::Engine("settings unreachable (simulated)".into()));
        }
        self.inner.settings(u).await
    }
    async fn ping(&self) -> likewise_core::StoreResult<()> {
        self.inner.ping().await
    }
}

/// What a step absorbed lives only in the step until it commits: a step that fails after
/// absorbing part of what it read (here: a recipient's settings cannot be read for a like,
/// which is decided as it is read) must derive it all again, not commit an offset past it
/// later, nor release what it held before as if nothing happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn likes_released_by_a_failed_step_are_not_lost() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut stores = likewise_store::testing::open_small(dir.path());
    let meta = Arc::new(FlakyMeta { inner: stores.meta.clone(), down: false.into() });
    stores.meta = meta.clone();
    // Settings uncached, so each step reads them.
    let svc =
        Engagement::new(stores, ServiceOptions { meta_ttl: Duration::ZERO, ..ServiceOptions::default() });
    let post = PostMeta { author: UserId(7), hide_like_count: false, comments: CommentsPolicy::Everyone };
    svc.upstream.put_post(PostId(1), post).await.expect("post");
    let opts = NotifierOptions { hold: Duration::from_secs(5), ..Default::default() };
    let t0 = now_ms();
    for u in 100..105u64 {
        svc.likes.set_post_like(UserId(u), PostId(1), LikeAction::Like).await.expect("like");
    }
    let mut n = Notifier::new(svc.clone(), &opts).await.expect("notifier");
    assert_eq!(n.step(t0).await.expect("step"), 0, "held");
    // Later likes move the log on, so a lost release would be committed past.
    for u in 105..108u64 {
        svc.likes.set_post_like(UserId(u), PostId(1), LikeAction::Like).await.expect("like");
    }
    meta.down.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(n.step(t0 + 60_000).await.is_err(), "the new likes cannot read the author's settings");
    meta.down.store(false, std::sync::atomic::Ordering::SeqCst);
    n.step(t0 + 61_000).await.expect("step");
    n.step(t0 + 120_000).await.expect("step");
    let (items, _) = svc.notifications.inbox(UserId(7), None, 10).await.expect("inbox");
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].actor_count, 8, "every like notified once: {:?}", summary(&items));
    svc.stores().close().expect("close");
}

/// The retention on a simulated clock: an item last updated more than `retain` before "now"
/// is removed with its actors, a newer one stays whole, pages read as if the old one had
/// never been, and a later like of the old post starts a new item; a pass removes a backlog
/// larger than one batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_past_the_retention_are_pruned_on_a_simulated_clock() {
    use likewise_workers::notif_retention::{RetentionOptions, prune_once};
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = setup(dir.path()).await;
    let meta = PostMeta { author: UserId(7), hide_like_count: false, comments: CommentsPolicy::Everyone };
    for p in 2..=4 {
        svc.upstream.put_post(PostId(p), meta).await.expect("post");
    }
    let opts = NotifierOptions { hold: Duration::from_secs(5), ..Default::default() };
    let mut n = Notifier::new(svc.clone(), &opts).await.expect("notifier");
    let t0 = now_ms();
    for u in 100..103u64 {
        svc.likes.set_post_like(UserId(u), PostId(1), LikeAction::Like).await.expect("like");
    }
    n.step(t0 + 60_000).await.expect("release");
    for u in 200..202u64 {
        svc.likes.set_post_like(UserId(u), PostId(2), LikeAction::Like).await.expect("like");
    }
    n.step(t0 + 120_000).await.expect("release");
    let (items, _) = svc.notifications.inbox(UserId(7), None, 10).await.expect("inbox");
    assert_eq!(
        items.iter().map(|i| (i.post, i.actor_count)).collect::<Vec<_>>(),
        vec![(PostId(2), 2), (PostId(1), 3)]
    );
    let (old, young) = (items[1].clone(), items[0].clone());

    let store = svc.stores().notifications.clone();
    let (_stop_tx, stop) = tokio::sync::watch::channel(false);
    let retain = Duration::from_secs(30 * 86_400);
    let opts =
        RetentionOptions { retain: Some(retain), batch: 1, pause: Duration::ZERO, ..Default::default() };
    let day30 = retain.as_millis() as u64;
    // Exactly 30 days after its last update an item stays; a millisecond later it goes.
    assert_eq!(prune_once(&*store, 0, &opts, old.updated_ms + day30, &stop).await.expect("prune"), 0);
    let keep_all = RetentionOptions { retain: None, ..opts.clone() };
    assert_eq!(prune_once(&*store, 0, &keep_all, u64::MAX, &stop).await.expect("keep all"), 0);
    assert_eq!(prune_once(&*store, 0, &opts, old.updated_ms + day30 + 1, &stop).await.expect("prune"), 1);
    let (items, next) = svc.notifications.inbox(UserId(7), None, 1).await.expect("inbox");
    assert_eq!(items.iter().map(|i| (i.id, i.actor_count)).collect::<Vec<_>>(), vec![(young.id, 2)]);
    assert_eq!(next, None, "the pruned item is on no later page");
    let members = store.notif_members(old.id, &[UserId(100), UserId(101), UserId(102)]).await.expect("m");
    assert_eq!(members, vec![false; 3]);

    // A like of the old post now starts a new item, naming its one liker.
    svc.likes.set_post_like(UserId(103), PostId(1), LikeAction::Like).await.expect("like");
    n.step(t0 + 180_000).await.expect("release");
    let (items, _) = svc.notifications.inbox(UserId(7), None, 10).await.expect("inbox");
    assert_eq!(items.len(), 2);
    assert_eq!((items[0].post, items[0].actor_count), (PostId(1), 1));
    assert_ne!(items[0].id, old.id);

    // A backlog of several batches goes in one pass (one item per write here).
    for p in 3..=4u64 {
        svc.likes.set_post_like(UserId(300), PostId(p), LikeAction::Like).await.expect("like");
    }
    n.step(t0 + 240_000).await.expect("release");
    let newest = svc.notifications.inbox(UserId(7), None, 1).await.expect("inbox").0[0].updated_ms;
    assert_eq!(prune_once(&*store, 0, &opts, newest + day30 + 1, &stop).await.expect("prune"), 4);
    assert!(svc.notifications.inbox(UserId(7), None, 10).await.expect("inbox").0.is_empty());
    svc.stores().close().expect("close");
}

/// One partition's view of the log: the events of the posts `post % parts == part`.
struct PartLog {
    inner: Arc<dyn likewise_core::ports::EventLog>,
    part: u64,
    parts: u64,
}

#[async_trait::async_trait]
impl likewise_core::ports::EventLog for PartLog {
    async fn read_after(
        &self,
        after: u64,
        max: usize,
    ) -> likewise_core::StoreResult<Vec<likewise_core::event::Event>> {
        let read = self.inner.read_after(after, max).await?;
        Ok(read.into_iter().filter(|e| e.post % self.parts == self.part).collect())
    }
    async fn head(&self) -> likewise_core::StoreResult<u64> {
        self.inner.head().await
    }
    async fn truncate(&self, _upto: u64) -> likewise_core::StoreResult<u64> {
        Ok(0)
    }
}

/// One notifier reads every partition it holds and commits them together: one step
/// notifies of every partition's posts and moves each partition's offset. A partition
/// taken over elsewhere (its fence taken) is given up alone, its events are left to its new
/// holder, and the others go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_notifier_commits_every_partition_it_holds_and_gives_up_one_taken_over() {
    use likewise_workers::notifier::consumer_name;
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = setup(dir.path()).await;
    const PARTS: u64 = 4;
    let meta = PostMeta { author: UserId(7), hide_like_count: false, comments: CommentsPolicy::Everyone };
    for p in 1..=2 * PARTS {
        svc.upstream.put_post(PostId(p), meta).await.expect("post");
    }
    let log = |part: u64| -> Arc<dyn likewise_core::ports::EventLog> {
        Arc::new(PartLog { inner: svc.stores().events.clone(), part, parts: PARTS })
    };
    let opts = NotifierOptions { hold: Duration::ZERO, ..Default::default() };
    let mut n = Notifier::without_parts(svc.clone(), &opts);
    for part in 0..PARTS {
        n.take(part as u16, log(part)).await.expect("take");
    }
    for p in 1..=PARTS {
        svc.likes.set_post_like(UserId(100 + p), PostId(p), LikeAction::Like).await.expect("like");
    }
    n.step(now_ms()).await.expect("step");
    n.step(now_ms()).await.expect("release");
    let (items, _) = svc.notifications.inbox(UserId(7), None, 20).await.expect("inbox");
    assert_eq!(items.len() as u64, PARTS, "every partition's post notified");
    let counters = &svc.stores().counters;
    // Each partition is at its own last event: post p's like is event p.
    for post in 1..=PARTS {
        let part = (post % PARTS) as u16;
        assert_eq!(
            counters.offset(&consumer_name(Some(part))).await.expect("offset"),
            post,
            "partition {part}"
        );
    }

    // Partition 2 is taken over elsewhere: its new holder fences it.
    let notifications = &svc.stores().notifications;
    notifications.fence_notifications(&consumer_name(Some(2))).await.expect("fence");
    for p in PARTS + 1..=2 * PARTS {
        svc.likes.set_post_like(UserId(200 + p), PostId(p), LikeAction::Like).await.expect("like");
    }
    let err = n.step(now_ms()).await.expect_err("partition 2 is fenced off");
    assert!(matches!(&err, likewise_core::StoreError::Superseded(c) if c == "notifications.p2"), "{err:?}");
    assert_eq!(n.partitions(), vec![0, 1, 3]);
    n.step(now_ms()).await.expect("step");
    n.step(now_ms()).await.expect("release");
    let (items, _) = svc.notifications.inbox(UserId(7), None, 20).await.expect("inbox");
    let mut posts: Vec<u64> = items.iter().map(|i| i.post.0).collect();
    posts.sort();
    // Post 6 (partition 2) is left to the partition's new holder.
    assert_eq!(posts, vec![1, 2, 3, 4, 5, 7, 8]);
    assert_eq!(counters.offset(&consumer_name(Some(2))).await.expect("offset"), 2, "left as it was");
    assert_eq!(counters.offset(&consumer_name(Some(3))).await.expect("offset"), 7);
    svc.stores().close().expect("close");
}
