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
use likewise_core::StoreResult;
use likewise_core::counter::{CounterField, CounterKey};
use likewise_core::event::{EVENT_V2_LEN, Event};
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::like::{Target, TargetKind};
use likewise_core::notify::{NotifKey, NotifKind};
use likewise_core::ports::EventLog;
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
    /// A post's top-comments ranking (pins or a ranked comment's status changed).
    Top(PostId),
    /// A comment record (its status changed or it was deleted).
    Comment(CommentId),
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
            Invalidation::Comment(c) => format!("comment {}", c.0),
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
            "comment" => Invalidation::Comment(CommentId(a)),
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

/// Most counter values per bus message (keeps messages far below NATS's 1 MiB).
pub const COUNTERS_PER_MESSAGE: usize = 4_096;

/// Wire form of an aggregator commit: the log position, new absolute counter values and the
/// events that matter to rankings (comment events and comment likes).
pub fn encode_counters(epoch: u64, values: &[(CounterKey, i64)], events: &[Event]) -> Vec<u8> {
    let mut b = Vec::with_capacity(16 + values.len() * 18 + events.len() * (8 + EVENT_V2_LEN));
    b.extend_from_slice(&epoch.to_be_bytes());
    b.extend_from_slice(&(values.len() as u32).to_be_bytes());
    for (k, v) in values {
        b.push(k.target.kind.code());
        b.extend_from_slice(&k.target.id.to_be_bytes());
        b.push(k.field.code());
        b.extend_from_slice(&v.to_be_bytes());
    }
    b.extend_from_slice(&(events.len() as u32).to_be_bytes());
    for e in events {
        b.extend_from_slice(&e.seq.to_be_bytes());
        b.extend_from_slice(&e.encode());
    }
    b
}

/// A decoded aggregator commit.
pub type CounterUpdate = (u64, Vec<(CounterKey, i64)>, Vec<Event>);

/// Parse [`encode_counters`]'s form.
pub fn decode_counters(b: &[u8]) -> Option<CounterUpdate> {
    let mut at = 0usize;
    let mut take = |n: usize| -> Option<&[u8]> {
        let s = b.get(at..at + n)?;
        at += n;
        Some(s)
    };
    let u64_of = |s: &[u8]| s.try_into().ok().map(u64::from_be_bytes);
    let epoch = u64_of(take(8)?)?;
    let n = u32::from_be_bytes(take(4)?.try_into().ok()?) as usize;
    let mut values = Vec::with_capacity(n.min(COUNTERS_PER_MESSAGE));
    for _ in 0..n {
        let kind = TargetKind::from_code(take(1)?[0])?;
        let id = u64_of(take(8)?)?;
        let field = CounterField::from_code(take(1)?[0])?;
        let v = i64::from_be_bytes(take(8)?.try_into().ok()?);
        values.push((CounterKey { target: Target { kind, id }, field }, v));
    }
    let m = u32::from_be_bytes(take(4)?.try_into().ok()?) as usize;
    let mut events = Vec::with_capacity(m.min(COUNTERS_PER_MESSAGE));
    for _ in 0..m {
        let seq = u64_of(take(8)?)?;
        events.push(Event::decode(seq, take(EVENT_V2_LEN)?).ok()?);
    }
    (at == b.len()).then_some((epoch, values, events))
}

/// Does a ranking depend on this event? (comment changes and comment likes, not post likes)
pub fn matters_to_ranking(e: &Event) -> bool {
    !e.kind.is_like() || e.target.kind == TargetKind::Comment
}

/// How a node tells the others (see the module docs).
pub trait Broadcast: Send + Sync {
    /// Announce a cache entry to drop.
    fn invalidate(&self, inv: Invalidation);
    /// Send stored inbox changes to every node's live listeners.
    fn notifications(&self, items: &[NotifItem]);
    /// Send an aggregator commit (new counter values, ranking events) to every node.
    fn counters(&self, epoch: u64, values: &[(CounterKey, i64)], events: &[Event]);
}

/// The ranking-relevant events an API node received from the aggregators, as an event log
/// its ranker reads (positions are local). Bounded: the oldest are dropped when a slow
/// ranker falls far behind (rankings are a cache; the next read recomputes).
#[derive(Default)]
pub struct LocalLog {
    inner: parking_lot::Mutex<(u64, std::collections::VecDeque<Event>)>,
}

const LOCAL_LOG_CAP: usize = 100_000;

impl LocalLog {
    /// Append events (their `seq` is replaced by local positions).
    pub fn push(&self, events: &[Event]) {
        let mut g = self.inner.lock();
        for e in events {
            g.0 += 1;
            let mut e = *e;
            e.seq = g.0;
            g.1.push_back(e);
        }
        while g.1.len() > LOCAL_LOG_CAP {
            g.1.pop_front();
        }
    }
}

#[async_trait::async_trait]
impl EventLog for LocalLog {
    async fn read_after(&self, after: u64, max: usize) -> StoreResult<Vec<Event>> {
        let g = self.inner.lock();
        Ok(g.1.iter().filter(|e| e.seq > after).take(max).copied().collect())
    }
    async fn head(&self) -> StoreResult<u64> {
        Ok(self.inner.lock().0)
    }
    async fn truncate(&self, upto: u64) -> StoreResult<u64> {
        let mut g = self.inner.lock();
        let before = g.1.len();
        g.1.retain(|e| e.seq > upto);
        Ok((before - g.1.len()) as u64)
    }
    async fn committed(&self, upto: u64) -> StoreResult<()> {
        self.truncate(upto).await.map(|_| ())
    }
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

    /// The aggregator committed `values` up to `epoch`: update this node's count cache and
    /// send them to the other nodes with the ranking-relevant events.
    pub fn counters_committed(&self, epoch: u64, values: &[(CounterKey, i64)], events: &[Event]) {
        self.counts.publish(epoch, values, events);
        if let Some(b) = self.broadcast.get() {
            let ranking: Vec<Event> = events.iter().filter(|e| matters_to_ranking(e)).copied().collect();
            // This node's own ranker (role `all`) reads them too: the bus skips our own messages.
            self.remote_events.push(&ranking);
            b.counters(epoch, values, &ranking);
        }
    }

    /// An aggregator on another node committed: take its values, and queue its ranking
    /// events for this node's ranker (after the counts, so re-ranking sees them).
    pub fn apply_remote_counters(&self, epoch: u64, values: &[(CounterKey, i64)], events: &[Event]) {
        self.counts.publish(epoch, values, events);
        self.remote_events.push(events);
    }

    /// The ranking events received from other nodes (an API node's ranker reads them).
    pub fn remote_events(&self) -> Arc<LocalLog> {
        self.remote_events.clone()
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
            Invalidation::Comment(c) => self.records.forget(c),
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
            Invalidation::Comment(CommentId(10)),
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

    #[test]
    fn counter_updates_round_trip() {
        let values = vec![
            (CounterKey { target: Target::post(42), field: CounterField::Likes }, 500),
            (CounterKey { target: Target::comment(7), field: CounterField::Replies }, -1),
        ];
        let events = vec![Event::like(9, true, Target::comment(7), UserId(1), UserId(2), 1_000, 42)];
        let b = encode_counters(77, &values, &events);
        assert_eq!(decode_counters(&b), Some((77, values, events)));
        assert_eq!(decode_counters(&b[..b.len() - 1]), None);
        let mut longer = b.clone();
        longer.push(0);
        assert_eq!(decode_counters(&longer), None);
    }
}
