//! Consumers' saved state (`SnapshotStore`): one value per name in `snapshots`, written in
//! the same batch as the consumer's offset in `offsets`.

use super::error::engine_err;
use super::state::EmbeddedStore;
use crate::keys::{num_value, parse_num};
use async_trait::async_trait;
use fjall::Readable;
use likewise_core::StoreResult;
use likewise_core::ports::SnapshotStore;

#[async_trait]
impl SnapshotStore for EmbeddedStore {
    async fn load_snapshot(&self, name: &str) -> StoreResult<Option<(u64, Vec<u8>)>> {
        let s = &*self.inner;
        let snap = s.db.snapshot();
        let Some(body) = snap.get(&s.snapshots, name.as_bytes()).map_err(engine_err)? else {
            return Ok(None);
        };
        let upto = match snap.get(&s.offsets, name.as_bytes()).map_err(engine_err)? {
            Some(v) => parse_num("offsets", &v)?,
            None => 0,
        };
        Ok(Some((upto, body.to_vec())))
    }

    async fn save_snapshot(&self, name: &str, upto: u64, body: &[u8]) -> StoreResult<()> {
        let s = &*self.inner;
        let mut batch = s.db.batch();
        batch.insert(&s.snapshots, name.as_bytes(), body);
        batch.insert(&s.offsets, name.as_bytes(), num_value(upto));
        batch.commit().map_err(engine_err)
    }
}
