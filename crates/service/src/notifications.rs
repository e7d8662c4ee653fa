//! Inboxes: reading them, and the live feed of changed items for SSE listeners.
//!
//! Items name up to two actors (people the recipient follows first, then the most recent)
//! and count all distinct actors exactly: "alice, bob and 22 others liked your post".

use crate::{Engagement, ServiceResult};
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::notify::{NotifKind, render_text};
use likewise_core::ports::NotifItem;
use std::sync::Arc;
use tokio::sync::broadcast;

/// An inbox item as its recipient sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifView {
    /// Item ID.
    pub id: u64,
    /// Recipient.
    pub recipient: UserId,
    /// Kind.
    pub kind: NotifKind,
    /// The post.
    pub post: PostId,
    /// The latest comment concerned.
    pub comment: Option<CommentId>,
    /// Up to two names.
    pub actors: Vec<String>,
    /// Distinct actors (0: the item was withdrawn).
    pub actor_count: u64,
    /// Rendered text.
    pub text: String,
    /// Last change, ms since the epoch.
    pub updated_ms: u64,
}

/// The live feed (all recipients; each SSE listener keeps its own).
pub struct LiveFeed {
    tx: broadcast::Sender<Arc<NotifView>>,
    /// Live pushes per recipient: a burst of 30, then 60 a minute. Past it, a big account's
    /// changes only update the inbox aggregate (read on the next fetch or reconnect).
    pushes: governor::DefaultKeyedRateLimiter<UserId>,
    /// Flipped on shutdown so open streams end and the server can drain.
    closing: tokio::sync::watch::Sender<bool>,
}

impl Default for LiveFeed {
    fn default() -> Self {
        let per_minute = std::num::NonZeroU32::new(60).unwrap_or(std::num::NonZeroU32::MIN);
        let burst = std::num::NonZeroU32::new(30).unwrap_or(std::num::NonZeroU32::MIN);
        LiveFeed {
            tx: broadcast::channel(4096).0,
            pushes: governor::RateLimiter::keyed(governor::Quota::per_minute(per_minute).allow_burst(burst)),
            closing: tokio::sync::watch::channel(false).0,
        }
    }
}

impl Engagement {
    async fn notif_views(&self, items: Vec<NotifItem>) -> ServiceResult<Vec<NotifView>> {
        let mut out = Vec::with_capacity(items.len());
        for it in items {
            // People the recipient follows first: check (a bounded number of) followees
            // against the item's exact actor set, then fill with the most recent actors.
            let followees = self.followees(it.key.recipient).await?;
            let candidates: Vec<UserId> = followees.iter().copied().take(256).collect();
            let member = self.stores.notifications.notif_members(it.id, &candidates).await?;
            let mut pick: Vec<UserId> =
                candidates.iter().zip(member).filter(|(_, m)| *m).map(|(u, _)| *u).take(2).collect();
            for u in &it.recent {
                if pick.len() >= 2 {
                    break;
                }
                if !pick.contains(u) {
                    pick.push(*u);
                }
            }
            let actors = self.usernames(&pick).await?;
            let text = render_text(it.key.kind, &actors, it.actor_count);
            out.push(NotifView {
                id: it.id,
                recipient: it.key.recipient,
                kind: it.key.kind,
                post: it.key.post,
                comment: it.comment,
                actors,
                actor_count: it.actor_count,
                text,
                updated_ms: it.updated_ms,
            });
        }
        Ok(out)
    }

    /// Called by the notifier after it stored changes: push them to live listeners.
    pub async fn publish_notifications(&self, items: Vec<NotifItem>) -> ServiceResult<()> {
        if let Some(b) = self.broadcast.get() {
            b.notifications(&items);
        }
        self.push_live(items).await
    }

    /// Push stored inbox changes to this node's live listeners (the notifier's own node, or
    /// any node receiving them from the notifier's).
    pub async fn push_live(&self, items: Vec<NotifItem>) -> ServiceResult<()> {
        for v in self.notif_views(items).await? {
            if self.live.pushes.check_key(&v.recipient).is_err() {
                metrics::counter!("likewise_notification_pushes_suppressed_total").increment(1);
                continue;
            }
            // No listener is not an error.
            let _ = self.live.tx.send(Arc::new(v));
        }
        Ok(())
    }

    /// A recipient's inbox, most recently updated first.
    pub async fn inbox(
        &self,
        viewer: UserId,
        after: Option<(u64, u64)>,
        limit: usize,
    ) -> ServiceResult<(Vec<NotifView>, Option<(u64, u64)>)> {
        let mut items = self.stores.notifications.inbox(viewer, after, limit + 1).await?;
        let more = items.len() > limit;
        items.truncate(limit);
        let next = if more { items.last().map(|i| (i.updated_ms, i.id)) } else { None };
        Ok((self.notif_views(items).await?, next))
    }

    /// Subscribe to every inbox change (filter by recipient), and to the shutdown signal
    /// that ends live streams.
    pub fn subscribe_notifications(
        &self,
    ) -> (broadcast::Receiver<Arc<NotifView>>, tokio::sync::watch::Receiver<bool>) {
        (self.live.tx.subscribe(), self.live.closing.subscribe())
    }

    /// End every live stream (graceful shutdown cannot finish while they are open).
    pub fn close_live_streams(&self) {
        let _ = self.live.closing.send(true);
    }
}
