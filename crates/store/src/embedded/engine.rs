//! The embedded store as a running engine: its memory and disk figures, making it durable,
//! the clean stop, and the [`likewise_engine::Engine`] port.

use super::error::engine_err;
use super::state::EmbeddedStore;
use super::{journal_check, space};
use fjall::AbstractTree;
use likewise_core::{StoreError, StoreResult};
use std::time::Instant;

/// What the store holds in memory (gauges in `/metrics`). The block cache and the memtables
/// are bounded by configuration; the pinned filter and index blocks grow with the data on
/// disk (a few bytes per key), so RSS growth these explain is not a leak.
#[derive(Debug, Clone, Copy)]
pub struct StoreMemory {
    /// Bytes in the block cache.
    pub block_cache_bytes: u64,
    /// Its configured capacity.
    pub block_cache_capacity_bytes: u64,
    /// Bytes in memtables not yet flushed (active and sealed).
    pub write_buffer_bytes: u64,
    /// The budget of the active memtables (the configured one, or the keyspaces' caps
    /// summed if smaller); sealed ones waiting for a flush come on top.
    pub write_buffer_limit_bytes: u64,
    /// Filter (Bloom) and block-index blocks the engine keeps pinned outside the block cache
    /// (fjall's default: filters of level 0, indexes of levels 0 and 1), summed over keyspaces.
    pub pinned_bytes: u64,
    /// The like filter's bit vector (`like_filter.rs`): sized at open from the likes stored.
    pub like_filter_bytes: u64,
}

/// How long a clean stop waits for its memtables to be flushed before it leaves them to the
/// journal (`EmbeddedStore::close_durably`).
const CLOSE_FLUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl EmbeddedStore {
    /// Bytes on disk (for the benchmarks and `/metrics`).
    pub fn disk_space(&self) -> u64 {
        self.inner.db.disk_space().unwrap_or(0)
    }

    /// Bytes of each keyspace's folder on disk (tables with their index and filter blocks),
    /// by name, once every memtable is flushed (for the bytes-per-like figures and the test
    /// that bounds them). fjall's own `disk_space` counts data blocks only.
    pub fn flushed_keyspace_bytes(&self) -> StoreResult<Vec<(String, u64)>> {
        fn du(p: &std::path::Path) -> std::io::Result<u64> {
            let mut n = 0;
            for e in std::fs::read_dir(p)? {
                let e = e?;
                let m = e.metadata()?;
                n += if m.is_dir() { du(&e.path())? } else { m.len() };
            }
            Ok(n)
        }
        let mut out = Vec::with_capacity(self.inner.all.len());
        for k in &self.inner.all {
            k.rotate_memtable_and_wait().map_err(engine_err)?;
            out.push((k.name().to_string(), du(k.path()).map_err(engine_err)?));
        }
        Ok(out)
    }

    /// Memory held by the block cache and the memtables.
    pub fn memory(&self) -> StoreMemory {
        let db = &self.inner.db;
        StoreMemory {
            block_cache_bytes: db.cache_size(),
            block_cache_capacity_bytes: db.cache_capacity(),
            write_buffer_bytes: db.write_buffer_size(),
            write_buffer_limit_bytes: self.inner.write_buffer_limit,
            pinned_bytes: self
                .inner
                .all
                .iter()
                .map(|k| (k.tree.pinned_filter_size() + k.tree.pinned_block_index_size()) as u64)
                .sum(),
            like_filter_bytes: self.inner.like_filter.bytes(),
        }
    }

    /// The in-memory tail of the event log: events held, capacity, bytes (for `/metrics`).
    pub fn event_tail_usage(&self) -> (usize, usize, usize) {
        self.inner.tail.lock().usage()
    }

    /// Wait until the like filter holds every stored like key, so the write path skips the
    /// existence reads it rules out (`like_filter.rs`; tests and benchmarks). False if
    /// `within` passed first; the store answers correctly either way.
    pub fn wait_like_filter(&self, within: std::time::Duration) -> bool {
        let until = Instant::now() + within;
        while !self.inner.like_filter.is_ready() {
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        true
    }

    /// Make everything written so far durable.
    pub fn persist(&self) -> StoreResult<()> {
        self.inner.persist()
    }

    /// [`persist`](Self::persist) from async code: the fsync runs on the blocking pool, so a
    /// slow disk stalls only this caller, never a runtime worker and the requests queued on it.
    pub async fn persist_async(&self) -> StoreResult<()> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || inner.persist())
            .await
            .map_err(|e| StoreError::Engine(format!("fsync task failed: {e}")))?
    }

    /// The clean stop (the write path and every consumer stopped): flush every keyspace's
    /// memtable to tables and record it durably, so the journal holds nothing the tables lack
    /// and losing or damaging it loses nothing (`journal_check.rs`).
    pub fn close_durably(&self) -> StoreResult<()> {
        let inner = &self.inner;
        inner.persist()?;
        let upto = journal_check::last_seqno(&inner.db);
        // Bounded: a flush that never completes (fjall's flush worker gone or stuck) must not
        // hang the stop. Then the tables are not marked complete and the journal, fsynced
        // above, still holds everything: the next start replays it, as after a crash.
        let keyspaces = inner.all.clone();
        let (done, flushed) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("likewise-close-flush".into())
            .spawn(move || {
                let r = keyspaces.iter().try_for_each(|k| k.rotate_memtable_and_wait().map(drop));
                let _ = done.send(r);
            })
            .map_err(|e| StoreError::Engine(format!("cannot start the closing flush: {e}")))?;
        match flushed.recv_timeout(CLOSE_FLUSH_WAIT) {
            Ok(r) => r.map_err(engine_err)?,
            Err(_) => {
                tracing::warn!(
                    waited_s = CLOSE_FLUSH_WAIT.as_secs(),
                    "memtables were not flushed at the stop; the journal keeps their data for the next start"
                );
                return Ok(());
            }
        }
        inner.db.persist(fjall::PersistMode::SyncAll).map_err(engine_err)?;
        inner.progress.clean(upto.max(journal_check::last_seqno(&inner.db))).map_err(engine_err)?;
        tracing::info!("every memtable is flushed to tables: the journal holds nothing they lack");
        Ok(())
    }
}

#[async_trait::async_trait]
impl likewise_engine::Engine for EmbeddedStore {
    fn name(&self) -> &'static str {
        "embedded"
    }

    fn persist(&self) -> StoreResult<()> {
        self.close_durably()
    }

    fn publish_gauges(&self) {
        let (entries, capacity, bytes) = self.event_tail_usage();
        metrics::gauge!("likewise_cache_entries", "cache" => "event_tail").set(entries as f64);
        metrics::gauge!("likewise_cache_capacity", "cache" => "event_tail").set(capacity as f64);
        metrics::gauge!("likewise_cache_bytes", "cache" => "event_tail").set(bytes as f64);
        metrics::gauge!("likewise_store_disk_bytes").set(self.disk_space() as f64);
        if let Some(free) = space::free_bytes(&self.inner.journal_sync.dir) {
            metrics::gauge!("likewise_store_disk_free_bytes").set(free as f64);
        }
        let m = self.memory();
        metrics::gauge!("likewise_store_block_cache_bytes").set(m.block_cache_bytes as f64);
        metrics::gauge!("likewise_store_block_cache_capacity_bytes").set(m.block_cache_capacity_bytes as f64);
        metrics::gauge!("likewise_store_write_buffer_bytes").set(m.write_buffer_bytes as f64);
        metrics::gauge!("likewise_store_write_buffer_limit_bytes").set(m.write_buffer_limit_bytes as f64);
        metrics::gauge!("likewise_store_pinned_bytes").set(m.pinned_bytes as f64);
        metrics::gauge!("likewise_store_like_filter_bytes").set(m.like_filter_bytes as f64);
    }
}
