//! What the services of one process share: the storage ports, the read-path caches more
//! than one of them reads (counts, viewers' liked sets, comment records, rankings), and the
//! bus to the other nodes of a deployment.

use crate::ServiceOptions;
use crate::cache::counts::CountCache;
use crate::cache::records::RecordCache;
use crate::cache::snapshot::SnapshotReader;
use crate::cache::top::TopCache;
use crate::cache::viewer_likes::ViewerLikes;
use crate::cluster::{LocalLog, matters_to_ranking};
use crate::{ServiceResult, cache};
use likewise_core::comment::record::CommentRecord;
use likewise_core::comment::uncounted::Move;
use likewise_core::counter::CounterKey;
use likewise_core::event::Event;
use likewise_core::ids::CommentId;
use likewise_core::ports::cluster::{Broadcast, Invalidation};
use likewise_engine::Stores;
use std::sync::{Arc, OnceLock};

/// See the module documentation.
pub struct Shared {
    /// The storage ports.
    pub stores: Stores,
    /// Read-path tuning.
    pub opts: ServiceOptions,
    /// Counts and recent likers per target (the aggregator writes new values into it).
    pub counts: Arc<CountCache>,
    /// Each viewer's recent likes and Bloom filter.
    pub viewer_likes: Arc<ViewerLikes>,
    /// Comment records by ID (read paths only).
    pub records: RecordCache,
    /// Precomputed top-comment rankings (the ranker refreshes them).
    pub top: TopCache,
    /// The integrity consumer's snapshot: discounts of displayed like counts, flags.
    pub integrity: SnapshotReader,
    broadcast: OnceLock<Arc<dyn Broadcast>>,
    remote_events: Arc<LocalLog>,
}

impl Shared {
    /// The shared state over opened stores.
    pub fn new(stores: Stores, opts: ServiceOptions) -> Self {
        Shared {
            counts: CountCache::new(
                stores.counters.clone(),
                stores.likes.clone(),
                opts.count_refresh,
                opts.count_capacity,
                opts.recent_likers,
            ),
            viewer_likes: Arc::new(ViewerLikes::new(
                stores.likes.clone(),
                opts.viewer_capacity,
                opts.bloom_max_items,
                opts.local_viewer_cache,
            )),
            records: RecordCache::new(opts.meta_capacity / 4 + 1, opts.meta_ttl),
            top: TopCache::new(opts.count_capacity / 10 + 1),
            integrity: SnapshotReader::new(stores.snapshots.clone(), opts.discount_flagged),
            broadcast: OnceLock::new(),
            remote_events: Arc::default(),
            stores,
            opts,
        }
    }

    /// Join a deployment: announce changes through `b` from now on.
    pub fn set_broadcast(&self, b: Arc<dyn Broadcast>) {
        let _ = self.broadcast.set(b);
    }

    /// The bus to the other nodes, once joined.
    pub fn broadcast(&self) -> Option<&Arc<dyn Broadcast>> {
        self.broadcast.get()
    }

    /// Tell the other nodes to drop a cache entry (no-op on a single node).
    pub(crate) fn announce(&self, inv: Invalidation) {
        if let Some(b) = self.broadcast.get() {
            b.invalidate(inv);
        }
    }

    /// The aggregator committed `values` up to `epoch`: update this node's count cache and
    /// send them to the other nodes with the ranking-relevant events.
    pub fn counters_committed(&self, epoch: u64, values: &[(CounterKey, i64)], events: &[Event]) {
        self.counts.publish(epoch, values, events);
        let ranking: Vec<Event> = events.iter().filter(|e| matters_to_ranking(e)).copied().collect();
        // This node's own ranker reads them (the bus skips our own messages): after the
        // counts and the rank index they changed, so re-ranking sees both.
        self.remote_events.push(&ranking);
        if let Some(b) = self.broadcast.get() {
            b.counters(epoch, values, &ranking);
        }
    }

    /// An aggregator on another node committed: take its values, and queue its ranking
    /// events for this node's ranker (after the counts, so re-ranking sees them).
    pub fn apply_remote_counters(&self, epoch: u64, values: &[(CounterKey, i64)], events: &[Event]) {
        self.counts.publish(epoch, values, events);
        self.remote_events.push(events);
    }

    /// A status change about to be written moves a comment's counting (`m`): register the
    /// move until a commit counts it, here and on every node. `false` when it was registered
    /// already (see [`likewise_core::comment::uncounted::Uncounted::register`]).
    pub(crate) fn count_move(&self, m: Move) -> bool {
        let made = self.counts.register_move(m);
        if made && let Some(b) = self.broadcast.get() {
            b.count_move(m, true);
        }
        made
    }

    /// The write of a registered move changed nothing: take it back, here and on every node.
    pub(crate) fn count_move_withdrawn(&self, m: Move) {
        self.counts.withdraw_move(m);
        if let Some(b) = self.broadcast.get() {
            b.count_move(m, false);
        }
    }

    /// Another node registered (`made`) or withdrew a move.
    pub fn apply_remote_move(&self, m: Move, made: bool) {
        if made {
            self.counts.register_move(m);
        } else {
            self.counts.withdraw_move(m);
        }
    }

    /// The ranking events received from other nodes (an API node's ranker reads them).
    pub fn remote_events(&self) -> Arc<LocalLog> {
        self.remote_events.clone()
    }

    /// A comment's status changed or it was deleted (called once the write is durable):
    /// drop its cached record, and a reply's parent's (a deleted placeholder goes when its
    /// last reply does), here and on every node. Rankings keep candidates' statuses, so for
    /// a top-level comment the post's ranking goes too (the ranker would refresh it a round
    /// later).
    pub(crate) fn comment_changed(&self, r: &CommentRecord) {
        for id in std::iter::once(r.id).chain(r.parent) {
            self.records.forget(id);
            self.announce(Invalidation::Comment(id));
        }
        if r.parent.is_none() {
            self.top.invalidate(r.post);
            self.announce(Invalidation::Top(r.post));
        }
        // What is known of its author's held comments is forgotten (the status may hold or
        // release it).
        if let Some(marks) = self.stores.held_marks.clone() {
            let author = r.author;
            tokio::spawn(async move { marks.changed(&[author]).await });
        }
    }

    /// Comment records by ID through the record cache (read paths only; see
    /// [`crate::cache::records`]).
    pub(crate) async fn comment_records(
        &self,
        ids: &[CommentId],
    ) -> ServiceResult<Vec<Option<CommentRecord>>> {
        let mut out: Vec<Option<CommentRecord>> = Vec::with_capacity(ids.len());
        let mut missing = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            match self.records.get(*id) {
                Some(r) => out.push(Some((*r).clone())),
                None => {
                    out.push(None);
                    missing.push(i);
                }
            }
        }
        if missing.is_empty() {
            return Ok(out);
        }
        let epoch = self.records.epoch();
        let want: Vec<CommentId> = missing.iter().map(|&i| ids[i]).collect();
        let loaded = self.stores.comments.comments(&want).await?;
        self.records.put_if_unchanged(epoch, loaded.iter().flatten().cloned());
        for (i, r) in missing.into_iter().zip(loaded) {
            out[i] = r;
        }
        Ok(out)
    }

    /// One comment record, read from storage (write paths: never from a cache).
    pub(crate) async fn comment_record(&self, id: CommentId) -> ServiceResult<Option<CommentRecord>> {
        Ok(self.stores.comments.comments(&[id]).await?.pop().flatten())
    }

    /// Usage of the shared caches (for `/metrics`).
    pub(crate) fn cache_usage(&self) -> Vec<cache::Usage> {
        let mut out = vec![self.counts.usage(), self.viewer_likes.usage(), self.records.usage()];
        out.extend(self.top.usage());
        out
    }

    /// Drop an entry another node announced, if it is one of the shared caches'.
    pub(crate) fn invalidate(&self, inv: Invalidation) {
        match inv {
            Invalidation::Top(p) => self.top.invalidate(p),
            Invalidation::Comment(c) => self.records.forget(c),
            _ => {}
        }
    }
}
