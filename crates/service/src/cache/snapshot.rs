//! The integrity consumer's snapshot as this node last read it ([`SnapshotReader`]): the
//! discounts of confirmed accounts' likes, applied to every displayed like count, and the
//! flags `crate::integrity` lists. Read from storage at most once a second.

use crate::ServiceResult;
use likewise_core::integrity::codec::decode_discounts;
use likewise_core::like::Target;
use likewise_core::ports::SnapshotStore;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Snapshot name (and consumer offset name) of the integrity consumer.
pub const INTEGRITY: &str = "integrity";

/// How long a node serves the snapshot it read before reading it again.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// The discounts to subtract from displayed like counts (none when discounting is off).
#[derive(Debug, Clone, Default)]
pub struct Discount(Option<Arc<HashMap<Target, u32>>>);

impl Discount {
    /// `likes` of `target` as displayed: less the confirmed accounts' likes, never below 0.
    pub fn apply(&self, target: Target, likes: i64) -> i64 {
        let d = self.0.as_ref().and_then(|m| m.get(&target)).copied().unwrap_or(0);
        (likes - i64::from(d)).max(0)
    }
}

/// A snapshot read, when, and its decoded discounts.
type Cached = (Instant, Arc<Vec<u8>>, Discount);

/// The consumer's snapshot as this node last read it.
pub struct SnapshotReader {
    snapshots: Arc<dyn SnapshotStore>,
    discount_on: bool,
    cached: Mutex<Option<Cached>>,
    /// One reload at a time: readers arriving meanwhile wait for it instead of piling up.
    reload: tokio::sync::Mutex<()>,
}

impl SnapshotReader {
    /// A reader; `discount_on` is `integrity.discount_flagged`.
    pub fn new(snapshots: Arc<dyn SnapshotStore>, discount_on: bool) -> Self {
        SnapshotReader { snapshots, discount_on, cached: Mutex::new(None), reload: Default::default() }
    }

    /// Whether confirmed accounts' likes are left out of displayed counts.
    pub fn discount_on(&self) -> bool {
        self.discount_on
    }

    fn fresh(&self) -> Option<(Arc<Vec<u8>>, Discount)> {
        self.cached
            .lock()
            .as_ref()
            .filter(|(at, _, _)| at.elapsed() < FRESH_FOR)
            .map(|(_, b, d)| (b.clone(), d.clone()))
    }

    /// The snapshot's bytes and discounts, read again when older than a second.
    pub(crate) async fn current(&self) -> ServiceResult<(Arc<Vec<u8>>, Discount)> {
        if let Some(c) = self.fresh() {
            return Ok(c);
        }
        let _one = self.reload.lock().await;
        if let Some(c) = self.fresh() {
            return Ok(c);
        }
        let body =
            Arc::new(self.snapshots.load_snapshot(INTEGRITY).await?.map(|(_, b)| b).unwrap_or_default());
        let discount = if self.discount_on {
            Discount(Some(Arc::new(decode_discounts(&body).unwrap_or_default())))
        } else {
            Discount(None)
        };
        *self.cached.lock() = Some((Instant::now(), body.clone(), discount.clone()));
        Ok((body, discount))
    }

    /// The discounts for displayed counts. Free when discounting is off; when the snapshot
    /// cannot be read, the last one read (or none) is used rather than failing the read.
    pub async fn discount(&self) -> Discount {
        if !self.discount_on {
            return Discount(None);
        }
        match self.current().await {
            Ok((_, d)) => d,
            Err(e) => {
                tracing::warn!(error = %e, "integrity snapshot unreadable; using the last discounts");
                self.cached.lock().as_ref().map(|(_, _, d)| d.clone()).unwrap_or_default()
            }
        }
    }
}
