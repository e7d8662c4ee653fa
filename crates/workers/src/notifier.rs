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
//!
//! Partitions ([`run_shared`]): in a scaled-out worker role one notifier per process reads
//! every post partition the process holds, each from its own stream consumer, with its own
//! holder, offset and fence; a step reads them all and writes all their changes and offsets
//! in one commit (`NotificationStore::commit_notifications`), so a process's store work per
//! step is one notifier's however many partitions it holds. Partitions are taken and given
//! back between steps.

use likewise_core::event::{Event, EventKind};
use likewise_core::ids::{CommentId, PostId};
use likewise_core::like::{Target, TargetKind};
use likewise_core::model::NotifPref;
use likewise_core::notify::{
    Change, CommentContext, Holder, NotifCommit, NotifKey, NotifKind, comment_like_changes,
};
use likewise_core::ports::EventLog;
use likewise_core::{StoreResult, ids::UserId};
use likewise_service::now_ms;
use likewise_service::ports::{NotificationsPublisher, Storage};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};

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

/// What the notifier keeps for one partition it reads (or for the whole log).
struct Part {
    log: Arc<dyn EventLog>,
    holder: Holder,
    processed: u64,
    committed: u64,
    /// Its writer fence.
    fence: u64,
    /// Its consumer name: [`NOTIFIER`], or one partition's (`notifications.p7`), the key of
    /// its offset and its fence.
    name: String,
    /// The label of its events metric: its partition, or `all`.
    label: String,
    /// Whether a read reached the end of the log since the start or the last rewind: then
    /// everything up to the replay bound was read. A partition's log never reaches the
    /// bound itself (the whole stream's head) when its last event lies below it.
    caught_up: bool,
}

impl Part {
    /// Partition `part` (or every event, `None`) resuming from its stored offset, read from
    /// `log`.
    async fn open(
        svc: &Arc<dyn NotificationsPublisher>,
        hold_ms: u64,
        log: Arc<dyn EventLog>,
        part: Option<u16>,
    ) -> StoreResult<Part> {
        let name = consumer_name(part);
        // Fenced first: a predecessor's write still in flight is refused from here on, so
        // the offset read next cannot move under this notifier.
        let fence = svc.stores().notifications.fence_notifications(&name).await?;
        let offset = Notifier::start_offset(&**svc, part).await?;
        // An earlier run may have released likes past the committed offset (it stays below
        // the oldest held one); everything it can have read is at most the log's head now.
        let mut holder = Holder::new(hold_ms);
        let head = log.head().await?;
        holder.replaying_upto(head);
        tracing::info!(offset, head, fence, consumer = %name, "notifier resumes");
        let label = part.map_or_else(|| "all".to_string(), |p| p.to_string());
        Ok(Part { log, holder, processed: offset, committed: offset, fence, name, label, caught_up: false })
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
}

/// The consumer state; drive it with [`Notifier::step`] (tests pass their own clock).
pub struct Notifier {
    svc: Arc<dyn NotificationsPublisher>,
    hold_ms: u64,
    /// What it reads: the whole log (`None`), or the partitions it holds.
    parts: BTreeMap<Option<u16>, Part>,
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
        let mut n = Self::without_parts(svc, opts);
        let whole = Part::open(&n.svc, n.hold_ms, log, None).await?;
        n.parts.insert(None, whole);
        Ok(n)
    }

    /// A notifier that reads nothing yet: [`Notifier::take`] gives it partitions.
    pub fn without_parts(svc: Arc<dyn NotificationsPublisher>, opts: &NotifierOptions) -> Self {
        Notifier { svc, hold_ms: opts.hold.as_millis() as u64, parts: BTreeMap::new() }
    }

    /// Read partition `part` from `log` too, from its stored offset, under a new fence of
    /// its own (a predecessor's writes are refused from now on).
    pub async fn take(&mut self, part: u16, log: Arc<dyn EventLog>) -> StoreResult<()> {
        let p = Part::open(&self.svc, self.hold_ms, log, Some(part)).await?;
        self.parts.insert(Some(part), p);
        Ok(())
    }

    /// Stop reading partition `part`: what was read of it past its committed offset is
    /// dropped, and its successor reads it again from there.
    pub fn give(&mut self, part: u16) {
        self.parts.remove(&Some(part));
    }

    /// The partitions it reads.
    pub fn partitions(&self) -> Vec<u16> {
        self.parts.keys().filter_map(|k| *k).collect()
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
        // from here on starts again from the committed offsets, which re-reads it.
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
        for p in self.parts.values_mut() {
            if p.caught_up || p.processed >= p.holder.replayed_upto() {
                changes.extend(p.holder.release_due(now_ms));
            }
        }
        let applied = self.apply(&stores, changes).await;
        read?;
        applied
    }

    /// [`Part::rewind`] every partition: the changes of all of them go in one commit.
    fn rewind(&mut self) {
        for p in self.parts.values_mut() {
            p.rewind();
        }
    }

    /// Read what the log of each partition has past its `processed` into `changes`, the
    /// partitions' reads at once, each read bounded by [`READ_BOUND`] (a read that takes
    /// longer ends this step's reading of that partition). The first read error is returned
    /// once the others are absorbed.
    async fn read_new(&mut self, changes: &mut Vec<Change>, prefs: &mut Prefs) -> StoreResult<()> {
        let (mut failed, mut timed_out) = (None, 0);
        let mut pending: Vec<Option<u16>> = self.parts.keys().copied().collect();
        while !pending.is_empty() {
            let logs: Vec<_> = pending
                .iter()
                .filter_map(|k| self.parts.get(k).map(|p| (*k, p.log.clone(), p.processed)))
                .collect();
            let reads = futures_util::future::join_all(logs.into_iter().map(|(k, log, after)| async move {
                (k, tokio::time::timeout(READ_BOUND, log.read_after(after, 4_096)).await)
            }))
            .await;
            let mut full = Vec::new();
            for (k, read) in reads {
                let Ok(events) = read else {
                    metrics::counter!("likewise_notifier_read_timeouts_total").increment(1);
                    timed_out += 1;
                    continue;
                };
                // A failed read absorbed nothing: what was read before it stays, and held
                // likes still fall due.
                let events = match events {
                    Ok(events) => events,
                    Err(e) => {
                        failed.get_or_insert(e);
                        continue;
                    }
                };
                let Some(mut p) = self.parts.remove(&k) else { continue };
                let absorbed = self.absorb_all(&mut p, &events, changes, prefs).await;
                self.parts.insert(k, p);
                if let Err(err) = absorbed {
                    // Part of a stream message may be absorbed (its events share one
                    // position), and the holder has changed: every partition starts again
                    // from its committed offset (their changes were to be committed together).
                    changes.clear();
                    self.rewind();
                    return Err(err);
                }
                if events.len() == 4_096 {
                    full.push(k);
                }
            }
            pending = full;
        }
        if timed_out > 0 {
            tracing::warn!(
                reads = timed_out,
                "event log reads did not answer in time; releasing held notifications anyway"
            );
        }
        failed.map_or(Ok(()), Err)
    }

    /// Absorb `events`, read from partition `p`'s log.
    async fn absorb_all(
        &self,
        p: &mut Part,
        events: &[Event],
        changes: &mut Vec<Change>,
        prefs: &mut Prefs,
    ) -> StoreResult<()> {
        metrics::counter!("likewise_consumer_events_total", "consumer" => NOTIFIER, "partition" => p.label.clone())
            .increment(events.len() as u64);
        let _span = likewise_core::trace::consumer_span("notifier", events);
        for e in events {
            self.absorb(&mut p.holder, e, changes, prefs).await?;
            p.processed = e.seq;
        }
        if events.len() < 4_096 {
            p.caught_up = true;
        }
        Ok(())
    }

    /// Turn one event into holds (in `holder`, its partition's) and changes. A like its
    /// recipient muted ([`Notifier::muted`]) is decided here, as the like is made, and never
    /// held: whether the recipient follows its liker is read now, not when the hold ends.
    async fn absorb(
        &self,
        holder: &mut Holder,
        e: &Event,
        changes: &mut Vec<Change>,
        prefs: &mut Prefs,
    ) -> StoreResult<()> {
        if e.kind == EventKind::LikeCreated && e.target_author != e.actor {
            let kind = if e.target.kind == TargetKind::Post {
                NotifKind::PostLiked
            } else {
                NotifKind::CommentLiked
            };
            let key = NotifKey { recipient: e.target_author, post: PostId(e.post), kind };
            if self.muted(key, e.actor, e.ts_ms, prefs).await? {
                changes.extend(holder.on_muted(e));
                return Ok(());
            }
        }
        let ctx = self.context(e).await?;
        changes.extend(holder.on_event(e, ctx));
        if e.target.kind == TargetKind::Comment && !e.kind.is_like() && e.delta != 0 {
            let likers = self.likers(e.target).await?;
            changes.extend(comment_like_changes(e, &likers));
        }
        Ok(())
    }

    /// Apply `changes` and every partition's committable offset to the inbox store in one
    /// commit, then publish. A partition whose fence was taken over (another process holds
    /// it now) is given up, and the error names it; the others read again from their
    /// committed offsets.
    async fn apply(&mut self, stores: &likewise_engine::Stores, changes: Vec<Change>) -> StoreResult<usize> {
        let commits: Vec<NotifCommit> = self
            .parts
            .values()
            .map(|p| NotifCommit {
                consumer: p.name.clone(),
                fence: p.fence,
                offset: p.holder.safe_offset(p.processed),
            })
            .collect();
        let unmoved = commits.iter().zip(self.parts.values()).all(|(c, p)| c.offset == p.committed);
        if changes.is_empty() && unmoved {
            return Ok(0);
        }
        let items = match stores.notifications.commit_notifications(&commits, &changes).await {
            Ok(items) => items,
            Err(likewise_core::StoreError::Superseded(names)) => {
                let gone: Vec<&str> = names.split(',').collect();
                self.parts.retain(|_, p| !gone.contains(&p.name.as_str()));
                self.rewind();
                return Err(likewise_core::StoreError::Superseded(names));
            }
            Err(e) => {
                // The commit may have landed: see `Part::rewind`.
                self.rewind();
                return Err(e);
            }
        };
        for (p, c) in self.parts.values_mut().zip(&commits) {
            if c.offset == p.committed {
                continue;
            }
            p.committed = c.offset;
            if let Err(e) = p.log.committed(c.offset).await {
                tracing::warn!(error = %e, consumer = %p.name, "acknowledging notified events failed");
            }
        }
        let held: usize = self.parts.values().map(|p| p.holder.held()).sum();
        metrics::gauge!("likewise_notifications_held").set(held as f64);
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
    let mut n = match Notifier::with_log(svc, &opts, log).await {
        Ok(n) => n,
        Err(e) => {
            tracing::error!(error = %e, "notifier cannot read its offset; not started");
            return;
        }
    };
    let mut ticker = crate::Ticker::new(opts.tick, shutdown);
    while ticker.next().await {
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

/// A change to the partitions a process's loop of a partitioned consumer runs (the
/// notifier's [`run_shared`], trending's `crate::trending::run_shared`).
#[derive(Debug)]
pub enum PartCommand {
    /// Read these partitions too (this process just took their leases).
    Take(Vec<u16>),
    /// Stop reading these; answered once no write of theirs can be in flight any more (the
    /// step under way, if any, has ended), so their leases can be given back.
    Give(Vec<u16>, oneshot::Sender<()>),
}

/// How long a partition that could not be opened, or whose fence was taken over, waits
/// before it is opened again while still held (a lease lost meanwhile gives it back first).
const REOPEN_AFTER: Duration = Duration::from_secs(2);

/// One notifier for every partition this process holds, until `shutdown` or until
/// `commands` closes: partitions are taken and given back between steps, as `commands`
/// say; `open(part)` makes a partition's log, positioned at its stored offset.
pub async fn run_shared<O, F>(
    svc: Arc<dyn NotificationsPublisher>,
    opts: NotifierOptions,
    open: O,
    mut commands: mpsc::UnboundedReceiver<PartCommand>,
    shutdown: watch::Receiver<bool>,
) where
    O: Fn(u16) -> F,
    F: Future<Output = StoreResult<Arc<dyn EventLog>>>,
{
    let mut n = Notifier::without_parts(svc, &opts);
    // The partitions held here, and when those not read yet may be opened.
    let mut wanted: BTreeSet<u16> = BTreeSet::new();
    let mut not_before: HashMap<u16, Instant> = HashMap::new();
    let mut ticker = crate::Ticker::new(opts.tick, shutdown);
    loop {
        tokio::select! {
            biased;
            command = commands.recv() => {
                match command {
                    Some(PartCommand::Take(parts)) => wanted.extend(parts),
                    Some(PartCommand::Give(parts, done)) => {
                        for part in parts {
                            wanted.remove(&part);
                            not_before.remove(&part);
                            n.give(part);
                        }
                        let _ = done.send(());
                    }
                    None => return,
                }
                continue;
            }
            more = ticker.next() => if !more { return },
        }
        // Partitions to open: at once, each its fence, offset and stream consumer.
        let now = Instant::now();
        let reading = n.partitions();
        let due: Vec<u16> = wanted
            .iter()
            .copied()
            .filter(|p| !reading.contains(p) && not_before.get(p).is_none_or(|t| *t <= now))
            .collect();
        if !due.is_empty() {
            let opened = futures_util::future::join_all(due.iter().map(|&part| {
                let log = open(part);
                async move { (part, log.await) }
            }))
            .await;
            for (part, log) in opened {
                match async { n.take(part, log?).await }.await {
                    Ok(()) => {
                        not_before.remove(&part);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, part, "notifier partition not opened; retrying");
                        not_before.insert(part, Instant::now() + REOPEN_AFTER);
                    }
                }
            }
        }
        if n.parts.is_empty() {
            continue;
        }
        match n.step(now_ms()).await {
            Ok(_) => {}
            Err(likewise_core::StoreError::Superseded(names)) => {
                // Given up by the step: another process took them (this one lost their
                // leases, and gives them back once it notices).
                metrics::counter!("likewise_notifier_superseded_total").increment(1);
                tracing::warn!(consumers = %names, "notifier partitions taken over elsewhere");
                let reading = n.partitions();
                for part in wanted.iter().filter(|p| !reading.contains(p)) {
                    not_before.insert(*part, Instant::now() + REOPEN_AFTER);
                }
            }
            Err(e) => tracing::warn!(error = %e, "notifier step failed"),
        }
    }
}
