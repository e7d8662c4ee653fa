//! The write path's own connections, driven by a runtime of its own.
//!
//! A group-commit lane's shard transaction is what every write queued behind it waits for,
//! and, with `Idempotency-Key`s, what other nodes' transactions holding the same keys wait for
//! too. On the request runtime and its pools it waited behind the very requests that waited on
//! it: each of its statements needed its connection's task polled among the request tasks,
//! twice per round trip, and each transaction needed a connection the requests' reads were
//! holding. Under a keyed retry storm beside a CPU hog a one-create batch took 8 s and a lane
//! waited 7 s for a connection while the storm's reads (each of them waiting on that commit)
//! kept the pool and the runtime busy. So the lanes check out connections of their own pools
//! (at most one per lane and shard is in use), whose tasks one thread of their own drives: a
//! statement waits for PostgreSQL and for the CPU, never for the requests.

use super::{PoolWaits, pool};
use deadpool_postgres::Pool;
use likewise_core::{StoreError, StoreResult};
use std::sync::OnceLock;

/// The write path's runtime and pools, made on first use: a store that never writes (a
/// tool, a worker reading) starts no thread and opens no connection for them.
pub(super) struct Writes {
    rt: OnceLock<Runtime>,
    /// Each shard's write pool, as the store's read pools (a list only ever grows).
    pools: parking_lot::RwLock<Vec<Pool>>,
    size: usize,
}

/// A runtime dropped without waiting: the store may be dropped on another runtime's worker,
/// where a blocking shutdown panics. Its only tasks are connections, ended with it.
struct Runtime(Option<tokio::runtime::Runtime>);

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

impl Writes {
    pub(super) fn new(size: usize) -> Writes {
        Writes { rt: OnceLock::new(), pools: parking_lot::RwLock::new(Vec::new()), size }
    }

    /// Run `f` from a non-runtime thread (a group-commit lane): connections it opens are
    /// driven by the write runtime's thread.
    pub(super) fn block_on<F: std::future::Future>(&self, f: F) -> StoreResult<F::Output> {
        let rt = match self.rt.get() {
            Some(rt) => rt,
            None => {
                let built = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name("likewise-pg-writes")
                    .enable_all()
                    .build()
                    .map_err(|e| StoreError::Engine(format!("cannot start the write runtime: {e}")))?;
                self.rt.get_or_init(|| Runtime(Some(built)))
            }
        };
        match &rt.0 {
            Some(rt) => Ok(rt.block_on(f)),
            None => Err(StoreError::Closed),
        }
    }

    /// The write pool of `shard`, opened (with those before it) from `urls` when first asked.
    pub(super) fn pool(&self, shard: usize, urls: &[String]) -> StoreResult<Pool> {
        if let Some(p) = self.pools.read().get(shard) {
            return Ok(p.clone());
        }
        let mut pools = self.pools.write();
        while pools.len() <= shard {
            let url = urls.get(pools.len()).ok_or_else(|| {
                StoreError::Engine(format!(
                    "shard {shard} is neither configured nor registered in the catalog"
                ))
            })?;
            pools.push(pool(url, self.size, PoolWaits::PRIMARY)?);
        }
        Ok(pools[shard].clone())
    }
}
