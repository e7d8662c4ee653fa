//! Upstream data on the embedded engine: posts, users, follows, settings.

use super::error::engine_err;
use super::state::EmbeddedStore;
use crate::keys::{be_u64, pair_key};
use async_trait::async_trait;
use likewise_core::ids::{PostId, UserId};
use likewise_core::model::{PostMeta, UserProfile, ViewerSettings};
use likewise_core::ports::MetaStore;
use likewise_core::{StoreError, StoreResult};

fn corrupt(keyspace: &'static str) -> impl Fn(likewise_core::model::BadRecord) -> StoreError {
    move |e| StoreError::Corrupt { keyspace, detail: e.to_string() }
}

#[async_trait]
impl MetaStore for EmbeddedStore {
    async fn put_post(&self, id: PostId, meta: PostMeta) -> StoreResult<()> {
        let s = &*self.inner;
        s.posts.insert(id.0.to_be_bytes(), meta.encode()).map_err(engine_err)?;
        self.persist_async().await
    }

    async fn posts(&self, ids: &[PostId]) -> StoreResult<Vec<Option<PostMeta>>> {
        ids.iter()
            .map(|id| match self.inner.posts.get(id.0.to_be_bytes()).map_err(engine_err)? {
                Some(v) => PostMeta::decode(&v).map(Some).map_err(corrupt("posts")),
                None => Ok(None),
            })
            .collect()
    }

    async fn put_user(&self, id: UserId, profile: UserProfile) -> StoreResult<()> {
        self.inner.users.insert(id.0.to_be_bytes(), profile.encode()).map_err(engine_err)?;
        self.persist_async().await
    }

    async fn users(&self, ids: &[UserId]) -> StoreResult<Vec<Option<UserProfile>>> {
        ids.iter()
            .map(|id| match self.inner.users.get(id.0.to_be_bytes()).map_err(engine_err)? {
                Some(v) => UserProfile::decode(&v).map(Some).map_err(corrupt("users")),
                None => Ok(None),
            })
            .collect()
    }

    async fn set_follow(&self, follower: UserId, followee: UserId, follows: bool) -> StoreResult<()> {
        let s = &*self.inner;
        let mut batch = s.db.batch();
        let fwd = pair_key(follower.0, followee.0);
        let back = pair_key(followee.0, follower.0);
        if follows {
            batch.insert(&s.follows, fwd, []);
            batch.insert(&s.followers, back, []);
        } else {
            batch.remove(&s.follows, fwd);
            batch.remove(&s.followers, back);
        }
        batch.commit().map_err(engine_err)?;
        self.persist_async().await
    }

    async fn followees(&self, follower: UserId, limit: usize) -> StoreResult<Vec<UserId>> {
        let mut out = Vec::new();
        for g in self.inner.follows.prefix(follower.0.to_be_bytes()).take(limit) {
            let k = g.key().map_err(engine_err)?;
            out.push(UserId(be_u64(&k, 8)));
        }
        Ok(out)
    }

    async fn put_settings(&self, user: UserId, settings: ViewerSettings) -> StoreResult<()> {
        self.inner.settings.insert(user.0.to_be_bytes(), settings.encode()).map_err(engine_err)?;
        self.persist_async().await
    }

    async fn settings(&self, user: UserId) -> StoreResult<ViewerSettings> {
        match self.inner.settings.get(user.0.to_be_bytes()).map_err(engine_err)? {
            Some(v) => ViewerSettings::decode(&v).map_err(corrupt("settings")),
            None => Ok(ViewerSettings::default()),
        }
    }

    async fn ping(&self) -> StoreResult<()> {
        // Fails once the engine is poisoned by an I/O error (fjall refuses all writes then),
        // and while the disk is too full for writes to be taken (`space.rs`).
        self.inner.db.persist(fjall::PersistMode::Buffer).map_err(engine_err)?;
        self.inner.space.check()
    }
}
