//! Consumers' saved state (`SnapshotStore`): `consumer_snapshots`, written in the same
//! transaction as the consumer's `consumer_offsets` row, on its offset shard.

use super::{PgStore, i, pg_err, u};
use async_trait::async_trait;
use likewise_core::StoreResult;
use likewise_core::ports::SnapshotStore;

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
}
