//! The counter aggregator, in process (docs/architecture.md, "The counter").
//!
//! Every `window` it reads all events past its offset, folds them into a [`DeltaBatch`] and
//! commits the sums and the new offset in ONE atomic write ([`CounterStore::apply_deltas`]).
//! A crash before the commit replays the events; a crash after it never sees them again: no
//! delta is applied twice or dropped. New values go straight into the count cache, so readers
//! never wait for a TTL. Requests to reconcile a target are served between reads, inside the
//! aggregator, because it is the only writer of counters: the repair is folded into the same
//! commit as the deltas.

use crate::reconcile::{HotTracker, ReconcileHandle, ReconcileRequest};
use likewise_core::StoreResult;
use likewise_core::counter::{CounterField, CounterKey, DeltaBatch};
use likewise_core::ids::PostId;
use likewise_core::like::{Target, TargetKind};
use likewise_core::ports::EventLog;
use likewise_service::now_ms;
use likewise_service::ports::{CountsCommitted, Storage};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// A service error as the store error the aggregator's step returns (it is one).
fn service_err(e: likewise_service::ServiceError) -> likewise_core::StoreError {
    match e {
        likewise_service::ServiceError::Store(e) => e,
        other => likewise_core::StoreError::Engine(other.to_string()),
    }
}

/// Aggregator tuning.
#[derive(Debug, Clone)]
pub struct AggregatorOptions {
    /// Consumer name (its offset key).
    pub consumer: String,
    /// How long deltas are summed before one commit.
    pub window: Duration,
    /// Events read per storage call.
    pub read_chunk: usize,
    /// Most events folded into one commit (bounds memory and commit size).
    pub max_events_per_commit: usize,
    /// How often the hottest posts are recounted.
    pub reconcile_every: Duration,
    /// How many of the hottest posts are recounted each time.
    pub reconcile_hot: usize,
    /// Events kept behind the consumer for replay; older ones are deleted.
    pub retain_events: u64,
    /// Other consumers of the same log whose unread events must never be deleted, however
    /// far behind they are (the export during a broker outage, the notifier, the trending
    /// consumer): those that run (`WorkerOptions::aggregator_options`).
    pub hold_for: Vec<String>,
    /// Keep the rank index (`false` only to measure what it costs).
    pub rank_index: bool,
}

impl Default for AggregatorOptions {
    fn default() -> Self {
        AggregatorOptions {
            consumer: likewise_core::counter::COUNTERS_CONSUMER.into(),
            window: Duration::from_millis(250),
            read_chunk: 16_384,
            max_events_per_commit: 500_000,
            reconcile_every: Duration::from_secs(60),
            reconcile_hot: 10,
            retain_events: 10_000_000,
            hold_for: Vec::new(),
            rank_index: true,
        }
    }
}

/// What one step did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StepReport {
    /// Events applied.
    pub events: u64,
    /// Counter rows written.
    pub counters_written: usize,
    /// (target, drift) for every reconciled target.
    pub reconciled: Vec<(Target, i64)>,
    /// True when the log had more events than one commit takes.
    pub more: bool,
}

/// The aggregator. Create with [`Aggregator::new`], drive with [`Aggregator::run`] or
/// [`Aggregator::step`].
pub struct Aggregator {
    svc: Arc<dyn CountsCommitted>,
    log: Arc<dyn EventLog>,
    opts: AggregatorOptions,
    offset: u64,
    hot: HotTracker,
    requests: mpsc::Receiver<ReconcileRequest>,
}

impl Aggregator {
    /// An aggregator resuming from its stored offset, and the handle to ask it to reconcile.
    pub async fn new(
        svc: Arc<dyn CountsCommitted>,
        opts: AggregatorOptions,
    ) -> StoreResult<(Self, ReconcileHandle)> {
        let log = svc.stores().events.clone();
        Self::with_log(svc, opts, log).await
    }

    /// An aggregator reading `log` (a stream consumer of one shard's events, in scale-out
    /// deployments) instead of the store's own log. Create the log at [`Aggregator::stored_offset`].
    pub async fn with_log(
        svc: Arc<dyn CountsCommitted>,
        opts: AggregatorOptions,
        log: Arc<dyn EventLog>,
    ) -> StoreResult<(Self, ReconcileHandle)> {
        let offset = Self::stored_offset(&svc, &opts).await?;
        let (tx, rx) = mpsc::channel(1024);
        let hot = HotTracker::new(opts.reconcile_hot);
        Ok((Aggregator { svc, log, opts, offset, hot, requests: rx }, ReconcileHandle::new(tx)))
    }

    /// The position this consumer has committed.
    pub async fn stored_offset(svc: &(impl Storage + ?Sized), opts: &AggregatorOptions) -> StoreResult<u64> {
        svc.stores().counters.offset(&opts.consumer).await
    }

    /// The log position applied so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// After a failed step, go on from the stored offset: a commit can land although its
    /// answer was lost (a connection cut after the server committed), and then the batch must
    /// not be applied again (`apply_deltas` refuses a window whose start has moved). Unread
    /// storage keeps the offset as it was; the next step tries again.
    pub async fn resync_offset(&mut self) {
        match Self::stored_offset(&self.svc, &self.opts).await {
            Ok(stored) if stored != self.offset => {
                tracing::warn!(
                    from = self.offset,
                    to = stored,
                    "aggregator offset moved; resuming from the stored one"
                );
                self.offset = stored;
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "reading the aggregator offset failed"),
        }
    }

    /// Apply every event available now (up to one commit's worth) and reconcile `targets`.
    pub async fn step(&mut self, targets: &[Target]) -> StoreResult<StepReport> {
        let stores = self.svc.stores().clone();
        let mut batch = DeltaBatch::new();
        let mut events = Vec::new();
        let mut more = false;
        loop {
            let chunk =
                self.log.read_after(batch.last_seq().unwrap_or(self.offset), self.opts.read_chunk).await?;
            let n = chunk.len();
            for e in &chunk {
                batch.add(e);
                // A comment event moves its post's comment and reply counts, which are
                // recounted with the post.
                self.hot.saw(if e.kind.is_like() { e.target } else { Target::post(e.post) });
            }
            events.extend(chunk);
            if n < self.opts.read_chunk {
                break;
            }
            if events.len() >= self.opts.max_events_per_commit {
                more = true;
                break;
            }
        }
        // Recount before committing: the recount's "pending" covers exactly the events past
        // the stored offset, including the ones folded into this batch.
        let mut reconciled = Vec::with_capacity(targets.len());
        for t in targets {
            if let Some(drift) = self.reconcile(*t, &mut batch).await {
                reconciled.push((*t, drift));
            }
        }
        if batch.is_empty() {
            return Ok(StepReport { reconciled, ..StepReport::default() });
        }
        // Ends with the commit (when this step returns).
        let _span = likewise_core::trace::consumer_span("aggregator", &events);
        let upto = batch.last_seq().unwrap_or(self.offset);
        let n_events = batch.event_count();
        let oldest_ts = events.first().map(|e| e.ts_ms);
        let deltas = batch.into_deltas();
        // The rank index first, scored with the counts this commit will store: a crash
        // before the commit replays the batch and recomputes the same entries.
        let ranks = if self.opts.rank_index {
            let started = Instant::now();
            let ranks = self.svc.rank_changes(&events, &deltas).await.map_err(service_err)?;
            metrics::counter!("likewise_rank_index_micros_total")
                .increment(started.elapsed().as_micros() as u64);
            ranks
        } else {
            Vec::new()
        };
        if !ranks.is_empty() {
            stores.ranks.change_ranks(&ranks).await?;
            metrics::counter!("likewise_rank_index_changes_total").increment(ranks.len() as u64);
        }
        let values = stores.counters.apply_deltas(&self.opts.consumer, self.offset, upto, &deltas).await?;
        // Posts' newest likers where the counter store keeps them (Redis on the scale-out
        // engines): API nodes refresh a stale count and its likers from there.
        stores.counters.likers_committed(&events, self.svc.recent_likers()).await;
        self.svc.counters_committed(upto, &values, &events);
        self.offset = upto;
        if let Err(e) = self.log.committed(upto).await {
            tracing::warn!(error = %e, "acknowledging applied events failed");
        }
        if let Some(ts) = oldest_ts {
            let lag = now_ms().saturating_sub(ts) as f64 / 1000.0;
            metrics::histogram!("likewise_aggregator_lag_seconds").record(lag);
        }
        metrics::counter!("likewise_aggregator_events_total").increment(n_events);
        metrics::histogram!("likewise_aggregator_commit_counters").record(values.len() as f64);
        Ok(StepReport { events: n_events, counters_written: values.len(), reconciled, more })
    }

    /// Recount `t` and fold the repairs into `batch`: its likes, and for a post its
    /// comment count and the reply counts of its top-level comments. The like drift, or
    /// `None` when the likes could not be recounted now (storage hiccup, relay behind): its
    /// requester is told, and the next round tries again. A comment or reply recount that
    /// fails is skipped the same way.
    async fn reconcile(&self, t: Target, batch: &mut DeltaBatch) -> Option<i64> {
        let stores = self.svc.stores();
        let consumer = &self.opts.consumer;
        let skipped = |e: likewise_core::StoreError, what: &'static str| {
            tracing::warn!(error = %e, target_id = t.id, what, "recount skipped");
            metrics::counter!("likewise_reconcile_skipped_total").increment(1);
        };
        let drift = match stores.counters.recount_likes(consumer, t).await {
            Ok(r) => r.drift(),
            Err(e) => {
                skipped(e, "likes");
                return None;
            }
        };
        let mut repairs = vec![(CounterKey { target: t, field: CounterField::Likes }, drift)];
        if t.kind == TargetKind::Post {
            let post = PostId(t.id);
            match stores.counters.recount_comments(consumer, post).await {
                Ok(c) => repairs.push((CounterKey { target: t, field: CounterField::Comments }, c.drift())),
                Err(e) => skipped(e, "comments"),
            }
            match stores.counters.recount_replies(consumer, post).await {
                Ok(all) => repairs.extend(all.into_iter().map(|(parent, r)| {
                    (
                        CounterKey { target: Target::comment(parent.0), field: CounterField::Replies },
                        r.drift(),
                    )
                })),
                Err(e) => skipped(e, "replies"),
            }
        }
        let mut total = 0;
        for (key, d) in repairs.into_iter().filter(|(_, d)| *d != 0) {
            tracing::warn!(target_kind = ?key.target.kind, target_id = key.target.id, field = ?key.field, drift = d,
                "counter drift repaired");
            batch.add_delta(key, d);
            total += d.unsigned_abs();
        }
        metrics::counter!("likewise_reconcile_targets_total").increment(1);
        metrics::counter!("likewise_reconcile_drift_total").increment(total);
        Some(drift)
    }

    /// Run until `shutdown` flips to true, then apply what is left and return.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        // The first pass comes one window after the start, like every later one: an
        // immediate first tick would aggregate whatever the first moments wrote at an
        // arbitrary point, and a window is a promise about staleness, not a deadline to race.
        let mut tick =
            tokio::time::interval_at(tokio::time::Instant::now() + self.opts.window, self.opts.window);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_reconcile = Instant::now();
        let mut last_truncate = Instant::now();
        loop {
            let stopping = tokio::select! {
                _ = tick.tick() => false,
                _ = shutdown.changed() => true,
            } || *shutdown.borrow();

            let mut waiting = Vec::new();
            while let Ok(req) = self.requests.try_recv() {
                waiting.push(req);
            }
            let mut targets: Vec<Target> = waiting.iter().map(|r| r.target).collect();
            if last_reconcile.elapsed() >= self.opts.reconcile_every {
                targets.extend(self.hot.take_hottest());
                last_reconcile = Instant::now();
            }
            targets.sort();
            targets.dedup();
            loop {
                match self.step(&targets).await {
                    Ok(report) => {
                        for req in waiting.drain(..) {
                            let drift =
                                report.reconciled.iter().find(|(t, _)| *t == req.target).map(|(_, d)| *d);
                            let _ =
                                req.reply.send(drift.ok_or_else(|| {
                                    "the target could not be recounted now; retry".to_string()
                                }));
                        }
                        targets.clear();
                        if !report.more {
                            break;
                        }
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "aggregator step failed; retrying next window");
                        metrics::counter!("likewise_aggregator_failures_total").increment(1);
                        for req in waiting.drain(..) {
                            let _ = req.reply.send(Err(e.to_string()));
                        }
                        self.resync_offset().await;
                        break;
                    }
                }
            }
            self.report_lag().await;
            if last_truncate.elapsed() >= Duration::from_secs(60) {
                last_truncate = Instant::now();
                self.truncate().await;
            }
            if stopping {
                tracing::info!(offset = self.offset, "aggregator stopped after draining the log");
                return;
            }
        }
    }

    async fn report_lag(&self) {
        if let Ok(head) = self.log.head().await {
            metrics::gauge!("likewise_aggregator_lag_events").set(head.saturating_sub(self.offset) as f64);
            metrics::gauge!("likewise_aggregator_offset").set(self.offset as f64);
        }
    }

    async fn truncate(&self) {
        let mut upto = self.offset.saturating_sub(self.opts.retain_events);
        for other in &self.opts.hold_for {
            match self.svc.stores().counters.offset(other).await {
                Ok(o) => upto = upto.min(o),
                Err(e) => {
                    tracing::warn!(error = %e, consumer = %other, "cannot read a consumer's offset; not truncating");
                    return;
                }
            }
        }
        if upto == 0 {
            return;
        }
        match self.log.truncate(upto).await {
            Ok(n) if n > 0 => tracing::info!(removed = n, upto, "event log truncated"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "event log truncation failed"),
        }
    }
}
