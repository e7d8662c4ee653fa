//! The notification consumer: reads the event log with its own offset, holds like
//! notifications for the hold window (a quick unlike cancels them), aggregates per
//! (recipient, post, kind) in the inbox store, withdraws notifications of comments hidden or
//! deleted later, and publishes every changed item to live listeners (SSE).
//!
//! Crash safety: the stored offset never passes an event that is still held, so a restart
//! re-reads and re-holds it; inbox changes are idempotent (an exact set of actors per item),
//! so replaying from any offset gives the same inbox.

use likewise_core::event::Event;
use likewise_core::ids::CommentId;
use likewise_core::notify::{CommentContext, Holder};
use likewise_core::ports::EventLog;
use likewise_core::{StoreResult, ids::UserId};
use likewise_service::{Engagement, now_ms};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

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
    svc: Arc<Engagement>,
    log: Arc<dyn EventLog>,
    holder: Holder,
    hold_ms: u64,
    processed: u64,
    committed: u64,
}

impl Notifier {
    /// Resume from the stored offset.
    pub async fn new(svc: Arc<Engagement>, opts: &NotifierOptions) -> StoreResult<Self> {
        let log = svc.stores().events.clone();
        Self::with_log(svc, opts, log).await
    }

    /// Resume from the stored offset, reading `log` (a stream consumer positioned at
    /// [`Notifier::stored_offset`] in scale-out deployments).
    pub async fn with_log(
        svc: Arc<Engagement>,
        opts: &NotifierOptions,
        log: Arc<dyn EventLog>,
    ) -> StoreResult<Self> {
        let offset = Self::stored_offset(&svc).await?;
        Ok(Notifier {
            svc,
            log,
            holder: Holder::new(opts.hold.as_millis() as u64),
            hold_ms: opts.hold.as_millis() as u64,
            processed: offset,
            committed: offset,
        })
    }

    /// The position the notifier has committed.
    pub async fn stored_offset(svc: &Engagement) -> StoreResult<u64> {
        svc.stores().counters.offset(NOTIFIER).await
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

    /// Read everything new, release what is due at `now_ms`, apply and publish. Returns the
    /// number of inbox items changed.
    pub async fn step(&mut self, now_ms: u64) -> StoreResult<usize> {
        let stores = self.svc.stores().clone();
        let mut changes = Vec::new();
        loop {
            let events = self.log.read_after(self.processed, 4_096).await?;
            let n = events.len();
            for e in &events {
                let ctx = self.context(e).await?;
                changes.extend(self.holder.on_event(e, ctx));
                self.processed = e.seq;
            }
            if n < 4_096 {
                break;
            }
        }
        changes.extend(self.holder.release_due(now_ms));
        let offset = self.holder.safe_offset(self.processed);
        if changes.is_empty() && offset == self.committed {
            return Ok(0);
        }
        let items = match stores.notifications.apply_notifications(NOTIFIER, offset, &changes).await {
            Ok(items) => items,
            Err(e) => {
                // Forget what this step absorbed and re-read from the committed offset (it
                // never passes a held event), so the lost changes are derived again.
                self.holder = Holder::new(self.hold_ms);
                self.processed = self.committed;
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
        if let Err(e) = self.svc.publish_notifications(items).await {
            tracing::warn!(error = %e, "publishing notifications failed");
        }
        Ok(n)
    }
}

/// Run until `shutdown` flips to true.
pub async fn run(svc: Arc<Engagement>, opts: NotifierOptions, shutdown: watch::Receiver<bool>) {
    let log = svc.stores().events.clone();
    run_with(svc, opts, log, shutdown).await
}

/// [`run`] reading `log`.
pub async fn run_with(
    svc: Arc<Engagement>,
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
        if let Err(e) = n.step(now_ms()).await {
            tracing::warn!(error = %e, "notifier step failed");
        }
    }
}
