//! Consumers' saved state (`SnapshotStore`): one value per name in `snapshots`, written in
//! the same batch as the consumer's offset in `offsets`.

use super::error::engine_err;
use super::state::EmbeddedStore;
use crate::keys::{num_value, parse_num};
use async_trait::async_trait;
use fjall::Readable;
use likewise_core::ports::{SnapshotSave, SnapshotStore};
use likewise_core::{StoreError, StoreResult};

/// The `offsets` key holding snapshot `name`'s writer fence.
fn fence_key(name: &str) -> String {
    format!("{name}#fence")
}

fn stored_fence(s: &super::state::Inner, name: &str) -> StoreResult<u64> {
    match s.offsets.get(fence_key(name)).map_err(engine_err)? {
        Some(v) => parse_num("offsets", &v),
        None => Ok(0),
    }
}

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

    async fn fence_snapshot(&self, name: &str) -> StoreResult<u64> {
        let s = &*self.inner;
        let _one_writer = s.snapshot_lock.lock();
        let next = stored_fence(s, name)? + 1;
        s.offsets.insert(fence_key(name), num_value(next)).map_err(engine_err)?;
        Ok(next)
    }

    async fn save_snapshots(&self, saves: &[SnapshotSave]) -> StoreResult<()> {
        let s = &*self.inner;
        // Checked and written under one lock: no new fence lands in between.
        let _one_writer = s.snapshot_lock.lock();
        let mut superseded = Vec::new();
        for sv in saves {
            if stored_fence(s, &sv.name)? != sv.fence {
                superseded.push(sv.name.as_str());
            }
        }
        if !superseded.is_empty() {
            return Err(StoreError::Superseded(superseded.join(",")));
        }
        let mut batch = s.db.batch();
        for sv in saves {
            batch.insert(&s.snapshots, sv.name.as_bytes(), &sv.body[..]);
            batch.insert(&s.offsets, sv.name.as_bytes(), num_value(sv.upto));
        }
        batch.commit().map_err(engine_err)
    }
}
