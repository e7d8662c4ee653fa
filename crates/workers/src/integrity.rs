//! The integrity consumer: flags like farms and bot rings from like events
//! (`likewise_core::integrity`), applies moderators' verdicts, and keeps the exact discounts
//! of confirmed accounts' likes. Its state (flags, verdicts applied, memberships, discounts)
//! and its offset are saved as one snapshot (`SnapshotStore`) every round that changed them, so a restart never
//! folds an event in twice; the detection windows live in memory only.
//!
//! New events are folded in every 50 ms, so they come from the log's in-memory tail. A round,
//! every second: (1) read the verdicts given since the last round (from a little before, so a
//! verdict written by a node with a slower clock is not missed; one applied already is
//! skipped), enumerating a newly confirmed account's likes from the like rows; (2) scan for
//! patterns; (3) save the state with everything folded in so far, at that offset.

use likewise_core::StoreResult;
use likewise_core::ids::UserId;
use likewise_core::integrity::{Integrity, IntegrityOptions, Verdict, codec};
use likewise_core::like::{Target, TargetKind};
use likewise_core::ports::{EventLog, IntegrityStore, LikeReader, SnapshotStore};
use likewise_service::Engagement;
use likewise_service::integrity::INTEGRITY;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Verdicts are read again from this long before the newest one seen.
const VERDICT_OVERLAP_MS: u64 = 10_000;
/// Verdicts read per call.
const VERDICT_PAGE: usize = 1_000;
/// Likes of one kind enumerated at most for a confirmed account.
pub const MAX_ENUMERATED: usize = 1_000_000;

/// Integrity consumer tuning.
#[derive(Debug, Clone)]
pub struct IntegrityWorkerOptions {
    /// Detection thresholds and windows.
    pub detect: IntegrityOptions,
    /// How often a round (verdicts, scan, save) runs.
    pub every: Duration,
    /// How often new events are folded in between rounds: often enough that they are read
    /// from the log's in-memory tail rather than from storage.
    pub follow_every: Duration,
    /// Events read per log call.
    pub read_chunk: usize,
}

impl Default for IntegrityWorkerOptions {
    fn default() -> Self {
        IntegrityWorkerOptions {
            detect: IntegrityOptions::default(),
            every: Duration::from_secs(1),
            follow_every: Duration::from_millis(50),
            read_chunk: 16_384,
        }
    }
}

/// The ports the consumer uses besides its log.
#[derive(Clone)]
pub struct IntegrityPorts {
    /// Where state and offset are saved.
    pub snapshots: Arc<dyn SnapshotStore>,
    /// Moderators' verdicts.
    pub verdicts: Arc<dyn IntegrityStore>,
    /// Confirmed accounts' likes.
    pub likes: Arc<dyn LikeReader>,
}

/// The ports of the integrity consumer, from the process's stores.
pub fn ports(svc: &Engagement) -> IntegrityPorts {
    let stores = svc.stores();
    IntegrityPorts {
        snapshots: stores.snapshots.clone(),
        verdicts: stores.integrity.clone(),
        likes: stores.likes.clone(),
    }
}

/// The saved state and its offset (empty at 0 when none was saved, or it cannot be read).
pub async fn load(snapshots: &dyn SnapshotStore) -> StoreResult<(u64, Integrity)> {
    Ok(match snapshots.load_snapshot(INTEGRITY).await? {
        Some((offset, body)) => match codec::decode(&body) {
            Some(s) => (offset, s),
            None => {
                tracing::warn!("integrity snapshot unreadable; rebuilding from the log");
                (0, Integrity::default())
            }
        },
        None => (0, Integrity::default()),
    })
}

async fn liked(likes: &dyn LikeReader, user: UserId) -> StoreResult<Vec<Target>> {
    let mut out = Vec::new();
    for kind in [TargetKind::Post, TargetKind::Comment] {
        let ids = likes.liked_ids(user, kind, MAX_ENUMERATED).await?;
        out.extend(ids.into_iter().map(|id| Target { kind, id }));
    }
    Ok(out)
}

/// Apply the verdicts given since the last round.
async fn verdicts(p: &IntegrityPorts, state: &mut Integrity, now: u64) -> StoreResult<()> {
    let mut after = (state.decisions_seen_ms.saturating_sub(VERDICT_OVERLAP_MS), UserId(0));
    loop {
        let page = p.verdicts.decisions_after(after, VERDICT_PAGE).await?;
        for d in &page {
            if state.is_new(d) {
                let rows =
                    if d.verdict == Verdict::Confirm { liked(&*p.likes, d.user).await? } else { Vec::new() };
                state.decide(d, rows, now);
            }
        }
        match page.last() {
            Some(last) if page.len() == VERDICT_PAGE => after = (last.at_ms, last.user),
            _ => return Ok(()),
        }
    }
}

/// Fold in the events after `upto` (at most a round's worth), moving `upto` past them.
/// Returns how many were folded.
pub async fn fold(
    log: &dyn EventLog,
    state: &mut Integrity,
    upto: &mut u64,
    opts: &IntegrityWorkerOptions,
) -> StoreResult<usize> {
    let started = std::time::Instant::now();
    let mut n = 0;
    loop {
        let events = log.read_after(*upto, opts.read_chunk).await?;
        // One consumer for the whole log: its partition label is `all`.
        metrics::counter!("likewise_consumer_events_total", "consumer" => INTEGRITY, "partition" => "all")
            .increment(events.len() as u64);
        let _span = likewise_core::trace::consumer_span("integrity", &events);
        for e in &events {
            state.apply(&opts.detect, e);
        }
        n += events.len();
        match events.last() {
            Some(last) => *upto = last.seq,
            None => break,
        }
        // Read until the log is drained: a stream consumer hands out fewer events per call
        // than asked. A round still ends within about its period, so state is saved often.
        if n >= 1_000_000 || started.elapsed() >= opts.every {
            break;
        }
    }
    Ok(n)
}

/// Verdicts, scan, save: the state with every event up to `upto` folded in becomes the
/// snapshot at offset `upto`.
async fn checkpoint(
    log: &dyn EventLog,
    p: &IntegrityPorts,
    state: &mut Integrity,
    offset: &mut u64,
    upto: u64,
    opts: &IntegrityWorkerOptions,
    saved: &mut Option<Vec<u8>>,
) -> StoreResult<()> {
    verdicts(p, state, likewise_service::now_ms()).await?;
    let flagged = state.scan(&opts.detect, likewise_service::now_ms());
    let body = codec::encode(state);
    // Nothing new since the last save (an idle deployment): no write.
    if upto == *offset && saved.as_deref() == Some(&body[..]) {
        return Ok(());
    }
    p.snapshots.save_snapshot(INTEGRITY, upto, &body).await?;
    *saved = Some(body);
    metrics::counter!("likewise_integrity_events_total").increment(upto.saturating_sub(*offset));
    *offset = upto;
    log.committed(upto).await?;
    metrics::gauge!("likewise_integrity_flags").set(state.flag_count() as f64);
    if flagged > 0 {
        tracing::info!(flagged, "integrity: accounts flagged");
    }
    Ok(())
}

/// One round (see the module documentation). Returns the events folded in.
pub async fn round(
    log: &dyn EventLog,
    p: &IntegrityPorts,
    state: &mut Integrity,
    offset: &mut u64,
    opts: &IntegrityWorkerOptions,
) -> StoreResult<usize> {
    let mut upto = *offset;
    let n = fold(log, state, &mut upto, opts).await?;
    checkpoint(log, p, state, offset, upto, opts, &mut None).await?;
    Ok(n)
}

/// Run from `(offset, state)` (see [`load`]) until shutdown.
pub async fn run(
    log: Arc<dyn EventLog>,
    p: IntegrityPorts,
    (mut offset, mut state): (u64, Integrity),
    opts: IntegrityWorkerOptions,
    shutdown: watch::Receiver<bool>,
) {
    // Events are folded in every `follow_every` (from the log's in-memory tail while the
    // consumer keeps up); verdicts, the scan and the save run every `every`.
    let mut ticker = crate::Ticker::new(opts.follow_every.min(opts.every), shutdown);
    let mut upto = offset;
    let mut last_round = std::time::Instant::now();
    // What the last save wrote (none yet: the first round saves).
    let mut saved = None;
    while ticker.next().await {
        let step = async {
            fold(&*log, &mut state, &mut upto, &opts).await?;
            if last_round.elapsed() >= opts.every {
                last_round = std::time::Instant::now();
                checkpoint(&*log, &p, &mut state, &mut offset, upto, &opts, &mut saved).await?;
            }
            Ok::<_, likewise_core::StoreError>(())
        };
        if let Err(e) = step.await {
            tracing::warn!(error = %e, "integrity round failed; retrying");
            // The state may hold events past the saved offset: start again from the snapshot.
            match load(&*p.snapshots).await {
                Ok((o, s)) => (offset, state) = (o, s),
                Err(e) => tracing::warn!(error = %e, "reloading the integrity snapshot failed"),
            }
            upto = offset;
            saved = None;
        }
    }
}
