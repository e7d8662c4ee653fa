//! Inboxes: reading them, and the live feed of changed items for SSE listeners.
//!
//! Items name up to two actors (people the recipient follows first, then the most recent)
//! and count all distinct actors exactly: "alice, bob and 22 others liked your post".

use crate::ServiceResult;
use crate::shared::Shared;
use crate::upstream::Upstream;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::notify::NotifItem;
use likewise_core::notify::{NotifKind, render_text};
use std::sync::Arc;
use tokio::sync::broadcast;

/// An inbox item as its recipient sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifView {
    /// Item ID.
    pub id: u64,
    /// Recipient.
    pub recipient: UserId,
    /// Kind.
    pub kind: NotifKind,
    /// The post.
    pub post: PostId,
    /// The latest comment concerned.
    pub comment: Option<CommentId>,
    /// Up to two names.
    pub actors: Vec<String>,
    /// Distinct actors (0: the item was withdrawn).
    pub actor_count: u64,
    /// Rendered text.
    pub text: String,
    /// Its last change in the inbox, ms since the epoch (strictly increasing over the
    /// inbox's changes: see `likewise_core::notify::next_stamp`).
    pub updated_ms: u64,
}

/// Inboxes and the live feed.
pub struct Notifications {
    shared: Arc<Shared>,
    upstream: Arc<Upstream>,
    live: LiveFeed,
}

/// The live feed (all recipients; each SSE listener keeps its own).
struct LiveFeed {
    tx: broadcast::Sender<Arc<NotifView>>,
    /// Live pushes per recipient: a burst of 30, then 60 a minute. Past it, a big account's
    /// changes are deferred and coalesced (the latest state of each item), then pushed as the
    /// allowance refills.
    pushes: governor::DefaultKeyedRateLimiter<UserId>,
    /// Pushes held back by the limiter, per recipient, latest state per item, oldest first.
    deferred: parking_lot::Mutex<std::collections::HashMap<UserId, Vec<Arc<NotifView>>>>,
    /// Flipped on shutdown so open streams end and the server can drain.
    closing: tokio::sync::watch::Sender<bool>,
    /// Calls of `flush_deferred_pushes`, to sweep the limiter's idle recipients now and then.
    flushes: std::sync::atomic::AtomicU64,
    /// Per-item gate of like pushes on very hot posts.
    hot: parking_lot::Mutex<HotItems>,
}

/// docs/notifications.md: for accounts that receive thousands of likes a minute, per-like
/// live pushes stop. A like item (post or comment liked) that gained more than `max` actors
/// since the start of its current minute is not pushed live; its inbox aggregate still
/// updates, and the first change of each new minute is pushed (the latest aggregate).
#[derive(Debug, Default)]
struct HotItems {
    /// New actors per item and minute past which live pushes stop; 0: no limit.
    max: u64,
    /// Per item: when its current minute started (ms) and its actor count then.
    minutes: std::collections::HashMap<u64, (u64, u64)>,
}

impl HotItems {
    const MINUTE_MS: u64 = 60_000;

    /// Whether a change of `item` at `now_ms` is pushed live.
    fn allows(&mut self, item: &NotifItem, now_ms: u64) -> bool {
        if self.max == 0 || !matches!(item.key.kind, NotifKind::PostLiked | NotifKind::CommentLiked) {
            return true;
        }
        let m = self.minutes.entry(item.id).or_insert((now_ms, item.actor_count));
        if now_ms.saturating_sub(m.0) >= Self::MINUTE_MS {
            *m = (now_ms, item.actor_count);
        }
        item.actor_count.saturating_sub(m.1) <= self.max
    }

    /// Forget items whose minute ended long ago (bounded memory).
    fn prune(&mut self, now_ms: u64) {
        self.minutes.retain(|_, (start, _)| now_ms.saturating_sub(*start) < 2 * Self::MINUTE_MS);
    }
}

impl Default for LiveFeed {
    fn default() -> Self {
        let per_minute = std::num::NonZeroU32::new(60).unwrap_or(std::num::NonZeroU32::MIN);
        let burst = std::num::NonZeroU32::new(30).unwrap_or(std::num::NonZeroU32::MIN);
        LiveFeed {
            tx: broadcast::channel(4096).0,
            pushes: governor::RateLimiter::keyed(governor::Quota::per_minute(per_minute).allow_burst(burst)),
            deferred: parking_lot::Mutex::new(std::collections::HashMap::new()),
            closing: tokio::sync::watch::channel(false).0,
            flushes: Default::default(),
            hot: Default::default(),
        }
    }
}

impl Notifications {
    /// The notifications service.
    pub fn new(shared: Arc<Shared>, upstream: Arc<Upstream>) -> Self {
        let live = LiveFeed::default();
        live.hot.lock().max = shared.opts.live_push_max_likes_per_minute;
        Notifications { shared, upstream, live }
    }

    /// Views of a page of items: the recipients' followees, the items' actors among them
    /// and the names shown, each read in one batch for the whole page (never per item).
    async fn notif_views(&self, items: Vec<NotifItem>) -> ServiceResult<Vec<NotifView>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        // People the recipient follows first: check (a bounded number of) followees against
        // each item's exact actor set, then fill with the most recent actors.
        let mut recipients: Vec<UserId> = items.iter().map(|it| it.key.recipient).collect();
        recipients.sort_unstable();
        recipients.dedup();
        let followees: std::collections::HashMap<UserId, Vec<UserId>> = recipients
            .iter()
            .copied()
            .zip(futures::future::try_join_all(recipients.iter().map(|r| self.upstream.followees(*r))).await?)
            .map(|(r, f)| (r, f.iter().copied().take(256).collect()))
            .collect();
        let asks: Vec<(u64, Vec<UserId>)> = items
            .iter()
            .map(|it| (it.id, followees.get(&it.key.recipient).cloned().unwrap_or_default()))
            .collect();
        let members = self.shared.stores.notifications.notif_members_many(&asks).await?;
        let picks: Vec<Vec<UserId>> = items
            .iter()
            .zip(asks.iter().zip(members))
            .map(|(it, ((_, candidates), member))| {
                let mut pick: Vec<UserId> =
                    candidates.iter().zip(member).filter(|(_, m)| *m).map(|(u, _)| *u).take(2).collect();
                for u in &it.recent {
                    if pick.len() >= 2 {
                        break;
                    }
                    if !pick.contains(u) {
                        pick.push(*u);
                    }
                }
                pick
            })
            .collect();
        let all: Vec<UserId> = picks.iter().flatten().copied().collect();
        let mut names = self.upstream.usernames(&all).await?.into_iter();
        let mut out = Vec::with_capacity(items.len());
        for (it, pick) in items.into_iter().zip(picks) {
            let actors: Vec<String> = names.by_ref().take(pick.len()).collect();
            let text = render_text(it.key.kind, &actors, it.actor_count);
            out.push(NotifView {
                id: it.id,
                recipient: it.key.recipient,
                kind: it.key.kind,
                post: it.key.post,
                comment: it.comment,
                actors,
                actor_count: it.actor_count,
                text,
                updated_ms: it.updated_ms,
            });
        }
        Ok(out)
    }

    /// Called by the notifier after it stored changes: push them to live listeners.
    pub async fn publish(&self, items: Vec<NotifItem>) -> ServiceResult<()> {
        if let Some(b) = self.shared.broadcast() {
            b.notifications(&items);
        }
        self.push_live(items).await
    }

    /// Push stored inbox changes to this node's live listeners (the notifier's own node, or
    /// any node receiving them from the notifier's), in the order of their `(updated_ms, id)`:
    /// the order of a stream's event IDs, which its resume (`Last-Event-ID`) relies on.
    pub async fn push_live(&self, mut items: Vec<NotifItem>) -> ServiceResult<()> {
        items.sort_by_key(|it| (it.updated_ms, it.id));
        if self.live.tx.receiver_count() == 0 {
            // Nobody listens on this node: rendering views (follow lookups, names) would be
            // wasted, and a listener that connects later reads its inbox (or resumes by
            // Last-Event-ID) from the store.
            self.live.deferred.lock().clear();
            return Ok(());
        }
        self.flush_deferred_pushes();
        let now = crate::now_ms();
        let before = items.len();
        let items: Vec<NotifItem> = {
            let mut hot = self.live.hot.lock();
            items.into_iter().filter(|it| hot.allows(it, now)).collect()
        };
        if items.len() < before {
            metrics::counter!("likewise_notification_pushes_hot_skipped_total")
                .increment((before - items.len()) as u64);
        }
        for v in self.notif_views(items).await? {
            let v = Arc::new(v);
            let recipient = v.recipient;
            let waiting = self.live.deferred.lock().contains_key(&recipient);
            if waiting || self.live.pushes.check_key(&recipient).is_err() {
                self.defer_push(v);
                continue;
            }
            // No listener is not an error.
            let _ = self.live.tx.send(v);
        }
        Ok(())
    }

    /// Hold a push back: the latest state of each item replaces an older one still waiting.
    fn defer_push(&self, v: Arc<NotifView>) {
        const PER_RECIPIENT: usize = 64;
        const RECIPIENTS: usize = 100_000;
        metrics::counter!("likewise_notification_pushes_deferred_total").increment(1);
        let mut d = self.live.deferred.lock();
        if d.len() >= RECIPIENTS && !d.contains_key(&v.recipient) {
            // Beyond this the inbox aggregate (read on the next fetch or reconnect) is the
            // only record: bounded memory first.
            metrics::counter!("likewise_notification_pushes_suppressed_total").increment(1);
            return;
        }
        let q = d.entry(v.recipient).or_default();
        q.retain(|w| w.id != v.id);
        q.push(v);
        if q.len() > PER_RECIPIENT {
            q.remove(0);
            metrics::counter!("likewise_notification_pushes_suppressed_total").increment(1);
        }
    }

    /// Push deferred items whose recipients have allowance again (oldest first). Called with
    /// every push and once a second by the service's housekeeping tick.
    pub fn flush_deferred_pushes(&self) {
        // The keyed limiter keeps a cell per recipient it has seen: forget the ones whose
        // allowance is full again (every 64th call: about once a minute from the tick).
        if self.live.flushes.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 64 == 63 {
            self.live.pushes.retain_recent();
            self.live.hot.lock().prune(crate::now_ms());
        }
        let mut d = self.live.deferred.lock();
        if d.is_empty() {
            return;
        }
        d.retain(|recipient, q| {
            while !q.is_empty() && self.live.pushes.check_key(recipient).is_ok() {
                let _ = self.live.tx.send(q.remove(0));
            }
            !q.is_empty()
        });
    }

    /// A recipient's inbox, most recently updated first.
    pub async fn inbox(
        &self,
        viewer: UserId,
        after: Option<(u64, u64)>,
        limit: usize,
    ) -> ServiceResult<(Vec<NotifView>, Option<(u64, u64)>)> {
        let mut items = self.shared.stores.notifications.inbox(viewer, after, limit + 1).await?;
        let more = items.len() > limit;
        items.truncate(limit);
        let next = if more { items.last().map(|i| (i.updated_ms, i.id)) } else { None };
        Ok((self.notif_views(items).await?, next))
    }

    /// Subscribe to every inbox change (filter by recipient), and to the shutdown signal
    /// that ends live streams.
    pub fn subscribe(&self) -> (broadcast::Receiver<Arc<NotifView>>, tokio::sync::watch::Receiver<bool>) {
        (self.live.tx.subscribe(), self.live.closing.subscribe())
    }

    /// End every live stream (graceful shutdown cannot finish while they are open).
    pub fn close_live_streams(&self) {
        let _ = self.live.closing.send(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Engagement;
    use likewise_core::notify::NotifKey;
    use likewise_store::embedded::{EmbeddedOptions, EmbeddedStore};

    fn item(id: u64, recipient: u64) -> NotifItem {
        NotifItem {
            id,
            key: NotifKey { recipient: UserId(recipient), post: PostId(id), kind: NotifKind::PostLiked },
            comment: None,
            actor_count: 1,
            recent: vec![UserId(1000 + id)],
            updated_ms: 1_000 + id,
        }
    }

    /// A like item past its per-minute allowance of new actors is not pushed until its next
    /// minute; comment items are never gated; 0 turns the gate off.
    #[test]
    fn hot_like_items_are_pushed_once_a_minute() {
        let mut hot = HotItems { max: 10, ..Default::default() };
        let at = |n: u64| NotifItem { actor_count: n, ..item(1, 7) };
        assert!(hot.allows(&at(5), 0), "the first sight of an item is pushed");
        assert!(hot.allows(&at(15), 1_000), "10 new actors within the minute");
        assert!(!hot.allows(&at(16), 2_000), "the 11th is not pushed");
        assert!(!hot.allows(&at(500), 59_999));
        assert!(hot.allows(&at(900), 60_000), "a new minute pushes the latest aggregate");
        assert!(!hot.allows(&at(911), 61_000));
        let commented =
            NotifItem { key: NotifKey { kind: NotifKind::Commented, ..item(2, 7).key }, ..at(999) };
        assert!(hot.allows(&commented, 61_000) && hot.allows(&commented, 61_001));
        hot.prune(180_001);
        assert!(hot.minutes.is_empty(), "idle items are forgotten");
        let mut off = HotItems::default();
        assert!(off.allows(&at(1), 0) && off.allows(&at(1_000_000), 1));
    }

    /// Past the per-recipient allowance, pushes are deferred, coalesced per item and
    /// delivered as the allowance refills: never silently dropped.
    #[tokio::test]
    async fn pushes_past_the_allowance_are_deferred_not_lost() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = EmbeddedOptions {
            cache_bytes: 8 << 20,
            memtable_bytes: 4 << 20,
            max_journal_bytes: 64 << 20,
            ..Default::default()
        };
        let store = EmbeddedStore::open(&dir.path().join("s"), &opts).expect("open");
        let svc = Engagement::new(
            likewise_store::open::from_embedded(store, Default::default()),
            crate::ServiceOptions::default(),
        );
        let (mut rx, _) = svc.notifications.subscribe();
        // 40 distinct items for one recipient, then a newer state of item 35.
        svc.notifications.push_live((1..=40).map(|i| item(i, 7)).collect()).await.expect("push");
        let mut newer = item(35, 7);
        newer.actor_count = 2;
        svc.notifications.push_live(vec![newer]).await.expect("push");
        let mut got = Vec::new();
        while let Ok(v) = rx.try_recv() {
            got.push(v);
        }
        assert_eq!(got.len(), 30, "the burst goes out at once");
        tokio::time::sleep(std::time::Duration::from_millis(2_100)).await;
        svc.notifications.flush_deferred_pushes();
        while let Ok(v) = rx.try_recv() {
            got.push(v);
        }
        assert!(got.len() >= 31, "the refilled allowance delivers deferred items ({})", got.len());
        // Item 35 is delivered once, in its latest state, whenever its turn comes.
        for _ in 0..12 {
            tokio::time::sleep(std::time::Duration::from_millis(1_000)).await;
            svc.notifications.flush_deferred_pushes();
            while let Ok(v) = rx.try_recv() {
                got.push(v);
            }
        }
        let ids: Vec<u64> = got.iter().map(|v| v.id).collect();
        assert_eq!(got.len(), 40, "every item arrives exactly once: {ids:?}");
        assert_eq!(got.iter().find(|v| v.id == 35).map(|v| v.actor_count), Some(2));
    }

    /// Counts the store calls a page of views makes, delegating to the embedded store.
    struct Counting {
        inner: likewise_engine::Stores,
        calls: parking_lot::Mutex<std::collections::BTreeMap<&'static str, u64>>,
    }

    impl Counting {
        fn count(&self, what: &'static str) {
            *self.calls.lock().entry(what).or_default() += 1;
        }
    }

    #[async_trait::async_trait]
    impl likewise_core::ports::NotificationStore for Counting {
        async fn fence_notifications(&self, consumer: &str) -> likewise_core::StoreResult<u64> {
            self.inner.notifications.fence_notifications(consumer).await
        }
        async fn commit_notifications(
            &self,
            commits: &[likewise_core::notify::NotifCommit],
            changes: &[likewise_core::notify::Change],
        ) -> likewise_core::StoreResult<Vec<NotifItem>> {
            self.inner.notifications.commit_notifications(commits, changes).await
        }
        async fn notif_members(&self, item: u64, users: &[UserId]) -> likewise_core::StoreResult<Vec<bool>> {
            self.count("notif_members");
            self.inner.notifications.notif_members(item, users).await
        }
        async fn notif_members_many(
            &self,
            asks: &[(u64, Vec<UserId>)],
        ) -> likewise_core::StoreResult<Vec<Vec<bool>>> {
            self.count("notif_members_many");
            self.inner.notifications.notif_members_many(asks).await
        }
        async fn inbox(
            &self,
            recipient: UserId,
            after: Option<(u64, u64)>,
            limit: usize,
        ) -> likewise_core::StoreResult<Vec<NotifItem>> {
            self.inner.notifications.inbox(recipient, after, limit).await
        }
        async fn prune_notifications(
            &self,
            shard: usize,
            before_ms: u64,
            limit: usize,
        ) -> likewise_core::StoreResult<u64> {
            self.inner.notifications.prune_notifications(shard, before_ms, limit).await
        }
    }

    #[async_trait::async_trait]
    impl likewise_core::ports::MetaStore for Counting {
        async fn put_post(
            &self,
            id: PostId,
            meta: likewise_core::model::PostMeta,
        ) -> likewise_core::StoreResult<()> {
            self.inner.meta.put_post(id, meta).await
        }
        async fn posts(
            &self,
            ids: &[PostId],
        ) -> likewise_core::StoreResult<Vec<Option<likewise_core::model::PostMeta>>> {
            self.inner.meta.posts(ids).await
        }
        async fn put_user(
            &self,
            id: UserId,
            p: likewise_core::model::UserProfile,
        ) -> likewise_core::StoreResult<()> {
            self.inner.meta.put_user(id, p).await
        }
        async fn users(
            &self,
            ids: &[UserId],
        ) -> likewise_core::StoreResult<Vec<Option<likewise_core::model::UserProfile>>> {
            self.count("users");
            self.inner.meta.users(ids).await
        }
        async fn set_follow(&self, a: UserId, b: UserId, on: bool) -> likewise_core::StoreResult<()> {
            self.inner.meta.set_follow(a, b, on).await
        }
        async fn followees(&self, user: UserId, limit: usize) -> likewise_core::StoreResult<Vec<UserId>> {
            self.count("followees");
            self.inner.meta.followees(user, limit).await
        }
        async fn put_settings(
            &self,
            user: UserId,
            s: likewise_core::model::ViewerSettings,
        ) -> likewise_core::StoreResult<()> {
            self.inner.meta.put_settings(user, s).await
        }
        async fn settings(
            &self,
            user: UserId,
        ) -> likewise_core::StoreResult<likewise_core::model::ViewerSettings> {
            self.inner.meta.settings(user).await
        }
        async fn ping(&self) -> likewise_core::StoreResult<()> {
            self.inner.meta.ping().await
        }
    }

    /// A page of items costs one read of followees, one of their memberships and one of
    /// names, whatever its length: not three per item.
    #[tokio::test]
    async fn a_page_of_items_reads_followees_members_and_names_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = EmbeddedOptions {
            cache_bytes: 8 << 20,
            memtable_bytes: 4 << 20,
            max_journal_bytes: 64 << 20,
            ..Default::default()
        };
        let store = EmbeddedStore::open(&dir.path().join("s"), &opts).expect("open");
        let inner = likewise_store::open::from_embedded(store, Default::default());
        let counting = Arc::new(Counting { inner: inner.clone(), calls: Default::default() });
        let mut stores = inner;
        stores.notifications = counting.clone();
        stores.meta = counting.clone();
        let svc = Engagement::new(stores, crate::ServiceOptions::default());
        svc.upstream.set_follow(UserId(7), UserId(1003), true).await.expect("follow");
        counting.calls.lock().clear();
        // Two recipients, twenty items of distinct recent actors.
        let items: Vec<NotifItem> = (1..=20).map(|i| item(i, 7 + i % 2)).collect();
        let views = svc.notifications.notif_views(items).await.expect("views");
        assert_eq!(views.len(), 20);
        assert_eq!(views[2].actors, [likewise_core::model::UserProfile::placeholder_name(UserId(1003))]);
        let calls = counting.calls.lock().clone();
        assert_eq!(calls.get("notif_members").copied().unwrap_or(0), 0, "{calls:?}");
        assert_eq!(calls.get("notif_members_many").copied(), Some(1), "{calls:?}");
        assert_eq!(calls.get("users").copied(), Some(1), "{calls:?}");
        assert!(calls.get("followees").copied().unwrap_or(0) <= 2, "one per recipient: {calls:?}");
    }
}
