//! Unique-viewer sketches: `views` keyspace, post(8) -> version byte + HyperLogLog registers.

use super::{EmbeddedStore, engine_err};
use async_trait::async_trait;
use likewise_core::ids::PostId;
use likewise_core::ports::ViewStore;
use likewise_core::{StoreError, StoreResult};

const VIEWS_V1: u8 = 1;

#[async_trait]
impl ViewStore for EmbeddedStore {
    async fn load_views(&self, post: PostId) -> StoreResult<Option<Vec<u8>>> {
        match self.inner.views.get(post.0.to_be_bytes()).map_err(engine_err)? {
            None => Ok(None),
            Some(v) if v.first() == Some(&VIEWS_V1) => Ok(Some(v[1..].to_vec())),
            Some(_) => {
                Err(StoreError::Corrupt { keyspace: "views", detail: "unknown format version".into() })
            }
        }
    }

    async fn save_views(&self, sketches: &[(PostId, Vec<u8>)]) -> StoreResult<()> {
        let s = &*self.inner;
        let mut batch = s.db.batch();
        for (post, regs) in sketches {
            let mut v = Vec::with_capacity(1 + regs.len());
            v.push(VIEWS_V1);
            v.extend_from_slice(regs);
            batch.insert(&s.views, post.0.to_be_bytes(), v);
        }
        batch.commit().map_err(engine_err)?;
        self.persist_async().await
    }
}
