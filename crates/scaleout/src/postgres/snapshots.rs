//! Consumers' saved state (`SnapshotStore`): `consumer_snapshots`, written in the same
//! transaction as the consumer's `consumer_offsets` row, on its offset shard.
//!
//! A partitioned consumer's snapshots are saved many at once under writer fences: each
//! name's fence is the `consumer_offsets` row `<name>#fence`, and a batch locks the fence
//! rows of its names first (in one order), checks them, then writes every body and offset,
//! all in one transaction. A successor's new fence waits for that lock, so it takes effect
//! either before the batch (which is then refused) or after it (and the successor loads
//! what it wrote).

use super::notifications::{fence_key, lock_fences};
use super::{PgStore, i, pg_err, u};
use async_trait::async_trait;
use likewise_core::ports::{SnapshotSave, SnapshotStore};
use likewise_core::{StoreError, StoreResult};
use std::collections::HashMap;

#[async_trait]
impl SnapshotStore for PgStore {
    async fn load_snapshot(&self, name: &str) -> StoreResult<Option<(u64, Vec<u8>)>> {
        let c = self.conn(self.offset_shard(name)?).await?;
        let row = c
            .query_opt(
                "SELECT s.body, COALESCE(o.upto, 0) FROM consumer_snapshots s
                 LEFT JOIN consumer_offsets o ON o.consumer = s.consumer WHERE s.consumer = $1",
                &[&name],
            )
            .await
            .map_err(pg_err)?;
        Ok(row.map(|r| (u(r.get(1)), r.get::<_, Vec<u8>>(0))))
    }

    async fn save_snapshot(&self, name: &str, upto: u64, body: &[u8]) -> StoreResult<()> {
        let mut c = self.conn(self.offset_shard(name)?).await?;
        let tx = c.transaction().await.map_err(pg_err)?;
        tx.execute(
            "INSERT INTO consumer_snapshots (consumer, body) VALUES ($1, $2)
             ON CONFLICT (consumer) DO UPDATE SET body = EXCLUDED.body",
            &[&name, &body],
        )
        .await
        .map_err(pg_err)?;
        tx.execute(
            "INSERT INTO consumer_offsets (consumer, upto) VALUES ($1, $2)
             ON CONFLICT (consumer) DO UPDATE SET upto = EXCLUDED.upto",
            &[&name, &i(upto)],
        )
        .await
        .map_err(pg_err)?;
        tx.commit().await.map_err(pg_err)
    }

    async fn load_snapshots(&self, names: &[String]) -> StoreResult<Vec<Option<(u64, Vec<u8>)>>> {
        let mut out = vec![None; names.len()];
        let mut by_shard: HashMap<usize, Vec<usize>> = HashMap::new();
        for (k, n) in names.iter().enumerate() {
            by_shard.entry(self.offset_shard(n)?).or_default().push(k);
        }
        for (shard, idx) in by_shard {
            let wanted: Vec<&str> = idx.iter().map(|k| names[*k].as_str()).collect();
            let c = self.conn(shard).await?;
            let rows = c
                .query(
                    "SELECT s.consumer, s.body, COALESCE(o.upto, 0) FROM consumer_snapshots s
                     LEFT JOIN consumer_offsets o ON o.consumer = s.consumer WHERE s.consumer = ANY($1)",
                    &[&wanted],
                )
                .await
                .map_err(pg_err)?;
            let mut found: HashMap<String, (u64, Vec<u8>)> =
                rows.iter().map(|r| (r.get(0), (u(r.get(2)), r.get(1)))).collect();
            for k in idx {
                out[k] = found.remove(&names[k]);
            }
        }
        Ok(out)
    }

    async fn fence_snapshot(&self, name: &str) -> StoreResult<u64> {
        let c = self.conn(self.offset_shard(name)?).await?;
        let row = c
            .query_one(
                "INSERT INTO consumer_offsets (consumer, upto) VALUES ($1, 1)
                 ON CONFLICT (consumer) DO UPDATE SET upto = consumer_offsets.upto + 1 RETURNING upto",
                &[&fence_key(name)],
            )
            .await
            .map_err(pg_err)?;
        Ok(u(row.get(0)))
    }

    async fn save_snapshots(&self, saves: &[SnapshotSave]) -> StoreResult<()> {
        let Some(first) = saves.first() else { return Ok(()) };
        let home = self.offset_shard(&first.name)?;
        for s in saves {
            if self.offset_shard(&s.name)? != home {
                return Err(StoreError::Engine(format!(
                    "snapshots {} and {} keep their offsets on different shards",
                    first.name, s.name
                )));
            }
        }
        let mut c = self.conn(home).await?;
        let tx = c.transaction().await.map_err(pg_err)?;
        lock_fences(&tx, saves.iter().map(|s| (s.name.as_str(), s.fence))).await?;
        let names: Vec<&str> = saves.iter().map(|s| s.name.as_str()).collect();
        let bodies: Vec<&[u8]> = saves.iter().map(|s| &s.body[..]).collect();
        let uptos: Vec<i64> = saves.iter().map(|s| i(s.upto)).collect();
        tx.execute(
            "INSERT INTO consumer_snapshots (consumer, body) SELECT * FROM unnest($1::text[], $2::bytea[])
             ON CONFLICT (consumer) DO UPDATE SET body = EXCLUDED.body",
            &[&names, &bodies],
        )
        .await
        .map_err(pg_err)?;
        tx.execute(
            "INSERT INTO consumer_offsets (consumer, upto) SELECT * FROM unnest($1::text[], $2::bigint[])
             ON CONFLICT (consumer) DO UPDATE SET upto = EXCLUDED.upto",
            &[&names, &uptos],
        )
        .await
        .map_err(pg_err)?;
        tx.commit().await.map_err(pg_err)
    }
}
