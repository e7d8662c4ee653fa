//! Derived counters and consumer offsets.
//!
//! A counter is written only by the aggregator of its shard, which commits the summed deltas
//! and the stream position they cover in ONE transaction on that shard: a consumer that
//! writes counters is per shard (`counters@3`), so its deltas and its offset always share a
//! database. Redelivered events at or below the stored offset are skipped by the consumer,
//! so nothing is counted twice. Consumers without `@shard` keep their offset on shard 0.

use super::{PgStore, i, outbox, pg_err, u};
use async_trait::async_trait;
use likewise_core::comment::status::CommentStatus;
use likewise_core::counter::{CounterField, CounterKey, Counts};
use likewise_core::ids::{CommentId, PostId};
use likewise_core::like::{Target, TargetKind};
use likewise_core::ports::{CounterStore, Recount};
use likewise_core::{StoreError, StoreResult};
use std::collections::HashMap;

/// Unrelayed outbox rows older than this mean the relay is behind or crashed between a
/// publish and its bookkeeping; a recount then cannot tell pending from applied, so it
/// refuses to repair (the next reconciliation will).
const UNSETTLED_MS: i64 = 1_000;

/// Status codes for SQL, from `likewise_core::comment::thread`'s rule: a counted comment's
/// (visible) and those of a parent that opens its thread, as a list.
fn thread_codes() -> (u8, String) {
    let open: Vec<String> =
        CommentStatus::ALL.iter().filter(|s| s.opens_thread()).map(|s| s.code().to_string()).collect();
    (CommentStatus::Visible.code(), open.join(", "))
}

fn field_code(f: CounterField) -> i16 {
    i16::from(f.code())
}

fn field_of(code: i16) -> Option<CounterField> {
    [CounterField::Likes, CounterField::Comments, CounterField::Replies]
        .into_iter()
        .find(|f| field_code(*f) == code)
}

impl PgStore {
    /// The shard holding `consumer`'s offset: `name@N` -> N, else 0.
    pub fn offset_shard(&self, consumer: &str) -> StoreResult<usize> {
        match consumer.rsplit_once('@') {
            Some((_, n)) => match n.parse::<usize>() {
                Ok(s) if s < self.shard_count() => Ok(s),
                _ => Err(StoreError::Engine(format!(
                    "consumer {consumer:?} names no shard of {}",
                    self.shard_count()
                ))),
            },
            None => Ok(0),
        }
    }

    /// Store `consumer`'s offset (monotonic) outside a counter commit.
    pub async fn set_offset(&self, consumer: &str, upto: u64) -> StoreResult<()> {
        let c = self.conn(self.offset_shard(consumer)?).await?;
        c.execute(
            "INSERT INTO consumer_offsets (consumer, upto) VALUES ($1, $2)
             ON CONFLICT (consumer) DO UPDATE SET upto = GREATEST(consumer_offsets.upto, EXCLUDED.upto)",
            &[&consumer, &i(upto)],
        )
        .await
        .map_err(pg_err)?;
        Ok(())
    }

    /// Recount in one snapshot: the rows (`rows_sql` with $1 kind, $2 id), the counter
    /// (`key`), and the deltas `pending_of` finds in the outbox rows of partition `part` that
    /// `consumer` has not applied yet.
    async fn recount(
        &self,
        consumer: &str,
        shard: usize,
        rows_sql: &str,
        key: (i16, i64, i16),
        part: u64,
        pending_of: impl Fn(&likewise_core::event::Event) -> i64,
    ) -> StoreResult<Recount> {
        let sql = format!("SELECT $2::bigint, ({rows_sql})");
        let one =
            self.recount_many(consumer, shard, &sql, key, part, |e| Some((key.1, pending_of(e)))).await?;
        Ok(one.into_iter().next().map_or(Recount { rows: 0, counter: 0, pending: 0 }, |(_, r)| r))
    }

    /// Recount several counters of one kind and field in one snapshot: `rows_sql` (with $1
    /// the kind and $2 the ID of `key`, the post for a post's comments) selects each target
    /// and its rows; each target's counter (of `key`'s kind and field);
    /// and the deltas `pending_of` assigns to a target in the outbox rows of partition
    /// `part` that `consumer` has not applied yet. In the order `rows_sql` gives.
    async fn recount_many(
        &self,
        consumer: &str,
        shard: usize,
        rows_sql: &str,
        key: (i16, i64, i16),
        part: u64,
        pending_of: impl Fn(&likewise_core::event::Event) -> Option<(i64, i64)>,
    ) -> StoreResult<Vec<(i64, Recount)>> {
        // A shard's aggregator recounts only its own shard's targets. After a move its hot
        // posts include some that now live elsewhere: its offset is not kept there (read there
        // it is 0), so every event in that shard's outbox counted as pending, a false drift
        // (`apply_deltas` then refused the misplaced repair, failing the whole step).
        if consumer.contains('@') && self.offset_shard(consumer)? != shard {
            return Err(StoreError::Engine(format!(
                "{consumer} recounts its own shard's targets; this one is on shard {shard} now"
            )));
        }
        let mut c = self.conn(shard).await?;
        let tx = c
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(pg_err)?;
        let offset: i64 = tx
            .query_opt("SELECT upto FROM consumer_offsets WHERE consumer = $1", &[&consumer])
            .await
            .map_err(pg_err)?
            .map_or(0, |r| r.get(0));
        let rows: Vec<(i64, i64)> = tx
            .query(rows_sql, &[&key.0, &key.1])
            .await
            .map_err(pg_err)?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let targets: Vec<i64> = rows.iter().map(|(t, _)| *t).collect();
        let counters: HashMap<i64, i64> = tx
            .query(
                "SELECT target, value FROM counters WHERE kind = $1 AND target = ANY($2) AND field = $3",
                &[&key.0, &targets, &key.2],
            )
            .await
            .map_err(pg_err)?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let outbox = self.unapplied_outbox(&tx, part, offset).await?;
        tx.commit().await.map_err(pg_err)?;
        let mut pending: HashMap<i64, i64> = HashMap::new();
        for e in self.pending_events(&outbox, offset, key)? {
            if let Some((t, d)) = pending_of(&e) {
                *pending.entry(t).or_insert(0) += d;
            }
        }
        Ok(rows
            .into_iter()
            .map(|(t, rows)| {
                let counter = counters.get(&t).copied().unwrap_or(0);
                (t, Recount { rows, counter, pending: pending.get(&t).copied().unwrap_or(0) })
            })
            .collect())
    }

    /// The outbox rows of partition `part` not applied at `offset` yet: with stream
    /// positions, rows not relayed or relayed past the offset; read directly, rows holding
    /// positions past it.
    async fn unapplied_outbox(
        &self,
        tx: &tokio_postgres::Transaction<'_>,
        part: u64,
        offset: i64,
    ) -> StoreResult<Vec<tokio_postgres::Row>> {
        if self.stream_positions() {
            tx.query(
                "SELECT seq, body, stream_seq IS NULL, created_ms FROM outbox
                 WHERE part = $1 AND (stream_seq IS NULL OR stream_seq > $2)",
                &[&(part as i16), &offset],
            )
            .await
        } else {
            tx.query(
                "SELECT seq, body, false, created_ms FROM outbox WHERE part = $1 AND seq >= $2",
                &[&(part as i16), &(offset >> outbox::INDEX_BITS)],
            )
            .await
        }
        .map_err(pg_err)
    }

    /// The events of `outbox` rows (from [`PgStore::unapplied_outbox`]) not applied at
    /// `offset`; an error when a row waits for the relay too long to tell.
    fn pending_events(
        &self,
        outbox: &[tokio_postgres::Row],
        offset: i64,
        key: (i16, i64, i16),
    ) -> StoreResult<Vec<likewise_core::event::Event>> {
        let now = i(likewise_engine::now_ms());
        let mut out = Vec::new();
        for r in outbox {
            let seq = u(r.get(0));
            if r.get::<_, bool>(2) && now - r.get::<_, i64>(3) > UNSETTLED_MS {
                return Err(StoreError::Engine(format!(
                    "events of {key:?} are waiting for the outbox relay; not reconciled now"
                )));
            }
            for e in outbox::unpack(r.get::<_, &[u8]>(1), |k| outbox::position(seq, k))? {
                if self.stream_positions() || e.seq > u(offset) {
                    out.push(e);
                }
            }
        }
        Ok(out)
    }
}

#[async_trait]
impl CounterStore for PgStore {
    async fn counts(&self, targets: &[Target]) -> StoreResult<Vec<Counts>> {
        let mut found: HashMap<Target, Counts> = HashMap::new();
        for (shard, idx) in self.group(targets, |t| self.shard_of_target(*t)) {
            let c = self.conn(shard).await?;
            metrics::counter!("likewise_shard_reads_total", "op" => "counts").increment(1);
            let kinds: Vec<i16> = idx.iter().map(|k| i16::from(targets[*k].kind.code())).collect();
            let ids: Vec<i64> = idx.iter().map(|k| i(targets[*k].id)).collect();
            let rows = c
                .query(
                    "SELECT c.kind, c.target, c.field, c.value FROM counters c
                     JOIN unnest($1::smallint[], $2::bigint[]) AS t(kind, target)
                       ON c.kind = t.kind AND c.target = t.target",
                    &[&kinds, &ids],
                )
                .await
                .map_err(pg_err)?;
            for r in rows {
                let kind = TargetKind::from_code(r.get::<_, i16>(0) as u8);
                let field = field_of(r.get(2));
                if let (Some(kind), Some(field)) = (kind, field) {
                    found.entry(Target { kind, id: u(r.get(1)) }).or_default().add(field, r.get(3));
                }
            }
        }
        Ok(targets.iter().map(|t| found.get(t).copied().unwrap_or_default()).collect())
    }

    async fn apply_deltas(
        &self,
        consumer: &str,
        from: u64,
        upto: u64,
        deltas: &[(CounterKey, i64)],
    ) -> StoreResult<Vec<(CounterKey, i64)>> {
        let shard = self.offset_shard(consumer)?;
        let misplaced =
            |pg: &Self| deltas.iter().find(|(k, _)| pg.shard_of_target(k.target) != shard).copied();
        // A shard's events are of its own buckets: one placed elsewhere here means this
        // process has not read a move's switched catalog yet (its watcher reads it within
        // half a second), so read it now before calling it a fault.
        if misplaced(self).is_some() {
            self.refresh_placement().await?;
        }
        if let Some((k, _)) = misplaced(self) {
            return Err(StoreError::Engine(format!(
                "consumer {consumer:?} keeps its offset on shard {shard} but was given a delta for {:?} on shard {}",
                k.target,
                self.shard_of_target(k.target)
            )));
        }
        let mut c = self.conn(shard).await?;
        let tx = c.transaction().await.map_err(pg_err)?;
        // The offset row is locked for the commit. Compare and set: an offset other than the
        // one this batch starts from means another process applied this consumer's events
        // meanwhile (a standby, while a partitioned holder's commit was still in flight), or
        // an earlier attempt committed though its answer was lost: refuse (no double count).
        let cur: i64 = tx
            .query_opt("SELECT upto FROM consumer_offsets WHERE consumer = $1 FOR UPDATE", &[&consumer])
            .await
            .map_err(pg_err)?
            .map_or(0, |r| r.get(0));
        if u(cur) != from {
            return Err(StoreError::Engine(format!(
                "consumer {consumer:?} is at {cur}, not {from}: its offset moved; re-read it"
            )));
        }
        let mut out = Vec::with_capacity(deltas.len());
        if !deltas.is_empty() {
            let kinds: Vec<i16> = deltas.iter().map(|(k, _)| i16::from(k.target.kind.code())).collect();
            let ids: Vec<i64> = deltas.iter().map(|(k, _)| i(k.target.id)).collect();
            let fields: Vec<i16> = deltas.iter().map(|(k, _)| field_code(k.field)).collect();
            let values: Vec<i64> = deltas.iter().map(|(_, d)| *d).collect();
            let rows = tx
                .query(
                    "INSERT INTO counters (kind, target, field, value)
                     SELECT * FROM unnest($1::smallint[], $2::bigint[], $3::smallint[], $4::bigint[])
                     ON CONFLICT (kind, target, field) DO UPDATE SET value = counters.value + EXCLUDED.value
                     RETURNING kind, target, field, value",
                    &[&kinds, &ids, &fields, &values],
                )
                .await
                .map_err(pg_err)?;
            for r in rows {
                let kind = TargetKind::from_code(r.get::<_, i16>(0) as u8);
                let field = field_of(r.get(2));
                if let (Some(kind), Some(field)) = (kind, field) {
                    out.push((CounterKey { target: Target { kind, id: u(r.get(1)) }, field }, r.get(3)));
                }
            }
        }
        tx.execute(
            "INSERT INTO consumer_offsets (consumer, upto) VALUES ($1, $2)
             ON CONFLICT (consumer) DO UPDATE SET upto = EXCLUDED.upto",
            &[&consumer, &i(upto)],
        )
        .await
        .map_err(pg_err)?;
        tx.commit().await.map_err(pg_err)?;
        Ok(out)
    }

    async fn offset(&self, consumer: &str) -> StoreResult<u64> {
        let c = self.conn(self.offset_shard(consumer)?).await?;
        let row = c
            .query_opt("SELECT upto FROM consumer_offsets WHERE consumer = $1", &[&consumer])
            .await
            .map_err(pg_err)?;
        Ok(row.map_or(0, |r| u(r.get(0))))
    }

    async fn recount_likes(&self, consumer: &str, target: Target) -> StoreResult<Recount> {
        let shard = self.shard_of_target(target);
        // A like's events are filed under the partition of the post its target belongs to.
        let post = match target.kind {
            TargetKind::Post => target.id,
            TargetKind::Comment => {
                let c = self.conn(shard).await?;
                c.query_opt(
                    "SELECT post_id FROM comments WHERE id = $1
                     UNION ALL SELECT post_id FROM likes WHERE kind = 2 AND target = $1 LIMIT 1",
                    &[&i(target.id)],
                )
                .await
                .map_err(pg_err)?
                .map_or(0, |r| u(r.get(0)))
            }
        };
        self.recount(
            consumer,
            shard,
            "SELECT count(*) FROM likes WHERE kind = $1 AND target = $2",
            (i16::from(target.kind.code()), i(target.id), field_code(CounterField::Likes)),
            post % crate::stream::PARTITIONS,
            |e| if e.kind.is_like() && e.target == target { e.delta() } else { 0 },
        )
        .await
    }

    async fn recount_comments(&self, consumer: &str, post: PostId) -> StoreResult<Recount> {
        // `comment::thread::counted`: visible, and a reply under a parent that opens its thread.
        let (visible, open) = thread_codes();
        let rows_sql = format!(
            "SELECT count(*) FROM comments c LEFT JOIN comments p ON p.id = c.parent
             WHERE c.post_id = $2 AND c.status = {visible} AND $1::smallint IS NOT NULL
               AND (c.parent IS NULL OR p.status IN ({open}))"
        );
        self.recount(
            consumer,
            self.shard_of_post(post),
            &rows_sql,
            (i16::from(TargetKind::Post.code()), i(post.0), field_code(CounterField::Comments)),
            post.0 % crate::stream::PARTITIONS,
            |e| if !e.kind.is_like() && e.post == post.0 { e.delta() } else { 0 },
        )
        .await
    }

    async fn recount_replies(&self, consumer: &str, post: PostId) -> StoreResult<Vec<(CommentId, Recount)>> {
        // Every top-level comment of the post with replies, and its counted replies.
        let (visible, open) = thread_codes();
        let rows_sql = format!(
            "SELECT c.parent, count(*) FILTER (WHERE c.status = {visible} AND p.status IN ({open}))
             FROM comments c JOIN comments p ON p.id = c.parent
             WHERE c.post_id = $2 AND $1::smallint IS NOT NULL
             GROUP BY c.parent ORDER BY c.parent"
        );
        let key = (i16::from(TargetKind::Comment.code()), i(post.0), field_code(CounterField::Replies));
        let pending = |e: &likewise_core::event::Event| {
            (!e.kind.is_like() && e.post == post.0 && e.parent != 0).then(|| (i(e.parent), e.delta()))
        };
        let shard = self.shard_of_post(post);
        let part = post.0 % crate::stream::PARTITIONS;
        let all = self.recount_many(consumer, shard, &rows_sql, key, part, pending).await?;
        Ok(all.into_iter().map(|(t, r)| (CommentId(u(t)), r)).collect())
    }

    async fn fresh_post_likes(&self, consumer: &str, posts: &[PostId]) -> StoreResult<Vec<i64>> {
        let mut out = vec![0i64; posts.len()];
        for (shard, idx) in self.group(posts, |p| self.shard_of_post(*p)) {
            let name = likewise_core::ports::cluster::shard_consumer(consumer, shard);
            let ids: Vec<i64> = idx.iter().map(|k| i(posts[*k].0)).collect();
            let mut c = self.conn(shard).await?;
            let tx = c
                .build_transaction()
                .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()
                .await
                .map_err(pg_err)?;
            let offset: i64 = tx
                .query_opt("SELECT upto FROM consumer_offsets WHERE consumer = $1", &[&name])
                .await
                .map_err(pg_err)?
                .map_or(0, |r| r.get(0));
            let post_kind = i16::from(TargetKind::Post.code());
            let mut fresh: HashMap<u64, i64> = ids.iter().map(|p| (u(*p), 0)).collect();
            let counters = tx
                .query(
                    "SELECT target, value FROM counters WHERE kind = $1 AND target = ANY($2) AND field = $3",
                    &[&post_kind, &ids, &field_code(CounterField::Likes)],
                )
                .await
                .map_err(pg_err)?;
            fresh.extend(counters.iter().map(|r| (u(r.get(0)), r.get::<_, i64>(1))));
            let mut parts: Vec<u64> = ids.iter().map(|p| u(*p) % crate::stream::PARTITIONS).collect();
            parts.sort_unstable();
            parts.dedup();
            let mut outbox = Vec::new();
            for part in parts {
                outbox.extend(self.unapplied_outbox(&tx, part, offset).await?);
            }
            tx.commit().await.map_err(pg_err)?;
            // Unlike a recount, rows still waiting for the relay simply count: every event
            // in the outbox is committed, relayed or not.
            for r in &outbox {
                let seq = u(r.get(0));
                for e in outbox::unpack(r.get::<_, &[u8]>(1), |k| outbox::position(seq, k))? {
                    let applied = !self.stream_positions() && e.seq <= u(offset);
                    if !applied
                        && e.kind.is_like()
                        && e.target.kind == TargetKind::Post
                        && let Some(v) = fresh.get_mut(&e.target.id)
                    {
                        *v += e.delta();
                    }
                }
            }
            for k in idx {
                out[k] = fresh.get(&posts[k].0).copied().unwrap_or(0);
            }
        }
        Ok(out)
    }

    async fn counted_posts(&self, after: Option<PostId>, limit: usize) -> StoreResult<Vec<PostId>> {
        let mut all = Vec::new();
        for shard in 0..self.shard_count() {
            let c = self.conn(shard).await?;
            let rows = c
                .query(
                    "SELECT target FROM counters WHERE kind = $1 AND field = $2 AND target > $3
                     ORDER BY target LIMIT $4",
                    &[
                        &i16::from(TargetKind::Post.code()),
                        &field_code(CounterField::Likes),
                        &after.map_or(-1, |p| i(p.0)),
                        &(limit as i64),
                    ],
                )
                .await
                .map_err(pg_err)?;
            all.extend(rows.iter().map(|r| PostId(u(r.get(0)))));
        }
        all.sort();
        all.truncate(limit);
        Ok(all)
    }
}

/// Slots of a sharded counter row set (docs/architecture.md, "The counter"). A directly written counter (one that does
/// not come from the event stream, e.g. a raw event tally bumped by request handlers) spreads
/// its increments over `SLOTS` rows so concurrent writers rarely wait on one row lock; the
/// reader sums them.
pub const SLOTS: i16 = 64;

impl PgStore {
    /// Add `delta` to the directly written counter `name` (on `shard`), in a random slot.
    pub async fn add_sharded(&self, shard: usize, name: &str, delta: i64) -> StoreResult<()> {
        let slot: i16 = rand::random_range(0..SLOTS);
        let c = self.conn(shard).await?;
        c.execute(
            "INSERT INTO counter_slots (name, slot, value) VALUES ($1, $2, $3)
             ON CONFLICT (name, slot) DO UPDATE SET value = counter_slots.value + EXCLUDED.value",
            &[&name, &slot, &delta],
        )
        .await
        .map_err(pg_err)?;
        Ok(())
    }

    /// The total of the directly written counter `name` (the sum of its slots).
    pub async fn sharded_total(&self, shard: usize, name: &str) -> StoreResult<i64> {
        let c = self.conn(shard).await?;
        let r = c
            .query_one("SELECT COALESCE(SUM(value), 0)::bigint FROM counter_slots WHERE name = $1", &[&name])
            .await
            .map_err(pg_err)?;
        Ok(r.get(0))
    }
}

#[cfg(test)]
mod tests {
    use crate::postgres::testing::TestShards;

    /// 2,000 concurrent increments spread over slots and sum exactly.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sharded_counter_rows_sum_exactly_under_concurrency() {
        let t = TestShards::create(1).await;
        let s = t.store().await;
        let mut tasks = Vec::new();
        for w in 0..20 {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..100 {
                    s.add_sharded(0, "views:42", 1).await.expect("add");
                }
                w
            }));
        }
        for task in tasks {
            task.await.expect("join");
        }
        s.add_sharded(0, "views:42", -5).await.expect("subtract");
        assert_eq!(s.sharded_total(0, "views:42").await.expect("total"), 1_995);
        assert_eq!(s.sharded_total(0, "views:43").await.expect("other"), 0);
        let c = s.conn(0).await.expect("conn");
        let slots: i64 = c
            .query_one("SELECT count(*) FROM counter_slots WHERE name = 'views:42'", &[])
            .await
            .expect("slots")
            .get(0);
        assert!(slots > 10, "increments were spread over slots ({slots})");
    }
}
