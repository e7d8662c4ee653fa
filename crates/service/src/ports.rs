//! What the background workers are handed: one small trait per worker, each naming only what
//! that worker calls, so a worker cannot reach into the service's stores and caches beyond
//! it. [`crate::Engagement`] implements them all; a test may hand a worker a fake.
//!
//! - [`Storage`]: the storage ports (the event log, offsets, counters): every worker reads
//!   its events and commits its position through them.
//! - [`CountsCommitted`]: the aggregator's: the rank index scored for a batch, then the
//!   committed counts published to this node's caches and the other nodes.
//! - [`RankingRefresh`]: the ranker's: recompute a post's cached ranking head.
//! - [`NotificationsPublisher`]: the notifier's: recipients' preferences and followees, and
//!   the stored items announced to the nodes holding their live streams.
//! - [`BusReceiver`]: the cluster bus listener's: what other nodes announce, applied here.
//! - [`Flush`]: the periodic flusher's: deferred live pushes and buffered view counts.

use crate::Engagement;
use crate::ServiceResult;
use likewise_core::comment::uncounted::Move;
use likewise_core::counter::CounterKey;
use likewise_core::event::Event;
use likewise_core::ids::{PostId, UserId};
use likewise_core::model::ViewerSettings;
use likewise_core::notify::NotifItem;
use likewise_core::ports::RankChange;
use likewise_core::ports::cluster::{Broadcast, Invalidation};
use likewise_engine::Stores;
use std::collections::HashSet;
use std::sync::Arc;

/// The storage ports.
pub trait Storage: Send + Sync {
    /// The opened stores.
    fn stores(&self) -> &Stores;
}

/// The aggregator's port.
#[async_trait::async_trait]
pub trait CountsCommitted: Storage {
    /// How many newest likers of a post the counter store keeps ("liked by").
    fn recent_likers(&self) -> usize;

    /// The rank index changes for the top-level comments `events` touch, scored with the
    /// counts they will have once `deltas` are committed (see
    /// [`crate::rank_index::RankIndexer::changes`]).
    async fn rank_changes(
        &self,
        events: &[Event],
        deltas: &[(CounterKey, i64)],
    ) -> ServiceResult<Vec<RankChange>>;

    /// The counts `values` are committed up to `epoch`: update this node's count cache and
    /// send them to the other nodes with the ranking-relevant events.
    fn counters_committed(&self, epoch: u64, values: &[(CounterKey, i64)], events: &[Event]);
}

/// The ranker's port.
#[async_trait::async_trait]
pub trait RankingRefresh: Send + Sync {
    /// Recompute the head of `post`'s ranking if it is cached (posts nobody reads are
    /// computed on their next read instead); `false` when it was not cached.
    async fn refresh_if_cached(&self, post: PostId) -> ServiceResult<bool>;
}

/// The notifier's port.
#[async_trait::async_trait]
pub trait NotificationsPublisher: Storage {
    /// A recipient's notification preferences (cached upstream data).
    async fn viewer_settings(&self, user: UserId) -> ServiceResult<ViewerSettings>;

    /// Whom a recipient follows (cached upstream data).
    async fn followees(&self, user: UserId) -> ServiceResult<Arc<HashSet<UserId>>>;

    /// Stored inbox changes: push them to this node's live streams and to the other nodes.
    async fn publish(&self, items: Vec<NotifItem>) -> ServiceResult<()>;
}

/// The cluster bus listener's port.
#[async_trait::async_trait]
pub trait BusReceiver: Send + Sync {
    /// Join a deployment: announce changes through `b` from now on.
    fn set_broadcast(&self, b: Arc<dyn Broadcast>);

    /// Another node's aggregator committed these counts (and ranking events).
    fn apply_remote_counters(&self, epoch: u64, values: &[(CounterKey, i64)], events: &[Event]);

    /// Another node registered (`made`) or withdrew a count move.
    fn apply_remote_move(&self, m: Move, made: bool);

    /// Another node changed something: drop the local cache entry.
    fn apply_invalidation(&self, inv: Invalidation);

    /// Inbox changes another node stored: push them to this node's live streams.
    async fn push_live(&self, items: Vec<NotifItem>) -> ServiceResult<()>;
}

/// The periodic flusher's port.
#[async_trait::async_trait]
pub trait Flush: Send + Sync {
    /// Send the live pushes held back while their item was hot.
    fn flush_deferred_pushes(&self);

    /// Write the buffered unique-viewer sketches; the number written.
    async fn flush_views(&self) -> ServiceResult<usize>;
}

/// A shared handle reaches the same stores.
impl<T: Storage + ?Sized> Storage for Arc<T> {
    fn stores(&self) -> &Stores {
        (**self).stores()
    }
}

impl Storage for Engagement {
    fn stores(&self) -> &Stores {
        &self.shared.stores
    }
}

#[async_trait::async_trait]
impl CountsCommitted for Engagement {
    fn recent_likers(&self) -> usize {
        self.shared.opts.recent_likers
    }

    async fn rank_changes(
        &self,
        events: &[Event],
        deltas: &[(CounterKey, i64)],
    ) -> ServiceResult<Vec<RankChange>> {
        self.comments.indexer.changes(events, deltas).await
    }

    fn counters_committed(&self, epoch: u64, values: &[(CounterKey, i64)], events: &[Event]) {
        self.shared.counters_committed(epoch, values, events);
    }
}

#[async_trait::async_trait]
impl RankingRefresh for Engagement {
    async fn refresh_if_cached(&self, post: PostId) -> ServiceResult<bool> {
        if !self.shared.top.is_cached(post) {
            return Ok(false);
        }
        self.ranking.compute(post).await?;
        Ok(true)
    }
}

#[async_trait::async_trait]
impl NotificationsPublisher for Engagement {
    async fn viewer_settings(&self, user: UserId) -> ServiceResult<ViewerSettings> {
        self.upstream.viewer_settings(user).await
    }

    async fn followees(&self, user: UserId) -> ServiceResult<Arc<HashSet<UserId>>> {
        self.upstream.followees(user).await
    }

    async fn publish(&self, items: Vec<NotifItem>) -> ServiceResult<()> {
        self.notifications.publish(items).await
    }
}

#[async_trait::async_trait]
impl BusReceiver for Engagement {
    fn set_broadcast(&self, b: Arc<dyn Broadcast>) {
        self.shared.set_broadcast(b);
    }

    fn apply_remote_counters(&self, epoch: u64, values: &[(CounterKey, i64)], events: &[Event]) {
        self.shared.apply_remote_counters(epoch, values, events);
    }

    fn apply_remote_move(&self, m: Move, made: bool) {
        self.shared.apply_remote_move(m, made);
    }

    fn apply_invalidation(&self, inv: Invalidation) {
        Engagement::apply_invalidation(self, inv);
    }

    async fn push_live(&self, items: Vec<NotifItem>) -> ServiceResult<()> {
        self.notifications.push_live(items).await
    }
}

#[async_trait::async_trait]
impl Flush for Engagement {
    fn flush_deferred_pushes(&self) {
        self.notifications.flush_deferred_pushes();
    }

    async fn flush_views(&self) -> ServiceResult<usize> {
        self.views.flush().await
    }
}
