//! The PostgreSQL write engine, driven by the group committer.
//!
//! A batch is split by shard; each shard's part is ONE transaction, run concurrently with the
//! other shards' parts:
//! 1. comment operations, in arrival order (each sees the earlier ones: same transaction),
//!    planned by `likewise_core::comment::transition` and written by `comments.rs`; a run of
//!    consecutive creates is written together in a constant number of statements
//!    (`creates.rs`), and a create under an `Idempotency-Key` stores its key beside the
//!    comment (`idempotency.rs`: the batch's keys are claimed first, in one statement);
//! 2. likes in *rounds*: round r holds the r-th operation on each (target, user) key, so
//!    every key appears at most once per statement and per-key arrival order holds. A round is
//!    one multi-row `INSERT ... ON CONFLICT DO NOTHING RETURNING` (likes) and one multi-row
//!    `DELETE ... RETURNING` (unlikes). A returned row IS the state transition: only it makes
//!    an event, so a retry, or the same like racing in from another API node, never counts
//!    twice. Almost every batch is a single round;
//! 3. one outbox row per subject partition touched, holding that partition's events packed
//!    in order (a hot post's batch of thousands of likes is ONE row and one stream message).
//!
//! The like insert also writes the likers of each (target, 16 ms window) group of at least
//! four likes as one page row (migration 5) instead of a likers-by-time index entry per like;
//! an unlike of a paged like rewrites its page. The like insert stays `ON CONFLICT DO NOTHING`, though its speculative insertion
//! costs more than probing each key and inserting plain rows: the probe's plan is the
//! planner's choice, and on a young, unanalyzed `likes` (then with a second index) it probed
//! through the likers-by-time index and the benchmark fell from 60k to 16k likes/s. The
//! conflict check always uses the primary key.
//!
//! `sync` has nothing to do: a committed transaction is durable (PostgreSQL's WAL fsync).
//! Deadlocks and serialization failures between nodes are retried.

use super::comments::{LateFingerprint, comment_op};
use super::creates::{Create, apply_creates};
use super::idempotency::claim_batch_keys;
use super::likes::{WINDOW_MS, target_of};
use super::placement::Placement;
use super::replicas::Fence;
use super::tx::{TxError, retryable};
use super::{PgStore, i, pg_err};
use deadpool_postgres::Transaction as PoolTx;
use likewise_core::event::{Event, EventKind};
use likewise_core::ids::{PostId, UserId};
use likewise_core::like::{LikeAction, LikeOp, LikeOutcome, Target};
use likewise_core::ports::WriteEngine;
use likewise_core::write::{CommentOp, WriteOp, WriteOutcome};
use likewise_core::{StoreError, StoreResult};
use std::collections::{HashMap, HashSet};

/// Attempts of a shard transaction that hit a deadlock or serialization failure.
const ATTEMPTS: usize = 4;

/// How long a batch's part refused because its buckets are moving keeps being retried (each
/// time after reading the catalog again) by a caller that waits it out (`apply`): a move's
/// fence lasts one copy of its buckets. The group committer does not wait here
/// (`apply_each`): it hands such writes to a later batch of its own.
const MOVED_RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(10);

/// How long buckets seen fenced on a shard are taken to still be, with the catalog unchanged:
/// their writes are handed back without a transaction tried on the source meanwhile. A fence
/// ends with the catalog's switch, or, for a move that failed, without one: then the source
/// is asked again after this.
const FENCE_SEEN_FOR: std::time::Duration = std::time::Duration::from_millis(100);

impl WriteEngine for PgStore {
    fn apply(&self, ops: &[WriteOp]) -> StoreResult<Vec<WriteOutcome>> {
        match self.block_on_writes(self.apply_each_async(ops)) {
            Ok(out) => out.into_iter().collect(),
            Err(e) => Err(e),
        }
    }

    /// Writes to buckets a move has fenced are answered at once with the move's error
    /// (`retry_later`), not waited for: the other writes of the batch commit and are answered
    /// now, and the committer runs those again in a later batch, so a fence holds only the
    /// writes to the moving buckets, not the lane.
    fn apply_each(&self, ops: &[WriteOp]) -> Vec<StoreResult<WriteOutcome>> {
        match self.block_on_writes(self.apply_parts(ops, false)) {
            Ok(out) => out,
            Err(e) => ops.iter().map(|_| Err(e.duplicate())).collect(),
        }
    }

    fn retry_later(&self, e: &StoreError) -> bool {
        super::reshard::moved(e)
    }

    fn sync(&self) -> StoreResult<()> {
        Ok(())
    }

    fn name(&self) -> &'static str {
        "postgres"
    }
}

fn op_shard(s: &PgStore, op: &WriteOp) -> usize {
    match op {
        WriteOp::Like(l) => s.shard_of_post(PostId(l.post)),
        WriteOp::Comment(CommentOp::Create(r, _)) | WriteOp::KeyedComment(r, _, _) => s.shard_of_post(r.post),
        WriteOp::Comment(CommentOp::SetStatus { id, .. } | CommentOp::Delete { id, .. }) => {
            s.shard_of_comment(*id)
        }
    }
}

/// The buckets whose rows `op` writes in its shard's transaction, as far as they are known:
/// a like its post's; a create its post's and its author's (the fingerprint, when the author
/// is on the same shard); a status change or delete its comment's (`None` for a legacy
/// comment, placed by its ID). Telling apart which writes of a refused part a fence holds.
fn op_buckets(p: &Placement, op: &WriteOp) -> Option<[u32; 2]> {
    match op {
        WriteOp::Like(l) => Some([p.bucket_of(l.post); 2]),
        WriteOp::Comment(CommentOp::Create(r, _)) | WriteOp::KeyedComment(r, _, _) => {
            Some([p.bucket_of(r.post.0), p.bucket_of(r.author.0)])
        }
        WriteOp::Comment(CommentOp::SetStatus { id, .. } | CommentOp::Delete { id, .. }) => {
            p.bucket_of_comment(*id).map(|b| [b; 2])
        }
    }
}

/// The buckets a move was last seen fencing, per shard: with the catalog version and when.
#[derive(Default)]
pub(super) struct FencedBuckets {
    seen: parking_lot::Mutex<HashMap<usize, Seen>>,
    /// Writes were handed back since the catalog was last read: the next batch reads it
    /// first (a switch moves them to their new shard at once, not after the watch's interval).
    refresh: std::sync::atomic::AtomicBool,
}

struct Seen {
    version: i64,
    at: std::time::Instant,
    buckets: HashSet<u32>,
}

impl FencedBuckets {
    /// Per shard, the buckets seen fenced moments ago under catalog `version`.
    fn current(&self, version: i64) -> HashMap<usize, HashSet<u32>> {
        let seen = self.seen.lock();
        seen.iter()
            .filter(|(_, s)| s.version == version && s.at.elapsed() < FENCE_SEEN_FOR)
            .map(|(shard, s)| (*shard, s.buckets.clone()))
            .collect()
    }

    fn record(&self, shard: usize, version: i64, buckets: HashSet<u32>) {
        self.seen.lock().insert(shard, Seen { version, at: std::time::Instant::now(), buckets });
    }
}

/// The error of a write held by a fence without a transaction tried (`FencedBuckets`): what
/// the source says of such writes, recognized as it is (`reshard::moved`).
fn fenced_error(shard: usize) -> StoreError {
    StoreError::Overloaded {
        engine: "postgres",
        source: Box::new(super::reshard::BucketMoving(format!("a bucket on shard {shard} is moving"))),
    }
}

impl PgStore {
    /// Apply a batch, the first error for all (tests that write whole batches).
    #[cfg(test)]
    pub(crate) async fn apply_async(&self, ops: &[WriteOp]) -> StoreResult<Vec<WriteOutcome>> {
        self.apply_each_async(ops).await.into_iter().collect()
    }

    /// Apply a batch, one shard transaction per shard it touches: each operation hears its own
    /// part's result, since one part can commit while another fails. Writes to moving buckets
    /// are waited for (up to `MOVED_RETRY_FOR`).
    pub(crate) async fn apply_each_async(&self, ops: &[WriteOp]) -> Vec<StoreResult<WriteOutcome>> {
        self.apply_parts(ops, true).await
    }

    /// Apply a batch, one shard transaction per shard it touches. A shard's part refused
    /// because a bucket of it is fenced by a move (`reshard`) committed nothing: the buckets
    /// fenced on that shard are read, and its writes to other buckets run again at once;
    /// those to the fenced buckets run again after the catalog is read again (`wait_moved`)
    /// or are answered with the move's error for the caller to run again later.
    async fn apply_parts(&self, ops: &[WriteOp], wait_moved: bool) -> Vec<StoreResult<WriteOutcome>> {
        let mut out: Vec<Option<StoreResult<WriteOutcome>>> = (0..ops.len()).map(|_| None).collect();
        let mut pending: Vec<usize> = (0..ops.len()).collect();
        let started = std::time::Instant::now();
        let fenced = &self.inner.fenced;
        // Writes were handed back: a switch since then sends them to their new shard now.
        // Shard 0 out of reach fails none of these writes (the catalog read stays as it was;
        // each node's watch reads it again).
        if fenced.refresh.swap(false, std::sync::atomic::Ordering::AcqRel)
            && let Err(e) = self.refresh_placement().await
        {
            tracing::debug!(error = %e, "reading the catalog after a move's refusal failed");
        }
        while !pending.is_empty() {
            let placement = self.placement();
            // Writes to buckets seen fenced moments ago are held without trying the source.
            let mut held: Vec<(usize, StoreError)> = Vec::new();
            let seen = fenced.current(placement.version);
            pending.retain(|k| {
                let shard = op_shard(self, &ops[*k]);
                let hit = seen.get(&shard).is_some_and(|f| {
                    op_buckets(&placement, &ops[*k]).is_some_and(|bs| bs.iter().any(|b| f.contains(b)))
                });
                if hit {
                    held.push((*k, fenced_error(shard)));
                }
                !hit
            });
            let groups = self.group(&pending, |k| op_shard(self, &ops[*k]));
            let parts = futures::future::join_all(groups.iter().map(|(shard, idx)| {
                self.apply_shard(*shard, idx.iter().map(|i| &ops[pending[*i]]).collect())
            }))
            .await;
            // A part that failed committed nothing (or, `OutcomeUnknown`, may have): only its
            // own operations hear its error. The other parts committed.
            let mut again = Vec::new();
            for ((shard, idx), part) in groups.iter().zip(parts) {
                match part {
                    Ok(outcomes) => {
                        for (i, o) in idx.iter().zip(outcomes) {
                            out[pending[*i]] = Some(Ok(o));
                        }
                    }
                    Err(e) if super::reshard::moved(&e) => {
                        metrics::counter!("likewise_pg_write_moved_retries_total").increment(1);
                        // Which of its writes the fence holds: those to a bucket fenced there
                        // now. Should none be found (the fence is gone, or a write touches a
                        // bucket not told above), all of them.
                        let now = self.fenced_buckets(*shard).await.unwrap_or_default();
                        let of_part: Vec<usize> = idx.iter().map(|i| pending[*i]).collect();
                        let holds = |k: &usize| {
                            op_buckets(&placement, &ops[*k])
                                .is_none_or(|bs| bs.iter().any(|b| now.contains(b)))
                        };
                        let (by_fence, free): (Vec<usize>, Vec<usize>) =
                            of_part.iter().partition(|k| holds(k));
                        if !now.is_empty() {
                            fenced.record(*shard, placement.version, now);
                        }
                        if by_fence.is_empty() {
                            held.extend(of_part.into_iter().map(|k| (k, fenced_error(*shard))));
                        } else {
                            held.extend(by_fence.into_iter().map(|k| (k, fenced_error(*shard))));
                            again.extend(free);
                        }
                    }
                    Err(e) => {
                        for i in idx {
                            out[pending[*i]] = Some(Err(e.duplicate()));
                        }
                    }
                }
            }
            if !held.is_empty() {
                if !wait_moved || started.elapsed() >= MOVED_RETRY_FOR {
                    fenced.refresh.store(true, std::sync::atomic::Ordering::Release);
                    for (k, e) in held {
                        out[k] = Some(Err(e));
                    }
                } else if again.is_empty() {
                    let before = placement.version;
                    match self.refresh_placement().await {
                        Ok(p) if p.version == before => {
                            // Fenced on the source, not yet switched in the catalog: a moment.
                            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
                        }
                        Ok(_) => {}
                        Err(e) => {
                            for (k, _) in held {
                                out[k] = Some(Err(e.duplicate()));
                            }
                            break;
                        }
                    }
                    again.extend(held.into_iter().map(|(k, _)| k));
                } else {
                    // The writes the fence does not hold go first; these with them.
                    again.extend(held.into_iter().map(|(k, _)| k));
                }
            }
            again.sort_unstable();
            pending = again;
        }
        out.into_iter()
            .map(|o| o.unwrap_or_else(|| Err(StoreError::Engine("write batch lost an outcome".into()))))
            .collect()
    }

    /// The buckets of `shard` a move fences now (listed, not being copied).
    async fn fenced_buckets(&self, shard: usize) -> StoreResult<HashSet<u32>> {
        let c = self.write_conn(shard).await?;
        let rows =
            c.query("SELECT bucket FROM bucket_fences WHERE NOT logging", &[]).await.map_err(pg_err)?;
        Ok(rows.iter().map(|r| r.get::<_, i32>(0) as u32).collect())
    }

    async fn apply_shard(&self, shard: usize, ops: Vec<&WriteOp>) -> StoreResult<Vec<WriteOutcome>> {
        let mut c = self.write_conn(shard).await?;
        let placement = self.placement();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let tx = c.transaction().await.map_err(pg_err)?;
            let part = match shard_tx(&tx, shard, &placement, &ops).await {
                // Wake the shard's relay at the commit (`outbox_wakeups`): at most once per
                // `ANNOUNCE_EVERY` from this process, so notifying transactions, which commit
                // one at a time, stay rare under load.
                Ok(part) if part.events && self.inner.announced.due(shard) => tx
                    .execute(super::outbox_wakeups::ANNOUNCE, &[])
                    .await
                    .map(|_| (part, true))
                    .map_err(TxError::from),
                Ok(part) => Ok((part, false)),
                Err(e) => Err(e),
            };
            match part {
                Ok((part, announced)) => match tx.commit().await {
                    Ok(()) => {
                        if announced {
                            self.inner.announced.done(shard);
                        }
                        // Before the callers hear of it: their next page read must see it.
                        self.inner.replicas.wrote(shard, &part.fences);
                        drop(c);
                        self.write_late_fingerprints(&part.late).await;
                        return Ok(part.out);
                    }
                    Err(e) if retryable(&e) && attempt < ATTEMPTS => continue,
                    // Refused by the server (a serialization failure): rolled back.
                    Err(e) if e.code().is_some() => return Err(pg_err(e)),
                    // The connection failed while COMMIT was on its way: the server may have
                    // committed. The caller must not hear "nothing happened".
                    Err(e) => {
                        return Err(StoreError::OutcomeUnknown { engine: "postgres", source: e.into() });
                    }
                },
                Err(TxError::Retry(e)) if attempt < ATTEMPTS => {
                    tracing::debug!(error = %e, shard, attempt, "write transaction retried");
                    metrics::counter!("likewise_pg_write_retries_total").increment(1);
                    continue;
                }
                Err(TxError::Retry(e)) => return Err(pg_err(e)),
                Err(TxError::Fail(e)) => return Err(e),
            }
        }
    }
}

impl PgStore {
    /// Write, on their users' shards, the fingerprints of comments just committed on another
    /// shard (`comments::moderation_rows` says why this may follow the commit): one statement
    /// per shard, the shards at once, as the batch's own rows (one round trip each written
    /// apart made a batch of a hundred creates answer seconds after its commit on a busy
    /// machine). Each write is an idempotent upsert, tried a few times (a moved user bucket
    /// is found again through the catalog); one that still fails is logged and counted,
    /// never answered as the create's error: the comment is stored.
    pub(super) async fn write_late_fingerprints(&self, late: &[LateFingerprint]) {
        let mut pending: Vec<&LateFingerprint> = late.iter().collect();
        let mut attempt = 0;
        while !pending.is_empty() {
            attempt += 1;
            let groups = self.group(&pending, |f| self.shard_of_user(f.user));
            let written = futures::future::join_all(
                groups
                    .iter()
                    .map(|(shard, idx)| self.write_fingerprints(*shard, idx.iter().map(|k| pending[*k]))),
            )
            .await;
            let (mut failed, mut moved) = (Vec::new(), false);
            for ((_, idx), w) in groups.iter().zip(written) {
                let Err(e) = w else { continue };
                if attempt < LATE_ATTEMPTS {
                    moved |= super::reshard::moved(&e);
                    failed.extend(idx.iter().map(|k| pending[*k]));
                    continue;
                }
                for f in idx.iter().map(|k| pending[*k]) {
                    tracing::error!(error = %e, user = f.user.0, comment = f.comment.0, "comment fingerprint not stored");
                    metrics::counter!("likewise_pg_fingerprint_failures_total").increment(1);
                }
            }
            if failed.is_empty() {
                return;
            }
            if moved {
                let _ = self.refresh_placement().await;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20 * attempt as u64)).await;
            pending = failed;
        }
    }

    /// Upsert `rows` (fingerprints of users on `shard`) in one statement.
    async fn write_fingerprints<'a>(
        &self,
        shard: usize,
        rows: impl Iterator<Item = &'a LateFingerprint>,
    ) -> StoreResult<()> {
        let (mut users, mut ords, mut hashes) = (Vec::new(), Vec::new(), Vec::new());
        for f in rows {
            users.push(i(f.user.0));
            ords.push(super::moderation::ord(f.comment.0));
            hashes.push(i(f.simhash));
        }
        let c = self.write_conn(shard).await?;
        let insert = c
            .prepare_cached(
                "INSERT INTO fingerprints (user_id, comment_ord, simhash)
                 SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[])
                 ON CONFLICT (user_id, comment_ord) DO UPDATE SET simhash = EXCLUDED.simhash",
            )
            .await
            .map_err(pg_err)?;
        c.execute(&insert, &[&users, &ords, &hashes]).await.map_err(pg_err)?;
        Ok(())
    }
}

/// Attempts of a fingerprint written after its comment's commit.
const LATE_ATTEMPTS: usize = 4;

/// One shard's part of a batch, inside its transaction.
async fn shard_tx(
    tx: &PoolTx<'_>,
    shard: usize,
    ids: &Placement,
    ops: &[&WriteOp],
) -> Result<ShardPart, TxError> {
    let mut out: Vec<Option<WriteOutcome>> = vec![None; ops.len()];
    let mut events: Vec<(usize, Event)> = Vec::new();
    let now = likewise_engine::now_ms();
    // Every key of the batch first, in key order (`idempotency.rs`).
    let mut keys = claim_batch_keys(tx, ops, now).await?;
    let mut late = Vec::new();
    // Comment operations in arrival order, each seeing the earlier ones; consecutive creates
    // together (`creates.rs`). Their events join the outbox in arrival order.
    let mut planned: Vec<Vec<Event>> = vec![Vec::new(); ops.len()];
    let mut run: Vec<Create<'_>> = Vec::new();
    for (k, op) in ops.iter().enumerate() {
        let create = match op {
            WriteOp::Comment(CommentOp::Create(r, held_by)) => {
                Some(Create { at: k, record: r, held_by: *held_by, keyed: None })
            }
            WriteOp::KeyedComment(r, held_by, keyed) => {
                Some(Create { at: k, record: r, held_by: *held_by, keyed: Some(keyed) })
            }
            _ => None,
        };
        if let Some(c) = create {
            run.push(c);
            continue;
        }
        if let WriteOp::Comment(c) = op {
            for (at, outcome, events) in
                apply_creates(tx, shard, ids, std::mem::take(&mut run), &mut keys, now, &mut late).await?
            {
                out[at] = Some(WriteOutcome::Comment(outcome));
                planned[at] = events;
            }
            let (outcome, events) = comment_op(tx, shard, ids, c, now, &mut late).await?;
            out[k] = Some(WriteOutcome::Comment(outcome));
            planned[k] = events;
        }
    }
    for (at, outcome, events) in apply_creates(tx, shard, ids, run, &mut keys, now, &mut late).await? {
        out[at] = Some(WriteOutcome::Comment(outcome));
        planned[at] = events;
    }
    events.extend(planned.into_iter().enumerate().flat_map(|(k, es)| es.into_iter().map(move |e| (k, e))));
    // Likes, in rounds.
    let mut round_of: HashMap<(Target, UserId), usize> = HashMap::new();
    let mut rounds: Vec<Vec<(usize, &LikeOp)>> = Vec::new();
    for (k, op) in ops.iter().enumerate() {
        if let WriteOp::Like(l) = op {
            let r = round_of.entry((l.target, l.user)).or_insert(0);
            if rounds.len() <= *r {
                rounds.push(Vec::new());
            }
            rounds[*r].push((k, l));
            *r += 1;
        }
    }
    for round in rounds {
        let changed = like_round(tx, &round).await?;
        for (k, l) in round {
            let did = changed.contains(&(l.target, l.user));
            let liked = l.action == LikeAction::Like;
            out[k] = Some(WriteOutcome::Like(LikeOutcome { liked, changed: did, event_seq: None }));
            if did {
                events.push((
                    k,
                    Event::like(0, liked, l.target, l.target_author, l.user, l.ts_ms, l.post).traced(l.trace),
                ));
            }
        }
    }
    let positions = insert_events(tx, &events).await?;
    // Only a key's last change in this transaction carries its position: the own-likes
    // records order changes by their outbox row alone (`seq`, the position without its
    // index), so two records of one key must never share a row. The last change's record says
    // the state the transaction left.
    let mut last: HashSet<(Target, UserId)> = HashSet::new();
    for ((k, _), seq) in events.iter().zip(positions).rev() {
        if let (WriteOp::Like(l), Some(WriteOutcome::Like(o))) = (ops[*k], &mut out[*k])
            && last.insert((l.target, l.user))
        {
            o.event_seq = Some(seq);
        }
    }
    let fences = events.iter().flat_map(|(_, e)| comment_pages(e)).flatten().collect();
    let out = out
        .into_iter()
        .map(|o| o.ok_or_else(|| TxError::Fail(StoreError::Engine("shard batch lost an outcome".into()))))
        .collect::<Result<_, _>>()?;
    Ok(ShardPart { out, fences, late, events: !events.is_empty() })
}

/// What one shard's committed part leaves to do: the outcomes, the comment pages it touched
/// (read-your-writes on a replica: `replicas`), and the fingerprints of its new comments that
/// live on other shards.
struct ShardPart {
    out: Vec<WriteOutcome>,
    fences: Vec<Fence>,
    late: Vec<LateFingerprint>,
    /// Whether it added outbox rows.
    events: bool,
}

/// The comment pages a comment event's change shows on: its post's top-level comments and,
/// for a reply, its thread. Every comment row a change writes (a placeholder parent
/// included) is of the event's post and thread.
fn comment_pages(e: &Event) -> [Option<Fence>; 2] {
    match e.kind {
        EventKind::CommentCreated | EventKind::CommentStatusChanged | EventKind::CommentDeleted => {
            [Some(Fence::Post(e.post)), (e.parent != 0).then_some(Fence::Thread(e.parent))]
        }
        EventKind::LikeCreated | EventKind::LikeRemoved => [None, None],
    }
}

/// Apply one round of like/unlike operations (distinct keys); returns the keys that changed.
async fn like_round(
    tx: &PoolTx<'_>,
    round: &[(usize, &LikeOp)],
) -> Result<HashSet<(Target, UserId)>, TxError> {
    // Sorted by key so concurrent transactions of two API nodes lock rows in the same order.
    let mut likes: Vec<&LikeOp> =
        round.iter().filter(|(_, l)| l.action == LikeAction::Like).map(|x| x.1).collect();
    let mut unlikes: Vec<&LikeOp> =
        round.iter().filter(|(_, l)| l.action == LikeAction::Unlike).map(|x| x.1).collect();
    likes.sort_by_key(|l| (l.target, l.user));
    unlikes.sort_by_key(|l| (l.target, l.user));
    let mut changed = HashSet::new();
    let key = |r: &tokio_postgres::Row| -> Result<(Target, UserId), TxError> {
        Ok((target_of(r.get(0), r.get(1))?, UserId(r.get::<_, i64>(2) as u64)))
    };
    if !likes.is_empty() {
        let kinds: Vec<i16> = likes.iter().map(|l| i16::from(l.target.kind.code())).collect();
        let targets: Vec<i64> = likes.iter().map(|l| i(l.target.id)).collect();
        let users: Vec<i64> = likes.iter().map(|l| i(l.user.0)).collect();
        // A post like's post is its target: NULL, 8 bytes less per row (migration 26).
        let posts: Vec<Option<i64>> =
            likes.iter().map(|l| (l.target != Target::post(l.post)).then_some(i(l.post))).collect();
        let ts: Vec<i64> = likes.iter().map(|l| i(l.ts_ms)).collect();
        let paged = paged_likes(&likes);
        // The rows created, and the likers of each (target, window) group of at least
        // MIN_PAGED likes as one page (migration 5); the rest stay in the unpaged index.
        // A data-modifying CTE runs once whether or not the query reads it.
        let insert = tx
            .prepare_cached(concat!(
                "WITH ins AS (
                     INSERT INTO likes (kind, target, user_id, post_id, liked_at, paged)
                     SELECT * FROM unnest($1::smallint[], $2::bigint[], $3::bigint[], $4::bigint[],
                                          $5::bigint[], $6::boolean[])
                     ON CONFLICT DO NOTHING
                     RETURNING kind, target, user_id, liked_at, paged
                 ), pages AS (",
                insert_liker_pages_from!("ins WHERE paged"),
                // One row of arrays, not a row per like: the lane decodes one row instead of
                // hundreds (end to end 1-3% ahead in 3 of 3 pairs: within the noise).
                ") SELECT array_agg(kind), array_agg(target), array_agg(user_id) FROM ins"
            ))
            .await?;
        let row = tx.query_one(&insert, &[&kinds, &targets, &users, &posts, &ts, &paged]).await?;
        let kinds: Vec<i16> = row.get::<_, Option<_>>(0).unwrap_or_default();
        let targets: Vec<i64> = row.get::<_, Option<_>>(1).unwrap_or_default();
        let users: Vec<i64> = row.get::<_, Option<_>>(2).unwrap_or_default();
        for ((k, t), u) in kinds.into_iter().zip(targets).zip(users) {
            changed.insert((target_of(k, t)?, UserId(super::u(u))));
        }
    }
    if !unlikes.is_empty() {
        let kinds: Vec<i16> = unlikes.iter().map(|l| i16::from(l.target.kind.code())).collect();
        let targets: Vec<i64> = unlikes.iter().map(|l| i(l.target.id)).collect();
        let users: Vec<i64> = unlikes.iter().map(|l| i(l.user.0)).collect();
        let delete = tx
            .prepare_cached(
                "DELETE FROM likes l
                 USING unnest($1::smallint[], $2::bigint[], $3::bigint[]) AS d(kind, target, user_id)
                 WHERE l.kind = d.kind AND l.target = d.target AND l.user_id = d.user_id
                 RETURNING l.kind, l.target, l.user_id, l.liked_at, l.paged",
            )
            .await?;
        let rows = tx.query(&delete, &[&kinds, &targets, &users]).await?;
        let mut removed = Vec::new();
        for r in &rows {
            changed.insert(key(r)?);
            if r.get::<_, bool>(4) {
                removed.push((r.get(0), r.get(1), r.get(2), r.get(3)));
            }
        }
        remove_likers(tx, &removed).await?;
    }
    Ok(changed)
}

/// A (target, window) group of a statement is written as a page from this many likes up: a
/// page costs a heap row and a key, about what three or four index entries cost, so a lone
/// like of a cold target stays an index entry.
pub(super) const MIN_PAGED: usize = 4;

/// Which of a round's likes go into pages: those whose (target, window) group in the round
/// has at least [`MIN_PAGED`] likes. (A group whose rows partly exist already makes a
/// smaller page; that is only an existing key liked again.)
fn paged_likes(likes: &[&LikeOp]) -> Vec<bool> {
    let group = |l: &LikeOp| (l.target, i(l.ts_ms) / WINDOW_MS);
    let mut sizes: HashMap<(Target, i64), usize> = HashMap::new();
    for l in likes {
        *sizes.entry(group(l)).or_default() += 1;
    }
    likes.iter().map(|l| sizes[&group(l)] >= MIN_PAGED).collect()
}

/// Take unliked (kind, target, user, liked_at) entries out of their liker pages (the page
/// of the like's window holding that user at that time): rewrite each page touched, delete
/// the ones emptied. Pages are locked first, in key order, so two transactions removing
/// from one page apply one after the other.
async fn remove_likers(tx: &PoolTx<'_>, removed: &[(i16, i64, i64, i64)]) -> Result<(), TxError> {
    if removed.is_empty() {
        return Ok(());
    }
    let kinds: Vec<i16> = removed.iter().map(|r| r.0).collect();
    let targets: Vec<i64> = removed.iter().map(|r| r.1).collect();
    let wins: Vec<i64> = removed.iter().map(|r| r.3 / WINDOW_MS).collect();
    let select = tx
        .prepare_cached(
            "SELECT p.kind, p.target, p.win, p.page, p.users, p.times FROM liker_pages p
             WHERE (p.kind, p.target, p.win) IN
                   (SELECT * FROM unnest($1::smallint[], $2::bigint[], $3::bigint[]))
             ORDER BY p.kind, p.target, p.win, p.page
             FOR UPDATE OF p",
        )
        .await?;
    let rows = tx.query(&select, &[&kinds, &targets, &wins]).await?;
    struct Page {
        key: (i16, i64, i64, i64),
        users: Vec<i64>,
        times: Vec<i64>,
        dirty: bool,
    }
    let mut pages: Vec<Page> = rows
        .iter()
        .map(|r| Page {
            key: (r.get(0), r.get(1), r.get(2), r.get(3)),
            users: r.get(4),
            times: r.get(5),
            dirty: false,
        })
        .collect();
    // An unlike storm removes thousands of likers over thousands of pages: find each
    // window's pages by key, not by scanning them all.
    let mut by_window: HashMap<(i16, i64, i64), Vec<usize>> = HashMap::new();
    for (k, p) in pages.iter().enumerate() {
        by_window.entry((p.key.0, p.key.1, p.key.2)).or_default().push(k);
    }
    for &(kind, target, user, at) in removed {
        let found = by_window.get(&(kind, target, at / WINDOW_MS)).into_iter().flatten().find_map(|&k| {
            let p = &pages[k];
            Some((k, p.users.iter().zip(&p.times).position(|(u, t)| *u == user && *t == at)?))
        });
        match found {
            Some((k, at_k)) => {
                let p = &mut pages[k];
                p.users.remove(at_k);
                p.times.remove(at_k);
                p.dirty = true;
            }
            // A like row without its page entry: nothing to take out. Counted, because it
            // means a page was lost (the likers list lacked this user all along).
            None => {
                tracing::error!(kind, target, user, at, "unliked like missing from its liker page");
                metrics::counter!("likewise_liker_page_misses_total").increment(1);
            }
        }
    }
    let update = tx
        .prepare_cached(
            "UPDATE liker_pages SET users = $5, times = $6
             WHERE kind = $1 AND target = $2 AND win = $3 AND page = $4",
        )
        .await?;
    let delete = tx
        .prepare_cached("DELETE FROM liker_pages WHERE kind = $1 AND target = $2 AND win = $3 AND page = $4")
        .await?;
    for p in pages.iter().filter(|p| p.dirty) {
        let (kind, target, win, page) = &p.key;
        if p.users.is_empty() {
            tx.execute(&delete, &[kind, target, win, page]).await?;
        } else {
            tx.execute(&update, &[kind, target, win, page, &p.users, &p.times]).await?;
        }
    }
    Ok(())
}

/// Insert the events into the outbox, one row per subject partition (in order within each);
/// returns each event's position: its row's `seq` and its index in the row
/// ([`super::outbox::position`]).
///
/// The positions order the changes of one (target, user) key by commit: the `seq` is drawn
/// after the like round took the key's row lock (an insert of a key waits for a transaction
/// deleting it, a delete only sees committed rows), so a later change of the key draws a
/// larger one. Two changes of a key in one transaction share the row and keep their order
/// in it.
async fn insert_events(tx: &PoolTx<'_>, events: &[(usize, Event)]) -> Result<Vec<u64>, TxError> {
    if events.is_empty() {
        return Ok(Vec::new());
    }
    let mut parts: Vec<(i16, Vec<usize>)> = Vec::new();
    for (k, (_, e)) in events.iter().enumerate() {
        let p = (e.post % crate::stream::PARTITIONS) as i16;
        match parts.iter_mut().find(|(q, _)| *q == p) {
            Some((_, v)) => v.push(k),
            None => parts.push((p, vec![k])),
        }
    }
    let part_ids: Vec<i16> = parts.iter().map(|(p, _)| *p).collect();
    let counts: Vec<i32> = parts.iter().map(|(_, v)| v.len() as i32).collect();
    let bodies: Vec<Vec<u8>> =
        parts.iter().map(|(_, v)| likewise_core::event::pack(v.iter().map(|k| &events[*k].1))).collect();
    let now = i(likewise_engine::now_ms());
    // ORDER BY ord: rows (and their bigserial seqs) follow the partitions' first appearance.
    let insert = tx
        .prepare_cached(
            "INSERT INTO outbox (part, events, body, created_ms)
             SELECT p, n, b, $4 FROM unnest($1::smallint[], $2::integer[], $3::bytea[])
                 WITH ORDINALITY AS x(p, n, b, ord)
             ORDER BY ord
             RETURNING seq",
        )
        .await?;
    let rows = tx.query(&insert, &[&part_ids, &counts, &bodies, &now]).await?;
    let mut seqs: Vec<u64> = rows.iter().map(|r| r.get::<_, i64>(0) as u64).collect();
    seqs.sort_unstable();
    let mut at = vec![0u64; events.len()];
    for ((_, v), seq) in parts.iter().zip(seqs) {
        for (index, k) in v.iter().enumerate() {
            at[*k] = super::outbox::position(seq, index);
        }
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::testing::TestShards;
    use std::time::Duration;

    fn like(post: u64, user: u64) -> WriteOp {
        WriteOp::Like(LikeOp {
            target: Target::post(post),
            user: UserId(user),
            action: LikeAction::Like,
            target_author: UserId(1),
            post,
            ts_ms: 1_700_000_000_000 + user,
            trace: None,
        })
    }

    fn changed(o: &WriteOutcome) -> bool {
        match o {
            WriteOutcome::Like(l) => l.changed,
            WriteOutcome::Comment(_) => panic!("not a like"),
        }
    }

    /// Another node's transaction inserts (42, 7) and holds it while a batch liking (42, 7)
    /// and (42, 8) runs. Then that transaction commits (`commit`) or rolls back.
    async fn race(commit: bool) -> (Vec<WriteOutcome>, i64, i64) {
        let t = TestShards::create(1).await;
        let s = t.store().await;
        let mut other = t.client(0).await;
        let tx = other.transaction().await.expect("begin");
        tx.execute("INSERT INTO likes (kind, target, user_id, liked_at) VALUES (1, 42, 7, 1)", &[])
            .await
            .expect("insert");
        let ops = [like(42, 7), like(42, 8)];
        let batch = {
            let s = s.clone();
            tokio::spawn(async move { s.apply_async(&ops).await })
        };
        // The batch's insert of (42, 7) now waits on the other transaction's index entry.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!batch.is_finished(), "the batch did not wait for the other node's row");
        if commit {
            tx.commit().await.expect("commit");
        } else {
            tx.rollback().await.expect("rollback");
        }
        let out = batch.await.expect("join").expect("the batch succeeds");
        let c = s.conn(0).await.expect("conn");
        let rows: i64 = c.query_one("SELECT count(*) FROM likes", &[]).await.expect("rows").get(0);
        let events: i64 =
            c.query_one("SELECT coalesce(sum(events), 0) FROM outbox", &[]).await.expect("events").get(0);
        (out, rows, events)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_like_racing_another_nodes_committed_insert_is_not_a_transition() {
        let (out, rows, events) = race(true).await;
        assert!(!changed(&out[0]), "(42, 7) was created by the other node");
        assert!(changed(&out[1]), "(42, 8) is new");
        assert_eq!(rows, 2);
        assert_eq!(events, 1, "only (42, 8) makes an event");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_like_racing_another_nodes_rolled_back_insert_is_a_transition() {
        let (out, rows, events) = race(false).await;
        assert!(changed(&out[0]) && changed(&out[1]));
        assert_eq!(rows, 2);
        assert_eq!(events, 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn liking_an_existing_row_again_changes_nothing() {
        let t = TestShards::create(1).await;
        let s = t.store().await;
        let first = s.apply_async(&[like(42, 7)]).await.expect("first");
        let again = s.apply_async(&[like(42, 7), like(42, 9)]).await.expect("again");
        assert!(changed(&first[0]));
        assert!(!changed(&again[0]) && changed(&again[1]));
        let c = s.conn(0).await.expect("conn");
        let events: i64 =
            c.query_one("SELECT coalesce(sum(events), 0) FROM outbox", &[]).await.expect("events").get(0);
        assert_eq!(events, 2);
    }

    /// The positions that order own-likes records: every change of a key in a later batch
    /// gets a later outbox row; within one batch only the key's last change carries one (the
    /// state the batch left); an operation that changed nothing gets none.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn changes_of_a_key_get_increasing_positions() {
        let t = TestShards::create(1).await;
        let s = t.store().await;
        let unlike = |post, user| match like(post, user) {
            WriteOp::Like(l) => WriteOp::Like(LikeOp { action: LikeAction::Unlike, ..l }),
            other => other,
        };
        let outcome = |o: &WriteOutcome| match o {
            WriteOutcome::Like(l) => (l.liked, l.event_seq),
            WriteOutcome::Comment(_) => panic!("not a like"),
        };
        let first = s
            .apply_async(&[like(42, 8), like(42, 7), unlike(42, 7), like(42, 7), like(42, 7)])
            .await
            .expect("first");
        let then = s.apply_async(&[unlike(42, 7)]).await.expect("then");
        let got: Vec<(bool, Option<u64>)> = first.iter().chain(&then).map(outcome).collect();
        assert!(got[0].1.is_some(), "user 8's one change: {got:?}");
        assert_eq!((got[1].1, got[2].1), (None, None), "superseded in their own batch: {got:?}");
        assert_eq!(got[4].1, None, "liking again changed nothing");
        let (last, next) = (got[3].1.expect("the batch's last change"), got[5].1.expect("a change"));
        assert!(got[3].0 && !got[5].0);
        let row = |p: u64| p >> crate::postgres::outbox::INDEX_BITS;
        assert!(row(last) < row(next), "a later batch, a later row: {got:?}");
    }

    /// A hot post's packed outbox body is big enough to be compressed, and is compressed
    /// with lz4 where the server has it (migration 4), pglz otherwise.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hot_batchs_outbox_body_is_lz4_compressed() {
        let t = TestShards::create(1).await;
        let s = t.store().await;
        let ops: Vec<_> = (1..=2_000).map(|u| like(42, u)).collect();
        s.apply_async(&ops).await.expect("apply");
        let c = s.conn(0).await.expect("conn");
        let lz4: bool = c
            .query_one(
                "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'",
                &[],
            )
            .await
            .expect("settings")
            .get(0);
        let row = c
            .query_one(
                "SELECT events, octet_length(body), pg_column_size(body), pg_column_compression(body)
                 FROM outbox",
                &[],
            )
            .await
            .expect("outbox row");
        let (events, raw, stored, method): (i32, i32, i32, Option<String>) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        assert_eq!(events, 2_000, "one packed row for the batch");
        assert!(stored < raw, "body stored compressed: {stored} of {raw} bytes");
        assert_eq!(method.as_deref(), Some(if lz4 { "lz4" } else { "pglz" }));
    }
}
