//! Upstream data: posts, users, follows and settings, pushed by their owners (service role),
//! and the cached reads of it every other service makes. Pushes go to storage first, then
//! replace the cached value here and drop it on the other nodes.

use crate::cache::Usage;
use crate::cache::ttl::TtlMap;
use crate::shared::Shared;
use crate::{ServiceError, ServiceResult};
use likewise_core::comment::record::CommentRecord;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::model::{PostMeta, UserProfile, ViewerSettings};
use likewise_core::ports::cluster::Invalidation;
use std::collections::HashSet;
use std::sync::Arc;

/// See the module documentation.
pub struct Upstream {
    shared: Arc<Shared>,
    posts: TtlMap<PostId, Option<PostMeta>>,
    usernames: TtlMap<UserId, Option<Arc<str>>>,
    settings: TtlMap<UserId, ViewerSettings>,
    followees: TtlMap<UserId, Arc<HashSet<UserId>>>,
}

impl Upstream {
    /// Upstream data over the shared stores, with caches sized by the options.
    pub fn new(shared: Arc<Shared>) -> Self {
        let (ttl, capacity) = (shared.opts.meta_ttl, shared.opts.meta_capacity);
        Upstream {
            posts: TtlMap::new("posts", ttl, capacity),
            usernames: TtlMap::new("users", ttl, capacity),
            settings: TtlMap::new("settings", ttl, capacity),
            followees: TtlMap::new("followees", ttl, capacity / 10 + 1),
            shared,
        }
    }

    /// A post's metadata, or 404.
    pub async fn require_post(&self, id: PostId) -> ServiceResult<PostMeta> {
        self.post_meta(id).await?.ok_or(ServiceError::NotFound("post"))
    }

    /// Usage of the caches (for `/metrics`).
    pub(crate) fn cache_usage(&self) -> [Usage; 4] {
        [self.posts.usage(), self.usernames.usage(), self.settings.usage(), self.followees.usage()]
    }

    /// Drop an entry another node announced, if it is one of these caches'.
    pub(crate) fn invalidate(&self, inv: Invalidation) {
        match inv {
            Invalidation::Post(p) => self.posts.remove(&p),
            Invalidation::User(u) => self.usernames.remove(&u),
            Invalidation::Follows(u) => self.followees.remove(&u),
            Invalidation::Settings(u) => self.settings.remove(&u),
            _ => {}
        }
    }

    /// Create or replace a post's metadata.
    pub async fn put_post(&self, id: PostId, meta: PostMeta) -> ServiceResult<()> {
        self.shared.stores.meta.put_post(id, meta).await?;
        self.posts.put(id, Some(meta));
        self.shared.announce(Invalidation::Post(id));
        Ok(())
    }

    /// Create or replace a user's profile.
    pub async fn put_user(&self, id: UserId, profile: UserProfile) -> ServiceResult<()> {
        let name: Arc<str> = profile.username.as_str().into();
        self.shared.stores.meta.put_user(id, profile).await?;
        self.usernames.put(id, Some(name));
        self.shared.announce(Invalidation::User(id));
        Ok(())
    }

    /// Make `follower` follow or unfollow `followee`.
    pub async fn set_follow(&self, follower: UserId, followee: UserId, follows: bool) -> ServiceResult<()> {
        self.shared.stores.meta.set_follow(follower, followee, follows).await?;
        self.followees.remove(&follower);
        self.shared.announce(Invalidation::Follows(follower));
        Ok(())
    }

    /// Store a viewer's settings.
    pub async fn put_settings(&self, user: UserId, settings: ViewerSettings) -> ServiceResult<()> {
        self.shared.stores.meta.put_settings(user, settings).await?;
        self.settings.put(user, settings);
        self.shared.announce(Invalidation::Settings(user));
        Ok(())
    }

    /// Change some of a viewer's settings: the stored ones (not a cached copy) with `change`
    /// applied, and each notification preference it changed recorded with the time (the
    /// notifier decides by the preference in force when an action was made). Returns the new
    /// settings.
    pub async fn update_settings(
        &self,
        user: UserId,
        change: impl FnOnce(&mut ViewerSettings),
    ) -> ServiceResult<ViewerSettings> {
        let mut s = self.shared.stores.meta.settings(user).await?;
        let before = s.notifications;
        change(&mut s);
        s.record_pref_changes(&before, crate::now_ms());
        self.put_settings(user, s).await?;
        Ok(s)
    }

    /// A viewer's settings (cached).
    pub async fn viewer_settings(&self, user: UserId) -> ServiceResult<ViewerSettings> {
        if let Some(s) = self.settings.get(&user) {
            return Ok(s);
        }
        let s = self.shared.stores.meta.settings(user).await?;
        self.settings.put(user, s);
        Ok(s)
    }

    /// One post's metadata (cached, including "unknown").
    pub async fn post_meta(&self, id: PostId) -> ServiceResult<Option<PostMeta>> {
        Ok(self.posts_meta(&[id]).await?.pop().flatten())
    }

    /// Metadata of each post, in order; misses are read from storage in one call.
    pub async fn posts_meta(&self, ids: &[PostId]) -> ServiceResult<Vec<Option<PostMeta>>> {
        let mut out: Vec<Option<Option<PostMeta>>> = ids.iter().map(|id| self.posts.get(id)).collect();
        let missing: Vec<PostId> =
            ids.iter().zip(&out).filter(|(_, o)| o.is_none()).map(|(id, _)| *id).collect();
        if !missing.is_empty() {
            let loaded = self.shared.stores.meta.posts(&missing).await?;
            let mut loaded_iter = missing.iter().zip(loaded);
            for slot in out.iter_mut().filter(|o| o.is_none()) {
                if let Some((id, meta)) = loaded_iter.next() {
                    self.posts.put(*id, meta);
                    *slot = Some(meta);
                }
            }
        }
        Ok(out.into_iter().map(Option::flatten).collect())
    }

    /// Comment records with `post_author` set to their post's current author: when a post is
    /// registered again with another author, the new author takes over its earlier comments
    /// (who may delete, approve and see held ones follows the post, not the copy a record
    /// kept from its creation).
    pub async fn with_current_authors(
        &self,
        mut recs: Vec<Option<CommentRecord>>,
    ) -> ServiceResult<Vec<Option<CommentRecord>>> {
        let posts: Vec<PostId> = recs.iter().flatten().map(|r| r.post).collect();
        if posts.is_empty() {
            return Ok(recs);
        }
        let metas = self.posts_meta(&posts).await?;
        for (r, meta) in recs.iter_mut().flatten().zip(metas) {
            if let Some(meta) = meta {
                r.post_author = meta.author;
            }
        }
        Ok(recs)
    }

    /// One comment record from storage (write paths: never from a cache), with its post's
    /// current author ([`Upstream::with_current_authors`]).
    pub async fn comment_record(&self, id: CommentId) -> ServiceResult<Option<CommentRecord>> {
        let r = self.shared.comment_record(id).await?;
        Ok(self.with_current_authors(vec![r]).await?.pop().flatten())
    }

    /// Comment records through the record cache (read paths), with their posts' current
    /// authors ([`Upstream::with_current_authors`]).
    pub async fn comment_records(&self, ids: &[CommentId]) -> ServiceResult<Vec<Option<CommentRecord>>> {
        let recs = self.shared.comment_records(ids).await?;
        self.with_current_authors(recs).await
    }

    /// Display names of each user, in order (`user<id>` for unregistered users).
    pub async fn usernames(&self, ids: &[UserId]) -> ServiceResult<Vec<String>> {
        let mut out: Vec<Option<Option<Arc<str>>>> = ids.iter().map(|id| self.usernames.get(id)).collect();
        let missing: Vec<UserId> =
            ids.iter().zip(&out).filter(|(_, o)| o.is_none()).map(|(id, _)| *id).collect();
        if !missing.is_empty() {
            let loaded = self.shared.stores.meta.users(&missing).await?;
            let mut loaded_iter = missing.iter().zip(loaded);
            for slot in out.iter_mut().filter(|o| o.is_none()) {
                if let Some((id, profile)) = loaded_iter.next() {
                    let name: Option<Arc<str>> = profile.map(|p| p.username.as_str().into());
                    self.usernames.put(*id, name.clone());
                    *slot = Some(name);
                }
            }
        }
        Ok(ids
            .iter()
            .zip(out)
            .map(|(id, name)| match name.flatten() {
                Some(n) => n.to_string(),
                None => UserProfile::placeholder_name(*id),
            })
            .collect())
    }

    /// The users `viewer` follows (cached; at most `max_followees`).
    pub async fn followees(&self, viewer: UserId) -> ServiceResult<Arc<HashSet<UserId>>> {
        if let Some(f) = self.followees.get(&viewer) {
            return Ok(f);
        }
        let list = self.shared.stores.meta.followees(viewer, self.shared.opts.max_followees).await?;
        let set = Arc::new(list.into_iter().collect::<HashSet<_>>());
        self.followees.put(viewer, set.clone());
        Ok(set)
    }
}
