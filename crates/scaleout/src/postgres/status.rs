//! `likewise shards status`: what each shard holds and how its replica keeps up, with the
//! placement and its limits, for operators.
//!
//! Read-only and cheap: sizes come from `pg_total_relation_size` and row counts from the
//! planner's estimates (`reltuples`), never from a scan of a large table.

use super::{PgStore, migrate, pg_err};
use likewise_core::StoreResult;

/// The tables most of a shard's bytes live in.
const TABLES: [&str; 7] =
    ["likes", "user_likes", "liker_pages", "comments", "notif_actors", "outbox", "counters"];

/// One table on one shard.
#[derive(Debug, Clone, PartialEq)]
pub struct TableSize {
    /// The table.
    pub table: &'static str,
    /// Estimated rows (the planner's statistics; -1 when never analysed).
    pub rows: i64,
    /// Bytes with its indexes and TOAST.
    pub bytes: i64,
}

/// A shard's streaming replica, as measured now.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaReport {
    /// Whether it is in recovery (a replica at all).
    pub in_recovery: bool,
    /// WAL bytes its replay trails the primary by.
    pub lag_bytes: Option<i64>,
    /// What the router saw (`store.postgres_replica_max_lag_ms`): serving reads now.
    pub serving: bool,
}

/// One shard.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardReport {
    /// Its index in `store.postgres_shards`.
    pub shard: usize,
    /// Buckets the placement puts on it (posts and users whose `id % buckets` is one of them
    /// live here).
    pub buckets: usize,
    /// The server's version string.
    pub version: String,
    /// Migrations this build expects that the shard lacks.
    pub missing_migrations: Vec<i32>,
    /// The whole database, bytes.
    pub database_bytes: i64,
    /// The largest tables.
    pub tables: Vec<TableSize>,
    /// Its replica, when one is configured (`Err`: it could not be asked).
    pub replica: Option<Result<ReplicaReport, String>>,
}

impl PgStore {
    /// Report on `shard` (an error when its primary cannot be reached).
    pub async fn shard_report(&self, shard: usize) -> StoreResult<ShardReport> {
        // The cause, not just "unreachable": a refused password and a dead port need different fixes.
        let c = self.conn_or_cause(shard).await.map_err(likewise_core::StoreError::Engine)?;
        let version: String = c.query_one("SHOW server_version", &[]).await.map_err(pg_err)?.get(0);
        let missing_migrations = migrate::missing(&c).await?;
        let database_bytes: i64 =
            c.query_one("SELECT pg_database_size(current_database())", &[]).await.map_err(pg_err)?.get(0);
        let names: Vec<&str> = TABLES.to_vec();
        let rows = c
            .query(
                "SELECT t.name, COALESCE(c.reltuples, -1)::int8, COALESCE(pg_total_relation_size(c.oid), 0)
                 FROM unnest($1::text[]) WITH ORDINALITY AS t(name, ord)
                 LEFT JOIN pg_class c ON c.oid = to_regclass(t.name)
                 ORDER BY t.ord",
                &[&names],
            )
            .await
            .map_err(pg_err)?;
        let tables = rows
            .iter()
            .zip(TABLES)
            .map(|(r, table)| TableSize { table, rows: r.get(1), bytes: r.get(2) })
            .collect();
        let replica = match self.replica_conn(shard).await {
            None => None,
            Some(Err(why)) => Some(Err(why)),
            Some(Ok(rc)) => {
                let primary_lsn: String =
                    c.query_one("SELECT pg_current_wal_lsn()::text", &[]).await.map_err(pg_err)?.get(0);
                let asked = rc
                    .query_one(
                        "SELECT pg_is_in_recovery(), pg_wal_lsn_diff($1::text::pg_lsn, pg_last_wal_replay_lsn())::int8",
                        &[&primary_lsn],
                    )
                    .await;
                let serving = self.replica_status(shard).is_some_and(|s| s.serving);
                Some(asked.map_err(|e| e.to_string()).map(|r| ReplicaReport {
                    in_recovery: r.get(0),
                    lag_bytes: r.get::<_, Option<i64>>(1).map(|b| b.max(0)),
                    serving,
                }))
            }
        };
        let buckets = self.placement().buckets_on(shard);
        Ok(ShardReport { shard, buckets, version, missing_migrations, database_bytes, tables, replica })
    }

    /// The placement rule and its limits, in words.
    pub fn placement_summary(&self) -> String {
        let p = self.placement();
        let catalog = if p.has_catalog() {
            format!("catalog version {} on shard 0", p.version)
        } else {
            "NO CATALOG YET (run `likewise migrate`): rows are placed by id % shards".to_string()
        };
        format!(
            "placement: {} buckets (post % {b} for post-keyed rows, user % {b} for user-keyed rows), each on \
             one shard; {catalog}. Comment and notification IDs carry a bucket, never a shard; at most {} \
             shards are possible (each must own a bucket). A shard added (`likewise shards add`, no restart) holds \
             nothing until `likewise shards rebalance` moves buckets onto it",
            p.buckets(),
            super::MAX_SHARDS,
            b = p.buckets(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::PgOptions;
    use super::super::testing::TestShards;
    use super::*;

    #[tokio::test]
    async fn a_report_counts_each_shards_rows_and_tells_a_primary_named_as_replica() {
        let t = TestShards::create(2).await;
        let c = t.client(1).await;
        c.batch_execute(
            "INSERT INTO likes (kind, target, user_id, post_id, liked_at)
             SELECT 1, 7, u, 7, 1000 + u FROM generate_series(1, 500) AS u;
             ANALYZE likes",
        )
        .await
        .expect("rows");
        // Shard 0's "replica" is shard 1's primary: reachable, but not in recovery.
        let pg = PgStore::open(&PgOptions {
            shards: t.urls.clone(),
            replicas: vec![t.urls[1].clone()],
            pool_size: 2,
            ..PgOptions::default()
        })
        .await
        .expect("connect");
        let (r0, r1) =
            (pg.shard_report(0).await.expect("shard 0"), pg.shard_report(1).await.expect("shard 1"));
        let likes = |r: &ShardReport| r.tables.iter().find(|s| s.table == "likes").expect("likes").clone();
        assert_eq!(likes(&r1).rows, 500);
        assert!(likes(&r1).bytes > likes(&r0).bytes, "{r0:?} {r1:?}");
        assert!(r0.missing_migrations.is_empty() && r1.missing_migrations.is_empty());
        assert_eq!(r0.tables.len(), TABLES.len());
        match &r0.replica {
            Some(Ok(rep)) => assert!(!rep.in_recovery && !rep.serving, "{rep:?}"),
            other => panic!("shard 0's replica: {other:?}"),
        }
        assert_eq!(r1.replica, None);
        assert_eq!((r0.buckets, r1.buckets), (2048, 2048));
        let summary = pg.placement_summary();
        assert!(summary.contains("4096 buckets") && summary.contains("catalog version 1"), "{summary}");
    }
}
