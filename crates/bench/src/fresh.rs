//! A fresh service on a temporary embedded store, post 1 (by user 1) registered: where the
//! in-process `comments` and `cold-post` benchmarks start.

use likewise_core::ids::{PostId, UserId};
use likewise_core::model::{CommentsPolicy, PostMeta};
use likewise_engine::Stores;
use likewise_service::Engagement;
use std::sync::Arc;

/// The service and its store. Fields drop in order: the directory goes after the store.
pub struct Fresh {
    /// The service, with the configuration's defaults.
    pub svc: Arc<Engagement>,
    /// Its storage ports.
    pub stores: Stores,
    _tmp: tempfile::TempDir,
}

/// Open a fresh store in a new temporary directory and register post 1.
pub async fn fresh() -> anyhow::Result<Fresh> {
    let (cfg, tmp) = crate::served::config(None, None, None)?;
    let stores = likewise_app::engines::open(&cfg).await?.stores;
    let svc = Engagement::new(stores.clone(), cfg.service_options());
    let meta = PostMeta { author: UserId(1), hide_like_count: false, comments: CommentsPolicy::Everyone };
    svc.upstream.put_post(PostId(1), meta).await?;
    Ok(Fresh { svc, stores, _tmp: tmp })
}
