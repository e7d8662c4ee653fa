//! Upstream data pushed by its owners (service role), and the cached reads of it used on
//! every request. Pushes go to storage first, then replace the cached value.

use crate::cluster::Invalidation;
use crate::{Engagement, ServiceResult};
use likewise_core::ids::{PostId, UserId};
use likewise_core::model::{PostMeta, UserProfile, ViewerSettings};
use std::collections::HashSet;
use std::sync::Arc;

impl Engagement {
    /// Create or replace a post's metadata.
    pub async fn put_post(&self, id: PostId, meta: PostMeta) -> ServiceResult<()> {
        self.stores.meta.put_post(id, meta).await?;
        self.posts.put(id, Some(meta));
        self.announce(Invalidation::Post(id));
        Ok(())
    }

    /// Create or replace a user's profile.
    pub async fn put_user(&self, id: UserId, profile: UserProfile) -> ServiceResult<()> {
        let name: Arc<str> = profile.username.as_str().into();
        self.stores.meta.put_user(id, profile).await?;
        self.usernames.put(id, Some(name));
        self.announce(Invalidation::User(id));
        Ok(())
    }

    /// Make `follower` follow or unfollow `followee`.
    pub async fn set_follow(&self, follower: UserId, followee: UserId, follows: bool) -> ServiceResult<()> {
        self.stores.meta.set_follow(follower, followee, follows).await?;
        self.followees.remove(&follower);
        self.announce(Invalidation::Follows(follower));
        Ok(())
    }

    /// Store a viewer's settings.
    pub async fn put_settings(&self, user: UserId, settings: ViewerSettings) -> ServiceResult<()> {
        self.stores.meta.put_settings(user, settings).await?;
        self.settings.put(user, settings);
        self.announce(Invalidation::Settings(user));
        Ok(())
    }

    /// A viewer's settings (cached).
    pub async fn viewer_settings(&self, user: UserId) -> ServiceResult<ViewerSettings> {
        if let Some(s) = self.settings.get(&user) {
            return Ok(s);
        }
        let s = self.stores.meta.settings(user).await?;
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
            let loaded = self.stores.meta.posts(&missing).await?;
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

    /// Display names of each user, in order (`user<id>` for unregistered users).
    pub async fn usernames(&self, ids: &[UserId]) -> ServiceResult<Vec<String>> {
        let mut out: Vec<Option<Option<Arc<str>>>> = ids.iter().map(|id| self.usernames.get(id)).collect();
        let missing: Vec<UserId> =
            ids.iter().zip(&out).filter(|(_, o)| o.is_none()).map(|(id, _)| *id).collect();
        if !missing.is_empty() {
            let loaded = self.stores.meta.users(&missing).await?;
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
        let list = self.stores.meta.followees(viewer, self.opts.max_followees).await?;
        let set = Arc::new(list.into_iter().collect::<HashSet<_>>());
        self.followees.put(viewer, set.clone());
        Ok(set)
    }
}
