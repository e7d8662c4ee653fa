//! Moving buckets between shards while the service runs (online resharding).
//!
//! A move takes a group of buckets from the shard that holds them (the source) to another
//! (the target), in steps a crash can stop at any point, journaled in `bucket_moves` on
//! shard 0 so that [`PgStore::resume_moves`] finishes what was started:
//!
//! 1. **Journal** the move (`copying`).
//! 2. **Fence triggers** on the source (`fence`): from now on a write of a row of a bucket
//!    takes that bucket's fence lock (shared) and is refused once the bucket is marked.
//! 3. **Sequences**: the target's are set past the source's, so the IDs, page numbers and
//!    outbox positions it hands out after the move never repeat or go back.
//! 4. **Logging**: the buckets are listed in `bucket_fences` as being copied: they take
//!    writes, and the source's triggers log the key of every row those change
//!    (`bucket_changes`). The mover then takes the buckets' fence locks once, so that every
//!    writer that got in before the logging is done.
//! 5. **Bulk copy**: every user-written table's rows of the buckets (`tables`) replace
//!    whatever the target held of them, by binary `COPY` from a snapshot of the source, with
//!    no fence; rows are counted on both sides.
//! 6. **Fence**: once the source's aggregator has worked off its backlog (the buckets still
//!    take writes meanwhile), the listing turns into a fence (new writes of the buckets are refused at
//!    once, every other bucket writes on), then the mover takes the fence locks exclusively:
//!    every writer that got in before is done.
//! 7. **Drain and catch-up**, in one target transaction: the rows whose keys were logged are
//!    replaced by the source's (or deleted) while the move waits, on a connection of its
//!    own, until the source's aggregator has applied the buckets' last events (the derived
//!    tables, `counters` and `comment_ranks`, take its writes until the buckets have moved);
//!    then the derived tables are copied whole, and the tables this changed are counted on
//!    both sides.
//! 8. **Mark** the buckets moved on the source (`bucket_fences`): from here on the source
//!    refuses their rows for good, whatever a writer believes.
//! 9. **Switch** the catalog (the buckets' shard, its version; the journal says `switched`)
//!    and let go of the fence. Writes refused with SQLSTATE `LW001` meanwhile are retried by
//!    the write path, which reads the placement again (`write.rs`); every node reads a new
//!    catalog version within [`WATCH_INTERVAL`].
//! 10. **Drop** the buckets' rows from the source after a grace period, in which nodes that
//!     have not yet read the new catalog still find them (stale by at most the interval).
//!
//! The write fence lasts from step 6 to step 9: the drain, the rows written during the bulk
//! copy, and the derived tables, not the buckets' whole data.

pub(crate) mod fence;
mod tables;

#[cfg(test)]
mod tests;

use super::{PgStore, pg_err, u};
pub(crate) use fence::MOVED;
use futures::{SinkExt, StreamExt};
use likewise_core::{StoreError, StoreResult};
use std::time::{Duration, Instant};
use tables::{Fence, SEQUENCES, TABLES};

/// How often each node checks the catalog's version ([`PgStore::watch_placement`]).
pub const WATCH_INTERVAL: Duration = Duration::from_millis(500);

/// How many times `likewise shards rebalance` resumes a move that failed before it gives up
/// ([`PgStore::move_buckets_resuming`]).
pub const MOVE_RETRIES: usize = 3;

/// The buckets the journal (`bucket_moves`) holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JournaledMoves {
    /// In a move now: not switched yet (a move running, or interrupted and to be resumed).
    pub moving: i64,
    /// Switched to their new shard; their rows are still on the old one until the grace
    /// after the run's last move (or the next run) drops them.
    pub switched: i64,
}

/// How a move goes.
#[derive(Debug, Clone)]
pub struct MoveOptions {
    /// Wait for the source's aggregator (consumer `counters@<shard>`) to apply every event
    /// in the source's outbox before copying the counters; off only where no aggregator runs
    /// (tests of the data path alone).
    pub drain: bool,
    /// How long to wait for that consumer before giving the fence up (the move can be
    /// resumed later).
    pub drain_timeout: Duration,
    /// How long the source keeps the moved rows for nodes that still read the old catalog.
    pub grace: Duration,
    /// Leave the source's rows for [`PgStore::resume_moves`] to drop (after one grace period
    /// for many moves) instead of waiting the grace out after this one.
    pub defer_drop: bool,
    /// Stop after this step, as a crash there would (for tests of resuming).
    pub stop_after: Option<Step>,
    /// Wait this long between the bulk copy and the fence (tests: writes to catch up).
    pub pause_after_bulk: Duration,
}

impl Default for MoveOptions {
    fn default() -> Self {
        MoveOptions {
            drain: true,
            drain_timeout: Duration::from_secs(30),
            grace: WATCH_INTERVAL * 4,
            defer_drop: false,
            stop_after: None,
            pause_after_bulk: Duration::ZERO,
        }
    }
}

/// The steps a move can be stopped after (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The journal holds the move.
    Journaled,
    /// The rows are on the target as of a snapshot; the source takes and logs writes.
    BulkCopied,
    /// The rows are on the target, the fence still held.
    Copied,
    /// The source refuses the buckets' rows; the catalog still names it.
    Marked,
    /// The catalog names the target; the source still holds the rows.
    Switched,
}

/// What a move did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveReport {
    /// The buckets moved.
    pub buckets: Vec<u32>,
    /// From and to.
    pub source: usize,
    /// The shard that holds them now.
    pub target: usize,
    /// Rows copied, over every table.
    pub rows: u64,
    /// Of those, the rows copied under the fence: the catch-up and the derived tables.
    pub under_fence: u64,
    /// Of those, the catch-up: rows written while the bulk copy ran.
    pub caught_up: u64,
    /// How long writes of these buckets waited (the fence).
    pub fenced_for: Duration,
}

/// Set first in each of the mover's transactions. Its statements pass the fence triggers
/// (`lw.mover`). The service's connections end a transaction idle for 30 s (`pool` in
/// `postgres/mod.rs`), but a mover's transaction waits, idle, while another shard works: the
/// bulk snapshot while the target deletes and counts, the target's copy while the source
/// scans and counts, the fence while the aggregator drains; on a large or busy shard any of
/// them takes longer, and ending one would abort the move. So the mover's transactions (and
/// no API node's) are exempt; what that bound guards against, a session whose client was cut
/// off holding its locks (the fence's bucket locks, which a resume needs), the server finds
/// by TCP keepalive probes instead, about a minute after the client went silent.
const MOVER_TX: &str = "SET LOCAL lw.mover = 'on'; SET LOCAL idle_in_transaction_session_timeout = 0;
     SET LOCAL tcp_keepalives_idle = 30; SET LOCAL tcp_keepalives_interval = 10;
     SET LOCAL tcp_keepalives_count = 3";

fn engine(msg: String) -> StoreError {
    StoreError::Engine(msg)
}

/// `'{1,2,3}'::integer[]`, for statements that take no parameters (`COPY`).
fn int_array(buckets: &[u32]) -> String {
    let list: Vec<String> = buckets.iter().map(u32::to_string).collect();
    format!("'{{{}}}'::integer[]", list.join(","))
}

/// The drain under a fence, running beside the catch-up; ended if the move gives up first.
struct Drained(tokio::task::JoinHandle<StoreResult<Duration>>);

impl Drained {
    /// When it ended (since the fence began), once it has.
    async fn wait(mut self) -> StoreResult<Duration> {
        match (&mut self.0).await {
            Ok(r) => r,
            Err(e) => Err(engine(format!("the drain under the fence failed: {e}"))),
        }
    }
}

impl Drop for Drained {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The first column of each of `sqls` (counts), every statement sent at once on `c`.
async fn count_all(c: &deadpool_postgres::Transaction<'_>, sqls: &[&str]) -> StoreResult<Vec<i64>> {
    futures::future::join_all(sqls.iter().map(|sql| c.query_one(*sql, &[])))
        .await
        .into_iter()
        .map(|r| r.map(|row| row.get::<_, i64>(0)).map_err(pg_err))
        .collect()
}

/// The two copies of a move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// From a snapshot, with no fence: the user-written tables.
    Bulk,
    /// Under the fence: what changed since, and the derived tables.
    CatchUp,
}

/// Take the buckets' fence locks exclusively (waiting for their writers), as the mover:
/// the transaction that holds them.
async fn lock_buckets<'a>(
    src: &'a mut deadpool_postgres::Object,
    b: &[i32],
) -> StoreResult<deadpool_postgres::Transaction<'a>> {
    let tx = src.transaction().await.map_err(pg_err)?;
    tx.batch_execute(&format!("{MOVER_TX}; SET LOCAL lock_timeout = '1s'")).await.map_err(pg_err)?;
    let mut attempt = 0;
    loop {
        attempt += 1;
        // A failed try rolls back to here (the locks it took with it) and tries again.
        tx.batch_execute("SAVEPOINT lw_lock").await.map_err(pg_err)?;
        let took = tx
            .execute(
                "SELECT pg_advisory_xact_lock($1, b) FROM unnest($2::integer[]) AS b ORDER BY b",
                &[&fence::LOCK_CLASS, &b],
            )
            .await;
        match took {
            Ok(_) => return Ok(tx),
            Err(e)
                if attempt < 60
                    && (super::tx::retryable(&e)
                        || e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE)) =>
            {
                tx.batch_execute("ROLLBACK TO SAVEPOINT lw_lock").await.map_err(pg_err)?;
                metrics::counter!("likewise_bucket_move_fence_retries_total").increment(1);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(pg_err(e)),
        }
    }
}

impl PgStore {
    /// Move `buckets` (all on one shard now) to shard `target`; see the module docs.
    pub async fn move_buckets(
        &self,
        buckets: &[u32],
        target: usize,
        opts: &MoveOptions,
    ) -> StoreResult<MoveReport> {
        let mut buckets = buckets.to_vec();
        buckets.sort_unstable();
        buckets.dedup();
        let p = self.load_placement().await?;
        if !p.has_catalog() {
            return Err(engine("no placement catalog: run `likewise migrate`".into()));
        }
        if target >= self.shard_count() {
            return Err(engine(format!("shard {target} is not one of the {} shards", self.shard_count())));
        }
        let Some(&first) = buckets.first() else {
            return Err(engine("no bucket to move".into()));
        };
        if buckets.iter().any(|b| *b >= p.buckets()) {
            return Err(engine(format!("buckets go from 0 to {}", p.buckets() - 1)));
        }
        let source = p.shards_of_buckets()[first as usize] as usize;
        if let Some(b) = buckets.iter().find(|b| p.shards_of_buckets()[**b as usize] as usize != source) {
            return Err(engine(format!("bucket {b} is not on shard {source} like bucket {first}")));
        }
        if source == target {
            return Err(engine(format!("the buckets are on shard {target} already")));
        }
        self.journal(&buckets, source, target).await?;
        if opts.stop_after == Some(Step::Journaled) {
            return Err(engine("stopped after journaling (test)".into()));
        }
        self.copy_and_switch(&buckets, source, target, opts).await
    }

    /// Finish every move the journal holds (after a crash or a stopped run).
    pub async fn resume_moves(&self, opts: &MoveOptions) -> StoreResult<Vec<MoveReport>> {
        let c0 = self.conn(0).await?;
        let rows = c0
            .query(
                "SELECT bucket, source, target, phase FROM bucket_moves ORDER BY source, target, bucket",
                &[],
            )
            .await
            .map_err(pg_err)?;
        drop(c0);
        let mut groups: Vec<((usize, usize, String), Vec<u32>)> = Vec::new();
        for r in rows {
            let key = (r.get::<_, i32>(1) as usize, r.get::<_, i32>(2) as usize, r.get::<_, String>(3));
            match groups.last_mut() {
                Some((k, v)) if *k == key => v.push(r.get::<_, i32>(0) as u32),
                _ => groups.push((key, vec![r.get::<_, i32>(0) as u32])),
            }
        }
        let mut out = Vec::new();
        let mut dropping_waited = false;
        for ((source, target, phase), buckets) in groups {
            if phase == "switched" {
                self.load_placement().await?;
                if !dropping_waited {
                    // Switched moments ago, perhaps: nodes may still read the source.
                    tokio::time::sleep(opts.grace).await;
                    dropping_waited = true;
                }
                self.drop_moved(&buckets, source).await?;
                out.push(MoveReport {
                    buckets,
                    source,
                    target,
                    rows: 0,
                    under_fence: 0,
                    caught_up: 0,
                    fenced_for: Duration::ZERO,
                });
            } else {
                out.push(self.copy_and_switch(&buckets, source, target, opts).await?);
            }
        }
        Ok(out)
    }

    /// Steps 1: the journal on shard 0.
    async fn journal(&self, buckets: &[u32], source: usize, target: usize) -> StoreResult<()> {
        let c0 = self.conn(0).await?;
        let b: Vec<i32> = buckets.iter().map(|b| *b as i32).collect();
        let clash: Option<i32> = c0
            .query_opt(
                "SELECT bucket FROM bucket_moves WHERE bucket = ANY($1) AND (source <> $2 OR target <> $3) LIMIT 1",
                &[&b, &(source as i32), &(target as i32)],
            )
            .await
            .map_err(pg_err)?
            .map(|r| r.get(0));
        if let Some(bucket) = clash {
            return Err(engine(format!("bucket {bucket} is in another move: resume it first")));
        }
        c0.execute(
            "INSERT INTO bucket_moves (bucket, source, target, phase)
             SELECT b, $2, $3, 'copying' FROM unnest($1::integer[]) AS b ON CONFLICT (bucket) DO NOTHING",
            &[&b, &(source as i32), &(target as i32)],
        )
        .await
        .map_err(pg_err)?;
        Ok(())
    }

    /// Steps 2-9.
    async fn copy_and_switch(
        &self,
        buckets: &[u32],
        source: usize,
        target: usize,
        opts: &MoveOptions,
    ) -> StoreResult<MoveReport> {
        let p = self.placement();
        // 2. The rules every shard's SQL tells buckets by, and the source's fence triggers
        //    (installing one waits for the transactions writing its table).
        for shard in [source, target] {
            let legacy = p.legacy();
            self.conn(shard)
                .await?
                .execute(
                    "INSERT INTO bucket_rules (buckets, legacy_comment_max, legacy_item_max) VALUES ($1, $2, $3)
                     ON CONFLICT (only_row) DO NOTHING",
                    &[&(p.buckets() as i32), &super::i(legacy.comment_max), &super::i(legacy.item_max)],
                )
                .await
                .map_err(pg_err)?;
        }
        // The columns that identify each table's rows (the catch-up replaces rows by them).
        let keys = fence::install(&*self.conn(source).await?).await.map_err(pg_err)?;
        // 3. The target's sequences past the source's (again under the fence: the buckets
        //    take writes while they are copied).
        let mut src = self.conn(source).await?;
        self.advance_sequences(&src, target).await?;
        let b: Vec<i32> = buckets.iter().map(|b| *b as i32).collect();
        // 4. Logging: the buckets keep taking writes, and the source logs the key of every
        //    row they change; then the writers that got in before the logging are waited
        //    for, so the snapshot below holds all they wrote. A bucket marked moved by an
        //    interrupted run stays so.
        src.execute(
            "INSERT INTO bucket_fences (bucket, target, moved, logging) SELECT b, $2, false, true
             FROM unnest($1::integer[]) AS b
             ON CONFLICT (bucket) DO UPDATE SET target = EXCLUDED.target, logging = NOT bucket_fences.moved",
            &[&b, &(target as i32)],
        )
        .await
        .map_err(pg_err)?;
        lock_buckets(&mut src, &b).await?.commit().await.map_err(pg_err)?;
        // 5. The bulk copy, from a snapshot, with no fence.
        let bulk = {
            let snap = src
                .build_transaction()
                .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()
                .await
                .map_err(pg_err)?;
            let copied = match snap.batch_execute(MOVER_TX).await {
                Ok(()) => self.copy(&snap, buckets, target, Pass::Bulk, &keys).await,
                Err(e) => Err(pg_err(e)),
            };
            drop(snap);
            match copied {
                Ok((rows, _)) => rows,
                Err(e) => {
                    self.release(source, buckets, "logging").await;
                    return Err(e);
                }
            }
        };
        if opts.stop_after == Some(Step::BulkCopied) {
            return Err(engine("stopped after the bulk copy (test)".into()));
        }
        tokio::time::sleep(opts.pause_after_bulk).await;
        let consumer =
            likewise_core::ports::cluster::shard_consumer(likewise_core::counter::COUNTERS_CONSUMER, source);
        // The aggregator's backlog is worked off before the fence, while the buckets still take
        // writes: under a storm it runs seconds behind, and draining all of it under the fence
        // held the buckets' writes that long. The drain under the fence then waits only for
        // the events of the last moments.
        // Twice: what the storm wrote while the first drain worked is what the fence would
        // wait for; after a second one, only the events of its own moments are left.
        for _ in 0..2 {
            if opts.drain
                && let Err(e) = self.drain(&src, source, &consumer, opts.drain_timeout).await
            {
                self.release(source, buckets, "logging").await;
                return Err(e);
            }
        }
        // 6. The fence: new writes of these buckets are refused (the logging ends, committed),
        //    then the writers that got past it before are waited for (their locks). A writer
        //    holding two of the buckets can close a cycle with the mover (it takes them in row
        //    order, the mover in bucket order); the server then aborts one of the two, and
        //    either runs again.
        self.conn(source)
            .await?
            .execute("UPDATE bucket_fences SET logging = false WHERE bucket = ANY($1)", &[&b])
            .await
            .map_err(pg_err)?;
        // Writes of the buckets are refused from here on: the hold counts from now.
        let fenced_at = Instant::now();
        let fence_tx = lock_buckets(&mut src, &b).await?;
        let locked = fenced_at.elapsed();
        // 7. The source's counters hold every event of these buckets: waited for on a
        //    connection of its own (every writer of the buckets has committed: the locks),
        //    while the catch-up copies the user-written tables, which do not depend on it.
        let drained = opts.drain.then(|| {
            let (store, consumer, timeout) = (self.clone(), consumer.clone(), opts.drain_timeout);
            Drained(tokio::spawn(async move {
                let c = store.conn(source).await?;
                store.drain(&c, source, &consumer, timeout).await?;
                Ok(fenced_at.elapsed())
            }))
        });
        if let Err(e) = self.advance_sequences(&fence_tx, target).await {
            return Err(self.unfence(fence_tx, source, buckets, e).await);
        }
        // 7. Then the catch-up: the rows changed since the snapshot, and the derived tables
        //    whole once drained; then every table is counted on both sides.
        let copied = self.copy_caught_up(&fence_tx, buckets, target, &keys, drained).await;
        let (under_fence, caught_up, drained) = match copied {
            Ok(copied) => copied,
            Err(e) => return Err(self.unfence(fence_tx, source, buckets, e).await),
        };
        let rows = bulk + under_fence;
        fence_tx.execute("DELETE FROM bucket_changes WHERE bucket = ANY($1)", &[&b]).await.map_err(pg_err)?;
        let copied = fenced_at.elapsed();
        if opts.stop_after == Some(Step::Copied) {
            return Err(engine("stopped after copying (test)".into()));
        }
        // 8. The source refuses these buckets from now on (committed apart from the fence,
        //    which stays held).
        self.conn(source)
            .await?
            .execute(
                "INSERT INTO bucket_fences (bucket, target, moved) SELECT b, $2, true FROM unnest($1::integer[]) AS b
                 ON CONFLICT (bucket) DO UPDATE SET target = EXCLUDED.target, moved = true",
                &[&b, &(target as i32)],
            )
            .await
            .map_err(pg_err)?;
        if opts.stop_after == Some(Step::Marked) {
            return Err(engine("stopped after marking (test)".into()));
        }
        // 9. Switch the catalog, then let the writers go.
        let mut c0 = self.conn(0).await?;
        let tx0 = c0.transaction().await.map_err(pg_err)?;
        tx0.execute("UPDATE placement SET shard = $2 WHERE bucket = ANY($1)", &[&b, &(target as i32)])
            .await
            .map_err(pg_err)?;
        tx0.execute("UPDATE placement_catalog SET version = version + 1", &[]).await.map_err(pg_err)?;
        tx0.execute(
            "UPDATE bucket_moves SET phase = 'switched', updated_at = now() WHERE bucket = ANY($1)",
            &[&b],
        )
        .await
        .map_err(pg_err)?;
        tx0.commit().await.map_err(pg_err)?;
        fence_tx.commit().await.map_err(pg_err)?;
        let fenced_for = fenced_at.elapsed();
        // Where a fence's time went (ms since it began), for telling a slow lock, drain,
        // catch-up or switch apart.
        tracing::debug!(
            source,
            target,
            buckets = buckets.len(),
            under_fence,
            locked_ms = locked.as_millis() as u64,
            drained_ms = drained.map(|d| d.as_millis() as u64),
            copied_ms = copied.as_millis() as u64,
            released_ms = fenced_for.as_millis() as u64,
            "bucket move fence"
        );
        self.load_placement().await?;
        metrics::counter!("likewise_buckets_moved_total").increment(buckets.len() as u64);
        metrics::histogram!("likewise_bucket_move_fence_seconds").record(fenced_for.as_secs_f64());
        if opts.stop_after == Some(Step::Switched) {
            return Err(engine("stopped after switching (test)".into()));
        }
        // 10. Drop from the source once every node reads the new catalog.
        if !opts.defer_drop {
            tokio::time::sleep(opts.grace).await;
            self.drop_moved(buckets, source).await?;
        }
        Ok(MoveReport { buckets: buckets.to_vec(), source, target, rows, under_fence, caught_up, fenced_for })
    }

    /// Give a fence up after `e`: the buckets take writes again (on the source, where the
    /// catalog still places them) until the move is resumed. Returns `e`.
    async fn unfence(
        &self,
        fence_tx: deadpool_postgres::Transaction<'_>,
        source: usize,
        buckets: &[u32],
        e: StoreError,
    ) -> StoreError {
        drop(fence_tx);
        self.release(source, buckets, "NOT moved").await;
        e
    }

    /// After a failure, drop the source's listings of `buckets` that `still` selects (`NOT
    /// moved`: a fence; `logging`: a copy in progress) and their change log.
    async fn release(&self, source: usize, buckets: &[u32], still: &str) {
        let list = int_array(buckets);
        let released = async {
            self.conn(source)
                .await?
                .batch_execute(&format!(
                    "DELETE FROM bucket_fences WHERE bucket = ANY({list}) AND {still};
                     DELETE FROM bucket_changes WHERE bucket = ANY({list})"
                ))
                .await
                .map_err(pg_err)
        };
        if let Err(again) = released.await {
            tracing::error!(error = %again, "releasing a failed move's buckets failed: resume the move");
        }
    }

    /// Step 7: wait until `consumer` (the source's aggregator) has applied the source's outbox
    /// up to its last row now (under the fence, no row of a fenced bucket can follow it).
    ///
    /// With stream positions, "up to its last row" is not "up to the last row's stream
    /// position": the relay publishes rows as their transactions commit, and a transaction
    /// that drew a lower `seq` but committed after a later row was relayed is published after
    /// it. Such a row may be the fenced buckets' last write (the fence waits for exactly those
    /// writers to commit); taking the last row's position let the move copy the counters
    /// without its events and the source's aggregator apply them after the copy, so the
    /// post's count on its new shard stayed short of its rows. So the drain waits until every
    /// row up to the last is relayed, and then for the highest position among them.
    async fn drain(
        &self,
        fence_tx: &impl deadpool_postgres::GenericClient,
        source: usize,
        consumer: &str,
        timeout: Duration,
    ) -> StoreResult<()> {
        let last: i64 =
            fence_tx.query_one("SELECT coalesce(max(seq), 0) FROM outbox", &[]).await.map_err(pg_err)?.get(0);
        let until = Instant::now() + timeout;
        let home = self.offset_shard(consumer)?;
        // Offsets count stream sequences in a deployment (the relay records each outbox
        // row's), outbox sequences when one shard is read directly.
        let mut want: Option<i64> = (!self.stream_positions()).then_some(last);
        loop {
            if want.is_none() {
                want = self.relayed_through(fence_tx, last).await?;
            }
            let at: i64 = self
                .conn(home)
                .await?
                .query_opt("SELECT upto FROM consumer_offsets WHERE consumer = $1", &[&consumer])
                .await
                .map_err(pg_err)?
                .map_or(0, |r| r.get(0));
            if last == 0 || want.is_some_and(|w| u(at) >= u(w)) {
                return Ok(());
            }
            if Instant::now() > until {
                return Err(engine(format!(
                    "{consumer} did not apply shard {source}'s outbox within {timeout:?}: the move gave its \
                     fence up and can be resumed (`likewise shards rebalance`)"
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The highest stream position of the source's outbox rows up to `seq = last`, once every
    /// one of them is relayed (`None` before). Read per partition through `outbox_by_part`
    /// (under a storm the outbox keeps minutes of rows).
    async fn relayed_through(
        &self,
        src: &impl deadpool_postgres::GenericClient,
        last: i64,
    ) -> StoreResult<Option<i64>> {
        let waiting: bool = src
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM outbox WHERE stream_seq IS NULL AND seq <= $1)",
                &[&last],
            )
            .await
            .map_err(pg_err)?
            .get(0);
        if waiting {
            return Ok(None);
        }
        let r = src
            .query_one(
                "SELECT coalesce(max(x.s), 0) FROM generate_series(0, $2::integer - 1) AS p,
                 LATERAL (SELECT stream_seq AS s FROM outbox
                          WHERE part = p AND stream_seq IS NOT NULL AND seq <= $1
                          ORDER BY stream_seq DESC LIMIT 1) x",
                &[&last, &(crate::stream::PARTITIONS as i32)],
            )
            .await
            .map_err(pg_err)?;
        Ok(Some(r.get(0)))
    }

    /// Set the target's sequences past the source's (read through `src`): the IDs, page
    /// numbers and outbox positions the target hands out after the move are above every one
    /// the moved rows hold.
    async fn advance_sequences(
        &self,
        src: &impl deadpool_postgres::GenericClient,
        target: usize,
    ) -> StoreResult<()> {
        let tgt = self.conn(target).await?;
        for seq in SEQUENCES {
            let v: i64 =
                src.query_one(&format!("SELECT last_value FROM {seq}"), &[]).await.map_err(pg_err)?.get(0);
            tgt.execute(
                &format!("SELECT setval('{seq}', GREATEST((SELECT last_value FROM {seq}), $1))"),
                &[&v],
            )
            .await
            .map_err(pg_err)?;
        }
        Ok(())
    }

    /// Steps 5 and 7: replace the target's rows of `buckets` with the source's, in one target
    /// transaction: in the bulk pass every user-written table whole (from a snapshot); in the
    /// catch-up the rows whose keys the source logged since, and the derived tables whole.
    /// Each table the pass touches is then counted on both sides.
    async fn copy(
        &self,
        source_tx: &deadpool_postgres::Transaction<'_>,
        buckets: &[u32],
        target: usize,
        pass: Pass,
        keys: &[fence::RowKey],
    ) -> StoreResult<(u64, u64)> {
        let (total, caught, _) = self.copy_until(source_tx, buckets, target, pass, keys, None).await?;
        Ok((total, caught))
    }

    /// The catch-up pass, its derived tables copied once `drained` (the drain under the
    /// fence) is done. Returns the rows copied, those of the catch-up, and when the drain
    /// ended (since the fence began).
    async fn copy_caught_up(
        &self,
        source_tx: &deadpool_postgres::Transaction<'_>,
        buckets: &[u32],
        target: usize,
        keys: &[fence::RowKey],
        drained: Option<Drained>,
    ) -> StoreResult<(u64, u64, Option<Duration>)> {
        self.copy_until(source_tx, buckets, target, Pass::CatchUp, keys, drained).await
    }

    async fn copy_until(
        &self,
        source_tx: &deadpool_postgres::Transaction<'_>,
        buckets: &[u32],
        target: usize,
        pass: Pass,
        keys: &[fence::RowKey],
        mut drained: Option<Drained>,
    ) -> StoreResult<(u64, u64, Option<Duration>)> {
        let mut drained_at = None;
        let list = int_array(buckets);
        let mut tc = self.conn(target).await?;
        let ttx = tc.transaction().await.map_err(pg_err)?;
        ttx.batch_execute(MOVER_TX).await.map_err(pg_err)?;
        let (mut total, mut caught) = (0u64, 0u64);
        // The catch-up's logged keys, every table's in one read.
        let mut changes: std::collections::HashMap<String, Vec<String>> = std::collections::HashMap::new();
        if pass == Pass::CatchUp {
            for r in source_tx
                .query(&format!("SELECT tbl, key::text FROM bucket_changes WHERE bucket = ANY({list})"), &[])
                .await
                .map_err(pg_err)?
            {
                changes.entry(r.get(0)).or_default().push(r.get(1));
            }
        }
        // Every table's columns, in one read, by name: the two shards may hold a table in
        // different column orders (migration 26 rewrites a populated shard's `likes` later
        // than it creates an empty one's).
        let names: Vec<&str> = TABLES.iter().map(|t| t.name).collect();
        let columns_of: std::collections::HashMap<String, Vec<String>> = ttx
            .query(
                "SELECT c.relname::text, array_agg(quote_ident(a.attname::text) ORDER BY a.attnum)
                 FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
                 WHERE c.oid = ANY($1::text[]::regclass[]) AND a.attnum > 0 AND NOT a.attisdropped
                 GROUP BY c.relname",
                &[&names],
            )
            .await
            .map_err(pg_err)?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        for (t, key) in TABLES.iter().zip(keys) {
            // Nothing of this table in this pass: not even its columns are read (under the
            // fence, a round trip per table held the buckets' writes that much longer).
            let skip = match (pass, t.fence) {
                (Pass::Bulk, Fence::Moved) => true,
                (Pass::CatchUp, Fence::Moving) => !changes.contains_key(t.name),
                _ => false,
            };
            if skip {
                continue;
            }
            if t.fence == Fence::Moved
                && let Some(d) = drained.take()
            {
                drained_at = Some(d.wait().await?);
            }
            let filter = format!("{} = ANY({list})", t.bucket);
            let columns = columns_of
                .get(t.name)
                .ok_or_else(|| engine(format!("table {} not found on shard {target}", t.name)))?;
            let of_r = columns.iter().map(|c| format!("r.{c}")).collect::<Vec<_>>().join(", ");
            let select = match (pass, t.fence) {
                (Pass::Bulk, Fence::Moved) => continue,
                (Pass::Bulk, Fence::Moving) | (Pass::CatchUp, Fence::Moved) => {
                    ttx.execute(&format!("DELETE FROM {} r WHERE {filter}", t.name), &[])
                        .await
                        .map_err(pg_err)?;
                    format!("SELECT {of_r} FROM {} r WHERE {filter}", t.name)
                }
                (Pass::CatchUp, Fence::Moving) => {
                    let Some(changed) = changes.get(t.name) else {
                        continue;
                    };
                    // A primary key's columns are never null: `=` lets the rows be found
                    // through its index, where `IS NOT DISTINCT FROM` scans the whole table
                    // under the fence.
                    let same = key
                        .columns
                        .iter()
                        .map(|c| match key.primary {
                            true => format!("r.\"{c}\" = k.\"{c}\""),
                            false => format!("r.\"{c}\" IS NOT DISTINCT FROM k.\"{c}\""),
                        })
                        .collect::<Vec<_>>()
                        .join(" AND ");
                    ttx.execute(
                        &format!(
                            "DELETE FROM {name} r USING (SELECT (jsonb_populate_record(null::{name}, k::jsonb)).*
                             FROM unnest($1::text[]) AS k) k WHERE {same}",
                            name = t.name
                        ),
                        &[changed],
                    )
                    .await
                    .map_err(pg_err)?;
                    format!(
                        "SELECT {of_r} FROM {name} r WHERE {filter} AND EXISTS (
                           SELECT 1 FROM (SELECT (jsonb_populate_record(null::{name}, c.key)).* FROM bucket_changes c
                                          WHERE c.tbl = '{name}' AND c.bucket = ANY({list})) k
                           WHERE {same})",
                        name = t.name
                    )
                }
            };
            let out = source_tx
                .copy_out(&format!("COPY ({select}) TO STDOUT (FORMAT binary)"))
                .await
                .map_err(pg_err)?;
            let sink = ttx
                .copy_in(&format!("COPY {} ({}) FROM STDIN (FORMAT binary)", t.name, columns.join(", ")))
                .await
                .map_err(pg_err)?;
            futures::pin_mut!(out);
            futures::pin_mut!(sink);
            while let Some(chunk) = out.next().await {
                sink.send(chunk.map_err(pg_err)?).await.map_err(pg_err)?;
            }
            let copied = sink.finish().await.map_err(pg_err)?;
            total += copied;
            if pass == Pass::CatchUp && t.fence == Fence::Moving {
                caught += copied;
            }
        }
        // Counted on both sides: the source as the pass saw it, the target with it applied.
        // The catch-up counts only the tables it changed (and the derived ones, copied whole):
        // the bulk pass counted the others as of its snapshot, every change of their rows on
        // the source since is logged, and nothing but the mover writes them on the target
        // before the switch. Counting all of them under the fence scanned every table.
        // Every count sent at once on each side (one round trip's wait, not two per table).
        let counted: Vec<(&str, String)> = TABLES
            .iter()
            .filter(|t| match (pass, t.fence) {
                (Pass::Bulk, Fence::Moved) => false,
                (Pass::CatchUp, Fence::Moving) => changes.contains_key(t.name),
                _ => true,
            })
            .map(|t| (t.name, format!("SELECT count(*) FROM {} r WHERE {} = ANY({list})", t.name, t.bucket)))
            .collect();
        let sqls: Vec<&str> = counted.iter().map(|(_, sql)| sql.as_str()).collect();
        let (on_source, on_target) =
            futures::future::join(count_all(source_tx, &sqls), count_all(&ttx, &sqls)).await;
        for (((name, _), on_source), on_target) in counted.iter().zip(on_source?).zip(on_target?) {
            if on_source != on_target {
                return Err(engine(format!(
                    "{name}: {on_source} rows on the source, {on_target} on the target after the {pass:?} pass"
                )));
            }
        }
        if let Some(d) = drained.take() {
            drained_at = Some(d.wait().await?);
        }
        ttx.commit().await.map_err(pg_err)?;
        Ok((total, caught, drained_at))
    }

    /// Step 10: delete the moved buckets' rows from the source; the journal forgets the move.
    async fn drop_moved(&self, buckets: &[u32], source: usize) -> StoreResult<()> {
        let list = int_array(buckets);
        let mut c = self.conn(source).await?;
        let tx = c.transaction().await.map_err(pg_err)?;
        tx.batch_execute(MOVER_TX).await.map_err(pg_err)?;
        for t in TABLES {
            tx.execute(&format!("DELETE FROM {} r WHERE {} = ANY({list})", t.name, t.bucket), &[])
                .await
                .map_err(pg_err)?;
        }
        tx.commit().await.map_err(pg_err)?;
        let b: Vec<i32> = buckets.iter().map(|b| *b as i32).collect();
        self.conn(0)
            .await?
            .execute("DELETE FROM bucket_moves WHERE bucket = ANY($1) AND phase = 'switched'", &[&b])
            .await
            .map_err(pg_err)?;
        Ok(())
    }

    /// Rows of posts or users on `shard`, over every bucketed table (a new shard has none).
    pub async fn bucketed_rows(&self, shard: usize) -> StoreResult<i64> {
        let c = self.conn(shard).await?;
        let mut total = 0;
        for t in TABLES {
            let n: i64 = c
                .query_one(&format!("SELECT count(*) FROM (SELECT 1 FROM {} LIMIT 1) AS x", t.name), &[])
                .await
                .map_err(pg_err)?
                .get(0);
            total += n;
        }
        Ok(total)
    }

    /// What the journal holds (nothing before migration 16).
    pub async fn journaled_moves(&self) -> StoreResult<JournaledMoves> {
        let c = self.conn(0).await?;
        let exists: bool =
            c.query_one("SELECT to_regclass('bucket_moves') IS NOT NULL", &[]).await.map_err(pg_err)?.get(0);
        if !exists {
            return Ok(JournaledMoves::default());
        }
        let r = c
            .query_one(
                "SELECT count(*) FILTER (WHERE phase <> 'switched'), count(*) FILTER (WHERE phase = 'switched')
                 FROM bucket_moves",
                &[],
            )
            .await
            .map_err(pg_err)?;
        Ok(JournaledMoves { moving: r.get(0), switched: r.get(1) })
    }

    /// Move `buckets` to `target` as [`PgStore::move_buckets`] does; when that fails (a lost
    /// session, a drain that timed out), finish what it journaled ([`PgStore::resume_moves`],
    /// which also drops the rows of moves switched before) or start it again, up to `retries`
    /// more times, telling `on_retry` why each time. The last error when every try failed.
    pub async fn move_buckets_resuming(
        &self,
        buckets: &[u32],
        target: usize,
        opts: &MoveOptions,
        retries: usize,
        on_retry: &mut dyn FnMut(String),
    ) -> StoreResult<MoveReport> {
        // Where they are now, for the report of a move that failed after its switch.
        let source = buckets
            .first()
            .and_then(|b| self.placement().shards_of_buckets().get(*b as usize).map(|s| *s as usize));
        let mut tried = self.move_buckets(buckets, target, opts).await;
        let mut failures = 0;
        loop {
            let e = match tried {
                Ok(report) => return Ok(report),
                Err(e) => e,
            };
            if failures == retries {
                return Err(e);
            }
            failures += 1;
            on_retry(format!(
                "moving {} buckets to shard {target} failed ({e}); resuming the move (retry {failures} of {retries})",
                buckets.len()
            ));
            tried = self.resume_or_move(buckets, source, target, opts).await;
        }
    }

    /// After a failed move of `buckets`: resume what the journal holds; if that moved them,
    /// its report, else move them again (nothing of them was journaled).
    async fn resume_or_move(
        &self,
        buckets: &[u32],
        source: Option<usize>,
        target: usize,
        opts: &MoveOptions,
    ) -> StoreResult<MoveReport> {
        let resumed = self.resume_moves(opts).await?;
        let mut wanted = buckets.to_vec();
        wanted.sort_unstable();
        wanted.dedup();
        let p = self.load_placement().await?;
        if wanted
            .iter()
            .all(|b| p.shards_of_buckets().get(*b as usize).is_some_and(|s| *s as usize == target))
        {
            // The failed run got as far as the switch: the resume dropped their old rows.
            let report = resumed.into_iter().find(|r| r.buckets == wanted && r.target == target);
            return Ok(report.unwrap_or(MoveReport {
                buckets: wanted,
                source: source.unwrap_or(target),
                target,
                rows: 0,
                under_fence: 0,
                caught_up: 0,
                fenced_for: Duration::ZERO,
            }));
        }
        self.move_buckets(&wanted, target, opts).await
    }

    /// Read the catalog again whenever its version changes, every [`WATCH_INTERVAL`], until
    /// the store is dropped (the task holds only a weak reference).
    pub fn watch_placement(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let weak = std::sync::Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(inner) = weak.upgrade() else { return };
                let pg = PgStore { inner };
                if let Err(e) = pg.refresh_placement().await {
                    tracing::warn!(error = %e, "reading the placement catalog failed");
                }
            }
        })
    }
}

/// Moves that even out the buckets over `shards` shards: groups of at most `per_move`
/// buckets, each from one shard over its share to one under it, the fullest first. A shard's
/// share is `buckets / shards`, one more for the first `buckets % shards` shards.
pub fn plan(p: &super::placement::Placement, shards: usize, per_move: usize) -> Vec<(Vec<u32>, usize)> {
    let n = p.buckets() as usize;
    let share = |s: usize| n / shards + usize::from(s < n % shards);
    let mut held: Vec<Vec<u32>> = vec![Vec::new(); shards];
    for (b, s) in p.shards_of_buckets().iter().enumerate() {
        if let Some(list) = held.get_mut(*s as usize) {
            list.push(b as u32);
        }
    }
    let mut moves = Vec::new();
    let under = |held: &Vec<Vec<u32>>| {
        (0..shards).filter(|s| held[*s].len() < share(*s)).min_by_key(|s| held[*s].len())
    };
    let over = |held: &Vec<Vec<u32>>| {
        (0..shards).filter(|s| held[*s].len() > share(*s)).max_by_key(|s| held[*s].len())
    };
    while let (Some(to), Some(from)) = (under(&held), over(&held)) {
        let k = per_move.max(1).min(held[from].len() - share(from)).min(share(to) - held[to].len());
        let keep = held[from].len() - k;
        let group: Vec<u32> = held[from].split_off(keep);
        held[to].extend(&group);
        moves.push((group, to));
    }
    moves
}

/// A write held back because a move fences its bucket, told without asking the source
/// (`write.rs`): as good as the source's refusal (`LW001`).
#[derive(Debug)]
pub(crate) struct BucketMoving(pub String);

impl std::fmt::Display for BucketMoving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BucketMoving {}

/// Whether a write failed because its bucket moved (SQLSTATE `LW001`, or [`BucketMoving`]):
/// retry it after reading the placement again.
pub(crate) fn moved(e: &StoreError) -> bool {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        if let Some(pg) = err.downcast_ref::<tokio_postgres::Error>()
            && pg.code().is_some_and(|c| c.code() == MOVED)
        {
            return true;
        }
        if err.is::<BucketMoving>() {
            return true;
        }
        next = err.source();
    }
    false
}
