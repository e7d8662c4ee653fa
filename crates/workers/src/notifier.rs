//! The notification consumer: reads the event log with its own offset, holds like
//! notifications for the hold window (a quick unlike cancels them), aggregates per
//! (recipient, post, kind) in the inbox store, withdraws notifications of comments hidden or
//! deleted later (and the likes of such a comment from its author's `comment_liked` item,
//! restored with the comment), and publishes every changed item to live listeners (SSE).
//!
//! Crash safety: the stored offset never passes an event that is still held, so a restart
//! re-reads and re-holds it; inbox changes are idempotent (an exact set of actors per item),
//! so replaying from any offset gives the same inbox.
//!
//! One writer: a notifier takes the consumer's fence when it starts
//! (`NotificationStore::fence_notifications`), and every write carries it. A notifier that lost
//! its lease while cut off (its write still in flight) is refused once its successor started,
//! and stops: it can neither undo the successor's changes nor move its offset.

use likewise_core::event::{Event, EventKind};
use likewise_core::ids::{CommentId, PostId};
use likewise_core::like::{Target, TargetKind};
use likewise_core::model::NotifPref;
use likewise_core::notify::{Change, CommentContext, Holder, NotifKey, NotifKind, comment_like_changes};
use likewise_core::ports::EventLog;
use likewise_core::{StoreResult, ids::UserId};
use likewise_service::now_ms;
use likewise_service::ports::{NotificationsPublisher, Storage};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Likers of one comment withdrawn or restored at most when its visibility changes: a
/// comment liked more often than this keeps the rest in its author's item.
const MAX_WITHDRAWN: usize = 10_000;

/// The longest one read of the event log may take before a step goes on to release what is
/// due: well inside the promise that a held notification is delivered within its hold + 5 s.
const READ_BOUND: Duration = Duration::from_secs(1);

/// Consumer name of the notifier.
pub const NOTIFIER: &str = "notifications";

/// Notifier tuning.
#[derive(Debug, Clone)]
pub struct NotifierOptions {
    /// How long like notifications are held.
    pub hold: Duration,
    /// How often the log is read and due notifications released.
    pub tick: Duration,
}

impl Default for NotifierOptions {
    fn default() -> Self {
        NotifierOptions { hold: Duration::from_secs(5), tick: Duration::from_millis(200) }
    }
}

/// The consumer state; drive it with [`Notifier::step`] (tests pass their own clock).
pub struct Notifier {
    svc: Arc<dyn NotificationsPublisher>,
    log: Arc<dyn EventLog>,
    holder: Holder,
    processed: u64,
    committed: u64,
    /// This notifier's writer fence.
    fence: u64,
    /// Its consumer name: [`NOTIFIER`], or one partition's (`notifications.p7`), the key of
    /// its offset and its fence.
    name: String,
    /// The label of its events metric: its partition, or `all`.
    partition: String,
    /// Whether a read reached the end of the log since the start or the last rewind: then
    /// everything up to the replay bound was read. A partition's log never reaches the
    /// bound itself (the whole stream's head) when its last event lies below it.
    caught_up: bool,
}

impl Notifier {
    /// Resume from the stored offset.
    pub async fn new(svc: Arc<dyn NotificationsPublisher>, opts: &NotifierOptions) -> StoreResult<Self> {
        let log = svc.stores().events.clone();
        Self::with_log(svc, opts, log).await
    }

    /// Resume from the stored offset, reading `log` (a stream consumer positioned at
    /// [`Notifier::stored_offset`] in scale-out deployments).
    pub async fn with_log(
        svc: Arc<dyn NotificationsPublisher>,
        opts: &NotifierOptions,
        log: Arc<dyn EventLog>,
    ) -> StoreResult<Self> {
        Self::named(svc, opts, log, None).await
    }

    /// [`Notifier::with_log`] for one partition of the events (`Some(part)`, `log` reading
    /// only that partition's) or all of them (`None`).
    pub async fn named(
        svc: Arc<dyn NotificationsPublisher>,
        opts: &NotifierOptions,
        log: Arc<dyn EventLog>,
        part: Option<u16>,
    ) -> StoreResult<Self> {
        let name = consumer_name(part);
        // Fenced first: a predecessor's write still in flight is refused from here on, so
        // the offset read next cannot move under this notifier.
        let fence = svc.stores().notifications.fence_notifications(&name).await?;
        let offset = Self::start_offset(&svc, part).await?;
        // An earlier run may have released likes past the committed offset (it stays below
        // the oldest held one); everything it can have read is at most the log's head now.
        let mut holder = Holder::new(opts.hold.as_millis() as u64);
        let head = log.head().await?;
        holder.replaying_upto(head);
        tracing::info!(offset, head, fence, consumer = %name, "notifier resumes");
        let partition = part.map_or_else(|| "all".to_string(), |p| p.to_string());
        Ok(Notifier {
            svc,
            log,
            holder,
            processed: offset,
            committed: offset,
            fence,
            name,
            partition,
            caught_up: false,
        })
    }

    /// The position the notifier has committed.
    pub async fn stored_offset(svc: &(impl Storage + ?Sized)) -> StoreResult<u64> {
        svc.stores().counters.offset(NOTIFIER).await
    }

    /// Where the notifier of partition `part` (or of every event, `None`) starts: its
    /// committed position; a partition that never committed starts where the single
    /// notifier of a deployment that had no partitions stopped (everything up to that
    /// offset was notified: its offset never passes a held like), so moving to partitions
    /// re-notifies and skips nothing.
    pub async fn start_offset(svc: &(impl Storage + ?Sized), part: Option<u16>) -> StoreResult<u64> {
        let counters = &svc.stores().counters;
        let own = counters.offset(&consumer_name(part)).await?;
        if own == 0 && part.is_some() { counters.offset(NOTIFIER).await } else { Ok(own) }
    }

    async fn context(&self, e: &Event) -> StoreResult<Option<CommentContext>> {
        if e.kind.is_like() {
            return Ok(None);
        }
        let comments = &self.svc.stores().comments;
        let mut ids = vec![CommentId(e.target.id)];
        if e.parent != 0 {
            ids.push(CommentId(e.parent));
        }
        let recs = comments.comments(&ids).await?;
        let reply_to_user = recs.first().and_then(|r| r.as_ref()).and_then(|r| r.reply_to_user);
        let parent_author: Option<UserId> = recs.get(1).and_then(|r| r.as_ref()).map(|r| r.author);
        Ok(Some(CommentContext { author: e.actor, parent_author, reply_to_user }))
    }

    /// Has `recipient` muted `actor`'s action of `kind` made at `ts_ms`
    /// (`/v1/me/notification-settings`)? `off`, or `following` and the actor is not followed
    /// now, as the preference stood when the action was made (a like held while its kind was
    /// turned off and on again stays muted).
    async fn muted(&self, key: NotifKey, actor: UserId, ts_ms: u64, prefs: &mut Prefs) -> StoreResult<bool> {
        let upstream = &self.svc;
        let s = match prefs.settings.get(&key.recipient) {
            Some(s) => *s,
            None => {
                let s = upstream.viewer_settings(key.recipient).await.map_err(service_err)?;
                prefs.settings.insert(key.recipient, s);
                s
            }
        };
        let keep = match s.pref_at(key.kind, ts_ms) {
            NotifPref::All => true,
            NotifPref::Off => false,
            NotifPref::Following => {
                let followees = match prefs.followees.get(&key.recipient) {
                    Some(f) => f.clone(),
                    None => {
                        let f = upstream.followees(key.recipient).await.map_err(service_err)?;
                        prefs.followees.insert(key.recipient, f.clone());
                        f
                    }
                };
                followees.contains(&actor)
            }
        };
        if !keep {
            metrics::counter!("likewise_notifications_muted_total").increment(1);
        }
        Ok(!keep)
    }

    /// Drop the additions their recipients muted ([`Notifier::muted`]), of actions notified
    /// at once (comments, replies, likers restored with their comment); a like is decided when
    /// it is read ([`Notifier::absorb`]). Withdrawals always pass (removing an actor that was
    /// never added is a no-op), so muting never leaves a stale name behind, and turning a kind
    /// back on replays nothing.
    async fn without_muted(&self, changes: Vec<Change>, prefs: &mut Prefs) -> StoreResult<Vec<Change>> {
        let mut kept = Vec::with_capacity(changes.len());
        for c in changes {
            if let Change::Add { key, actor, ts_ms, .. } = c
                && self.muted(key, actor, ts_ms, prefs).await?
            {
                continue;
            }
            kept.push(c);
        }
        Ok(kept)
    }

    /// A comment's likers with the time of each like (at most [`MAX_WITHDRAWN`]), for the
    /// `comment_liked` changes of its change of visibility.
    async fn likers(&self, target: Target) -> StoreResult<Vec<(UserId, u64)>> {
        let likes = &self.svc.stores().likes;
        let mut out = Vec::new();
        let mut after = None;
        while out.len() < MAX_WITHDRAWN {
            let page = likes.likers(target, after, 1_000).await?;
            let last = page.last().copied();
            out.extend(page.iter().map(|l| (l.user, l.liked_at_ms)));
            match last {
                Some(l) if page.len() == 1_000 => after = Some(l),
                _ => break,
            }
        }
        Ok(out)
    }

    /// Read everything new, release what is due at `now_ms`, apply and publish. Returns the
    /// number of inbox items changed.
    pub async fn step(&mut self, now_ms: u64) -> StoreResult<usize> {
        let stores = self.svc.stores().clone();
        let mut changes = Vec::new();
        // Settings and follows as read in this step.
        let mut prefs = Prefs::default();
        // Held notifications fall due with time, not with traffic: a read that fails or does
        // not answer (a stream fetch lost in a failover) must not keep them from release.
        let read = self.read_new(&mut changes, &mut prefs).await;
        // What this step absorbed exists only in `changes` until it is applied: any failure
        // from here on starts again from the committed offset, which re-reads it.
        let mut changes = match self.without_muted(changes, &mut prefs).await {
            Ok(changes) => changes,
            Err(e) => {
                self.rewind();
                return Err(e);
            }
        };
        // Likes read again (after a restart or a failed commit) wait until the replay is read
        // through: an unlike further on may have withdrawn them long ago, and releasing them
        // first would notify of them again. (At start nothing else is held.) A released like
        // was muted or not when it was read; one released and then lost in a failure is
        // re-read and held again from the committed offset.
        if self.caught_up || self.processed >= self.holder.replayed_upto() {
            changes.extend(self.holder.release_due(now_ms));
        }
        let applied = self.apply(&stores, changes).await;
        read?;
        applied
    }

    /// Forget what was absorbed since the committed offset and read again from there (it
    /// never passes a held event), so whatever was lost is derived again. Events up to
    /// `processed` may have been delivered (a commit whose answer was lost), which the holder
    /// keeps in mind for the unlikes it reads again.
    fn rewind(&mut self) {
        self.holder.forget(self.processed);
        self.caught_up = false;
        self.processed = self.committed;
    }

    /// Read what the log has past `processed` into `changes`, each read bounded by
    /// [`READ_BOUND`] (a read that takes longer ends this step's reading).
    async fn read_new(&mut self, changes: &mut Vec<Change>, prefs: &mut Prefs) -> StoreResult<()> {
        loop {
            let read = tokio::time::timeout(READ_BOUND, self.log.read_after(self.processed, 4_096)).await;
            let Ok(events) = read else {
                metrics::counter!("likewise_notifier_read_timeouts_total").increment(1);
                tracing::warn!("event log read did not answer in time; releasing held notifications anyway");
                return Ok(());
            };
            // A failed read absorbed nothing: what was read before it stays, and held likes
            // still fall due.
            let events = events?;
            let n = events.len();
            metrics::counter!("likewise_consumer_events_total", "consumer" => NOTIFIER, "partition" => self.partition.clone())
                .increment(n as u64);
            let _span = likewise_core::trace::consumer_span("notifier", &events);
            for e in &events {
                if let Err(err) = self.absorb(e, changes, prefs).await {
                    // Part of a stream message may be absorbed (its events share one position),
                    // and the holder has changed: start again from the committed offset.
                    changes.clear();
                    self.rewind();
                    return Err(err);
                }
                self.processed = e.seq;
            }
            if n < 4_096 {
                self.caught_up = true;
                return Ok(());
            }
        }
    }

    /// Turn one event into holds and changes. A like its recipient muted
    /// ([`Notifier::muted`]) is decided here, as the like is made, and never held: whether
    /// the recipient follows its liker is read now, not when the hold ends.
    async fn absorb(&mut self, e: &Event, changes: &mut Vec<Change>, prefs: &mut Prefs) -> StoreResult<()> {
        if e.kind == EventKind::LikeCreated && e.target_author != e.actor {
            let kind = if e.target.kind == TargetKind::Post {
                NotifKind::PostLiked
            } else {
                NotifKind::CommentLiked
            };
            let key = NotifKey { recipient: e.target_author, post: PostId(e.post), kind };
            if self.muted(key, e.actor, e.ts_ms, prefs).await? {
                changes.extend(self.holder.on_muted(e));
                return Ok(());
            }
        }
        let ctx = self.context(e).await?;
        changes.extend(self.holder.on_event(e, ctx));
        if e.target.kind == TargetKind::Comment && !e.kind.is_like() && e.delta != 0 {
            let likers = self.likers(e.target).await?;
            changes.extend(comment_like_changes(e, &likers));
        }
        Ok(())
    }

    /// Apply `changes` and the committable offset to the inbox store, then publish.
    async fn apply(&mut self, stores: &likewise_engine::Stores, changes: Vec<Change>) -> StoreResult<usize> {
        let offset = self.holder.safe_offset(self.processed);
        if changes.is_empty() && offset == self.committed {
            return Ok(0);
        }
        let items =
            match stores.notifications.apply_notifications(&self.name, self.fence, offset, &changes).await {
                Ok(items) => items,
                Err(e @ likewise_core::StoreError::Superseded(_)) => return Err(e),
                Err(e) => {
                    // The commit may have landed: see `rewind`.
                    self.rewind();
                    return Err(e);
                }
            };
        self.committed = offset;
        if let Err(e) = self.log.committed(offset).await {
            tracing::warn!(error = %e, "acknowledging notified events failed");
        }
        metrics::gauge!("likewise_notifications_held").set(self.holder.held() as f64);
        metrics::counter!("likewise_notification_changes_total").increment(changes.len() as u64);
        let n = items.len();
        if let Err(e) = self.svc.publish(items).await {
            tracing::warn!(error = %e, "publishing notifications failed");
        }
        Ok(n)
    }
}

/// The consumer name of the notifier of partition `part`, or of every event.
pub fn consumer_name(part: Option<u16>) -> String {
    match part {
        Some(p) => likewise_core::ports::cluster::part_consumer(NOTIFIER, p),
        None => NOTIFIER.to_string(),
    }
}

/// The notification settings and follows of recipients, read once per step.
#[derive(Default)]
struct Prefs {
    settings: std::collections::HashMap<UserId, likewise_core::model::ViewerSettings>,
    followees: std::collections::HashMap<UserId, Arc<std::collections::HashSet<UserId>>>,
}

fn service_err(e: likewise_service::ServiceError) -> likewise_core::StoreError {
    match e {
        likewise_service::ServiceError::Store(e) => e,
        e => likewise_core::StoreError::Engine(format!("reading notification settings: {e}")),
    }
}

/// Run until `shutdown` flips to true.
pub async fn run(
    svc: Arc<dyn NotificationsPublisher>,
    opts: NotifierOptions,
    shutdown: watch::Receiver<bool>,
) {
    let log = svc.stores().events.clone();
    run_with(svc, opts, log, shutdown).await
}

/// [`run`] reading `log`.
pub async fn run_with(
    svc: Arc<dyn NotificationsPublisher>,
    opts: NotifierOptions,
    log: Arc<dyn EventLog>,
    shutdown: watch::Receiver<bool>,
) {
    run_part(svc, opts, log, None, None, shutdown).await
}

/// How many partition notifiers of one process step at once (the `steps` gate of
/// [`run_part`]). A step's store work is per step, not per event (settings and follows read,
/// a fenced commit on the offsets' shard, the recipients' shard's writer lock), so 64
/// partitions stepping freely put 64 times the single notifier's load on the shards' pools:
/// under a write storm a worker's pool of shard 0, where every partition's offset and fence
/// live, had a median of 36 waiters, and the shard's counter aggregator, whose rank-index
/// step checks a connection out many times in a row, took 20 to 50 s per step (a bucket
/// move's drain gives up after 30 s). One at a time, the partitions together cost the pools
/// what the single notifier did; each still commits its own offset under its own fence.
pub const PART_STEPS_AT_ONCE: usize = 1;

/// [`run_with`] for partition `part` (see [`Notifier::named`]). With `steps`, each step
/// first takes one of its permits: the partitions of a process share it
/// ([`PART_STEPS_AT_ONCE`]).
pub async fn run_part(
    svc: Arc<dyn NotificationsPublisher>,
    opts: NotifierOptions,
    log: Arc<dyn EventLog>,
    part: Option<u16>,
    steps: Option<Arc<tokio::sync::Semaphore>>,
    shutdown: watch::Receiver<bool>,
) {
    let mut n = match Notifier::named(svc, &opts, log, part).await {
        Ok(n) => n,
        Err(e) => {
            tracing::error!(error = %e, "notifier cannot read its offset; not started");
            return;
        }
    };
    let mut ticker = crate::Ticker::new(opts.tick, shutdown);
    while ticker.next().await {
        // Never closed: the gate lives as long as its process's partitions.
        let _permit = match &steps {
            Some(gate) => Some(gate.clone().acquire_owned().await.expect("the steps gate is never closed")),
            None => None,
        };
        match n.step(now_ms()).await {
            Ok(_) => {}
            Err(e @ likewise_core::StoreError::Superseded(_)) => {
                // Another process runs the notifier now (this one lost its lease).
                metrics::counter!("likewise_notifier_superseded_total").increment(1);
                tracing::warn!(error = %e, "notifier stopped");
                return;
            }
            Err(e) => tracing::warn!(error = %e, "notifier step failed"),
        }
    }
}
