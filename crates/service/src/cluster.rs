//! Keeping several API nodes in step (scale-out deployments).
//!
//! Each node caches upstream data and moderation state in process (TTL maps). A node that
//! changes one of them drops its own entry and announces an [`Invalidation`] on the
//! [`Broadcast`] (NATS core pub/sub in production); every other node drops the same entry.
//! Live notifications travel the same way: the worker that stores an inbox change sends it to
//! every node, and the node holding the recipient's SSE stream pushes it.
//!
//! Fire and forget: a lost message leaves an entry until its TTL, never loses data.

use crate::Engagement;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::notify::{NotifKey, NotifKind};
use likewise_core::ports::NotifItem;
use std::sync::Arc;

/// A cache entry other nodes must drop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalidation {
    /// A post's metadata.
    Post(PostId),
    /// A user's profile.
    User(UserId),
    /// Whom a user follows.
    Follows(UserId),
    /// A viewer's settings.
    Settings(UserId),
    /// Whom a user blocks.
    Blocks(UserId),
    /// Whether `.0` restricts `.1`.
    Restrict(UserId, UserId),
    /// A user's hidden words.
    HiddenWords(UserId),
    /// A post's top-comments ranking (pins changed).
    Top(PostId),
}

impl Invalidation {
    /// Wire form, e.g. `post 42`.
    pub fn encode(&self) -> String {
        match self {
            Invalidation::Post(p) => format!("post {}", p.0),
            Invalidation::User(u) => format!("user {}", u.0),
            Invalidation::Follows(u) => format!("follows {}", u.0),
            Invalidation::Settings(u) => format!("settings {}", u.0),
            Invalidation::Blocks(u) => format!("blocks {}", u.0),
            Invalidation::Restrict(a, b) => format!("restrict {} {}", a.0, b.0),
            Invalidation::HiddenWords(u) => format!("hidden {}", u.0),
            Invalidation::Top(p) => format!("top {}", p.0),
        }
    }

    /// Parse the wire form.
    pub fn decode(s: &str) -> Option<Self> {
        let mut it = s.split(' ');
        let kind = it.next()?;
        let a: u64 = it.next()?.parse().ok()?;
        let inv = match kind {
            "post" => Invalidation::Post(PostId(a)),
            "user" => Invalidation::User(UserId(a)),
            "follows" => Invalidation::Follows(UserId(a)),
            "settings" => Invalidation::Settings(UserId(a)),
            "blocks" => Invalidation::Blocks(UserId(a)),
            "restrict" => Invalidation::Restrict(UserId(a), UserId(it.next()?.parse().ok()?)),
            "hidden" => Invalidation::HiddenWords(UserId(a)),
            "top" => Invalidation::Top(PostId(a)),
            _ => return None,
        };
        it.next().is_none().then_some(inv)
    }
}

/// Wire form of an inbox item: space-separated numbers, recent actors comma-separated.
pub fn encode_item(it: &NotifItem) -> String {
    let recent: Vec<String> = it.recent.iter().map(|u| u.0.to_string()).collect();
    format!(
        "{} {} {} {} {} {} {} {}",
        it.id,
        it.key.recipient.0,
        it.key.post.0,
        it.key.kind.code(),
        it.comment.map_or(0, |c| c.0),
        it.actor_count,
        it.updated_ms,
        recent.join(",")
    )
}

/// Parse [`encode_item`]'s form.
pub fn decode_item(s: &str) -> Option<NotifItem> {
    let f: Vec<&str> = s.split(' ').collect();
    if f.len() != 8 {
        return None;
    }
    let n = |i: usize| f[i].parse::<u64>().ok();
    let recent = if f[7].is_empty() {
        Vec::new()
    } else {
        f[7].split(',').map(|u| u.parse().ok().map(UserId)).collect::<Option<Vec<_>>>()?
    };
    Some(NotifItem {
        id: n(0)?,
        key: NotifKey {
            recipient: UserId(n(1)?),
            post: PostId(n(2)?),
            kind: NotifKind::from_code(u8::try_from(n(3)?).ok()?)?,
        },
        comment: n(4).filter(|c| *c != 0).map(CommentId),
        actor_count: n(5)?,
        recent,
        updated_ms: n(6)?,
    })
}

/// How a node tells the others (see the module docs).
pub trait Broadcast: Send + Sync {
    /// Announce a cache entry to drop.
    fn invalidate(&self, inv: Invalidation);
    /// Send stored inbox changes to every node's live listeners.
    fn notifications(&self, items: &[NotifItem]);
}

impl Engagement {
    /// Join a deployment: announce changes through `b` from now on.
    pub fn set_broadcast(&self, b: Arc<dyn Broadcast>) {
        let _ = self.broadcast.set(b);
    }

    /// Tell the other nodes (no-op on a single node).
    pub(crate) fn announce(&self, inv: Invalidation) {
        if let Some(b) = self.broadcast.get() {
            b.invalidate(inv);
        }
    }

    /// Another node changed something: drop the local entry.
    pub fn apply_invalidation(&self, inv: Invalidation) {
        metrics::counter!("likewise_cluster_invalidations_total").increment(1);
        match inv {
            Invalidation::Post(p) => self.posts.remove(&p),
            Invalidation::User(u) => self.usernames.remove(&u),
            Invalidation::Follows(u) => self.followees.remove(&u),
            Invalidation::Settings(u) => self.settings.remove(&u),
            Invalidation::Blocks(u) => self.moderation.blocks.remove(&u),
            Invalidation::Restrict(a, b) => self.moderation.restricts.remove(&(a, b)),
            Invalidation::HiddenWords(u) => self.moderation.hidden.remove(&u),
            Invalidation::Top(p) => self.top.invalidate(p),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalidations_round_trip() {
        for inv in [
            Invalidation::Post(PostId(42)),
            Invalidation::User(UserId(7)),
            Invalidation::Follows(UserId(1)),
            Invalidation::Settings(UserId(2)),
            Invalidation::Blocks(UserId(3)),
            Invalidation::Restrict(UserId(4), UserId(5)),
            Invalidation::HiddenWords(UserId(6)),
            Invalidation::Top(PostId(9)),
        ] {
            assert_eq!(Invalidation::decode(&inv.encode()), Some(inv));
        }
        assert_eq!(Invalidation::decode("post"), None);
        assert_eq!(Invalidation::decode("post 1 2"), None);
        assert_eq!(Invalidation::decode("nope 1"), None);
    }

    #[test]
    fn items_round_trip() {
        let it = NotifItem {
            id: 130,
            key: NotifKey { recipient: UserId(7), post: PostId(42), kind: NotifKind::Replied },
            comment: Some(CommentId(99)),
            actor_count: 3,
            recent: vec![UserId(1), UserId(2)],
            updated_ms: 1_700_000_000_000,
        };
        assert_eq!(decode_item(&encode_item(&it)), Some(it.clone()));
        let none = NotifItem { comment: None, recent: Vec::new(), ..it };
        assert_eq!(decode_item(&encode_item(&none)), Some(none));
        assert_eq!(decode_item("1 2 3"), None);
    }
}
