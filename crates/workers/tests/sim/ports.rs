//! The ports the real consumers call, served from the simulated world, with injected faults:
//! a failing call changes nothing (`Fault::Before`) or lands and then fails
//! (`Fault::After`, a commit whose answer was lost); either may also kill the caller.

use super::state::{DUPLICATE_WINDOW_MS, Fault, Msg, Push, SHARDS, Sim, StoredItem};
use super::stream::SimLog;
use async_trait::async_trait;
use likewise_core::counter::{CounterField, CounterKey, Counts};
use likewise_core::event::{Event, pack, unpack};
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::like::{Target, TargetKind};
use likewise_core::notify::{Change, ItemUpdate, NotifItem};
use likewise_core::ports::cluster::{
    Broadcast, EventStream, Invalidation, Outbox, OutboxRow, ReverseChange, ReverseIndex, Scope,
};
use likewise_core::ports::{CounterStore, EventLog, LikeReader, Liker, NotificationStore, Recount};
use likewise_core::{StoreError, StoreResult};
use std::sync::Arc;

/// Every simulated port, over one world.
#[derive(Clone)]
pub struct SimPorts(pub Sim);

fn not_simulated(what: &str) -> StoreError {
    StoreError::Engine(format!("{what} is not simulated"))
}

#[async_trait]
impl CounterStore for SimPorts {
    async fn counts(&self, targets: &[Target]) -> StoreResult<Vec<Counts>> {
        let w = self.0.lock();
        Ok(targets
            .iter()
            .map(|t| {
                let mut c = Counts::default();
                for f in [CounterField::Likes, CounterField::Comments, CounterField::Replies] {
                    c.add(f, w.counters.get(&CounterKey { target: *t, field: f }).copied().unwrap_or(0));
                }
                c
            })
            .collect())
    }

    async fn apply_deltas(
        &self,
        consumer: &str,
        from: u64,
        upto: u64,
        deltas: &[(CounterKey, i64)],
    ) -> StoreResult<Vec<(CounterKey, i64)>> {
        let mut w = self.0.lock();
        let fault = w.fault(true);
        if fault == Fault::Before {
            return Err(w.injected("apply_deltas before the commit"));
        }
        let stored = w.offsets.get(consumer).copied().unwrap_or(0);
        if stored != from {
            return Err(StoreError::Engine(format!("{consumer}: offset is {stored}, not {from}")));
        }
        let mut values = Vec::with_capacity(deltas.len());
        for (k, d) in deltas {
            let v = w.counters.entry(*k).or_insert(0);
            *v += d;
            values.push((*k, *v));
        }
        w.offsets.insert(consumer.to_string(), upto);
        if fault == Fault::After {
            return Err(w.injected("apply_deltas answer lost after the commit"));
        }
        Ok(values)
    }

    async fn offset(&self, consumer: &str) -> StoreResult<u64> {
        let mut w = self.0.lock();
        w.read_fault("reading an offset")?;
        Ok(w.offsets.get(consumer).copied().unwrap_or(0))
    }

    async fn recount_likes(&self, _consumer: &str, _target: Target) -> StoreResult<Recount> {
        Err(not_simulated("recount"))
    }

    async fn recount_comments(&self, _consumer: &str, _post: PostId) -> StoreResult<Recount> {
        Err(not_simulated("recount"))
    }

    async fn recount_replies(
        &self,
        _consumer: &str,
        _post: PostId,
    ) -> StoreResult<Vec<(CommentId, Recount)>> {
        Err(not_simulated("recount"))
    }

    async fn counted_posts(&self, _after: Option<PostId>, _limit: usize) -> StoreResult<Vec<PostId>> {
        Err(not_simulated("counted_posts"))
    }

    async fn fresh_post_likes(&self, _consumer: &str, _posts: &[PostId]) -> StoreResult<Vec<i64>> {
        Err(not_simulated("fresh_post_likes"))
    }
}

#[async_trait]
impl NotificationStore for SimPorts {
    async fn fence_notifications(&self, consumer: &str) -> StoreResult<u64> {
        let mut w = self.0.lock();
        let fence = w.offsets.entry(format!("{consumer}#fence")).or_insert(0);
        *fence += 1;
        Ok(*fence)
    }

    async fn commit_notifications(
        &self,
        commits: &[likewise_core::notify::NotifCommit],
        changes: &[Change],
    ) -> StoreResult<Vec<NotifItem>> {
        let mut w = self.0.lock();
        let fault = w.fault(true);
        if fault == Fault::Before {
            return Err(w.injected("apply_notifications before the commit"));
        }
        let superseded: Vec<&str> = commits
            .iter()
            .filter(|c| w.offsets.get(&format!("{}#fence", c.consumer)).copied().unwrap_or(0) != c.fence)
            .map(|c| c.consumer.as_str())
            .collect();
        if !superseded.is_empty() {
            return Err(likewise_core::StoreError::Superseded(superseded.join(",")));
        }
        // The same item arithmetic as the engines (`ItemUpdate`), over exact contributions,
        // and the same change stamps (on a clock that never moves: each batch's stamp is
        // just past the last).
        let stamp_keys: Vec<String> = commits.iter().map(|c| format!("{}#stamp", c.consumer)).collect();
        let last = stamp_keys.iter().filter_map(|k| w.offsets.get(k).copied()).max().unwrap_or(0);
        let stamp = likewise_core::notify::next_stamp(last, 0);
        let mut order = Vec::new();
        let mut work: std::collections::HashMap<_, (ItemUpdate, bool)> = Default::default();
        for ch in changes {
            let (key, actor) = (ch.key(), ch.actor());
            if let std::collections::hash_map::Entry::Vacant(slot) = work.entry(key) {
                let (item, existed) = match w.inbox.get(&key) {
                    Some(s) => (s.item.clone(), true),
                    None => {
                        let id = w.next_item;
                        w.next_item += 1;
                        let item = NotifItem {
                            id,
                            key,
                            comment: None,
                            actor_count: 0,
                            recent: Vec::new(),
                            updated_ms: 0,
                        };
                        (item, false)
                    }
                };
                slot.insert((ItemUpdate::new(item), existed));
                order.push(key);
            }
            if let Some((up, _)) = work.get_mut(&key) {
                if !up.knows(actor) {
                    let stored: Vec<u64> = w.inbox.get(&key).map_or_else(Vec::new, |s| {
                        s.actors.keys().filter(|(a, _)| *a == actor).map(|(_, src)| *src).collect()
                    });
                    up.load(actor, stored);
                }
                up.apply(ch);
            }
        }
        let mut out = Vec::new();
        for key in order {
            let Some((mut up, existed)) = work.remove(&key) else { continue };
            let mut actors = w.inbox.get(&key).map(|s| s.actors.clone()).unwrap_or_default();
            for c in &up.removed {
                actors.remove(c);
            }
            for ch in changes {
                if let Change::Add { key: k, actor, ts_ms, .. } = ch
                    && *k == key
                    && up.added.contains(&(*actor, ch.source()))
                {
                    actors.insert((*actor, ch.source()), *ts_ms);
                }
            }
            if existed && up.needs_refill() {
                let mut latest: std::collections::BTreeMap<UserId, u64> = Default::default();
                for ((a, _), t) in &actors {
                    let e = latest.entry(*a).or_default();
                    *e = (*e).max(*t);
                }
                let mut newest: Vec<(u64, UserId)> = latest.into_iter().map(|(a, t)| (t, a)).collect();
                newest.sort_unstable_by(|a, b| b.cmp(a));
                up.refill(newest.into_iter().map(|(_, a)| a));
            }
            up.stamp(stamp);
            let item = up.item;
            if item.actor_count == 0 {
                w.inbox.remove(&key);
            } else {
                w.inbox.insert(key, StoredItem { item: item.clone(), actors });
            }
            if item.actor_count > 0 || existed {
                out.push(item);
            }
        }
        for (c, k) in commits.iter().zip(stamp_keys) {
            w.offsets.insert(c.consumer.clone(), c.offset);
            w.offsets.insert(k, stamp);
        }
        if fault == Fault::After {
            return Err(w.injected("apply_notifications answer lost after the commit"));
        }
        Ok(out)
    }

    async fn notif_members(&self, item: u64, users: &[UserId]) -> StoreResult<Vec<bool>> {
        let w = self.0.lock();
        let members = w.inbox.values().find(|s| s.item.id == item).map(|s| s.members()).unwrap_or_default();
        Ok(users.iter().map(|u| members.contains(u)).collect())
    }

    async fn inbox(
        &self,
        recipient: UserId,
        _after: Option<(u64, u64)>,
        limit: usize,
    ) -> StoreResult<Vec<NotifItem>> {
        let w = self.0.lock();
        let mut items: Vec<NotifItem> =
            w.inbox.values().filter(|s| s.item.key.recipient == recipient).map(|s| s.item.clone()).collect();
        items.sort_by_key(|i| std::cmp::Reverse((i.updated_ms, i.id)));
        items.truncate(limit);
        Ok(items)
    }

    async fn prune_notifications(&self, _shard: usize, _before_ms: u64, _limit: usize) -> StoreResult<u64> {
        // The simulation keeps every item: its checks compare inboxes with every event.
        Err(not_simulated("prune_notifications"))
    }
}

#[async_trait]
impl ReverseIndex for SimPorts {
    async fn apply(&self, changes: &[ReverseChange]) -> StoreResult<()> {
        let mut w = self.0.lock();
        let fault = w.fault(true);
        if fault == Fault::Before {
            return Err(w.injected("reverse index write"));
        }
        for c in changes {
            match c.liked_at {
                Some(at) => w.reverse.insert((c.user, c.target), at),
                None => w.reverse.remove(&(c.user, c.target)),
            };
        }
        if fault == Fault::After {
            return Err(w.injected("reverse index write answer lost"));
        }
        Ok(())
    }

    async fn offset(&self, consumer: &str) -> StoreResult<u64> {
        CounterStore::offset(self, consumer).await
    }

    async fn set_offset(&self, consumer: &str, upto: u64) -> StoreResult<()> {
        let mut w = self.0.lock();
        let fault = w.fault(true);
        if fault == Fault::Before {
            return Err(w.injected("storing the reverse index offset"));
        }
        w.offsets.insert(consumer.to_string(), upto);
        if fault == Fault::After {
            return Err(w.injected("reverse index offset answer lost"));
        }
        Ok(())
    }
}

#[async_trait]
impl LikeReader for SimPorts {
    async fn liked_among(&self, user: UserId, kind: TargetKind, ids: &[u64]) -> StoreResult<Vec<bool>> {
        let w = self.0.lock();
        Ok(ids.iter().map(|id| w.likes.contains_key(&(Target { kind, id: *id }, user))).collect())
    }

    async fn liked_ids(&self, user: UserId, kind: TargetKind, limit: usize) -> StoreResult<Vec<u64>> {
        let w = self.0.lock();
        Ok(w.likes
            .keys()
            .filter(|(t, u)| *u == user && t.kind == kind)
            .map(|(t, _)| t.id)
            .take(limit)
            .collect())
    }

    async fn likers(&self, target: Target, after: Option<Liker>, limit: usize) -> StoreResult<Vec<Liker>> {
        let w = self.0.lock();
        let mut all: Vec<Liker> = w
            .likes
            .iter()
            .filter(|((t, _), _)| *t == target)
            .map(|((_, u), at)| Liker { user: *u, liked_at_ms: *at })
            .collect();
        all.sort_by_key(|l| std::cmp::Reverse((l.liked_at_ms, l.user)));
        let start = after.map_or(0, |a| all.iter().position(|l| *l == a).map_or(all.len(), |i| i + 1));
        Ok(all.into_iter().skip(start).take(limit).collect())
    }
}

#[async_trait]
impl Outbox for SimPorts {
    fn shard_count(&self) -> usize {
        SHARDS
    }

    fn shard_of_post(&self, post: PostId) -> usize {
        (post.0 % SHARDS as u64) as usize
    }

    async fn unrelayed(&self, shard: usize, max: usize) -> StoreResult<Vec<OutboxRow>> {
        let mut w = self.0.lock();
        w.read_fault("reading the outbox")?;
        Ok(w.outbox[shard]
            .iter()
            .filter(|r| r.relayed.is_none())
            .take(max)
            .map(|r| OutboxRow { seq: r.seq, part: r.part, body: pack(&r.events) })
            .collect())
    }

    async fn mark_relayed(&self, shard: usize, relayed: &[(u64, u64)]) -> StoreResult<()> {
        let mut w = self.0.lock();
        let fault = w.fault(true);
        if fault == Fault::Before {
            return Err(w.injected("marking rows relayed"));
        }
        for (seq, stream_seq) in relayed {
            if let Some(r) = w.outbox[shard].iter_mut().find(|r| r.seq == *seq) {
                r.relayed = Some(*stream_seq);
            }
        }
        if fault == Fault::After {
            return Err(w.injected("marking rows relayed, answer lost"));
        }
        Ok(())
    }

    async fn prune(&self, _shard: usize, _before_ms: u64) -> StoreResult<u64> {
        Ok(0)
    }
}

#[async_trait]
impl EventStream for SimPorts {
    async fn publish(&self, shard: usize, rows: &[OutboxRow]) -> StoreResult<Vec<u64>> {
        let mut w = self.0.lock();
        let fault = w.fault(true);
        if fault == Fault::Before {
            return Err(w.injected("publishing"));
        }
        // Pipelined publishes: when acknowledgements are lost, a prefix may have landed.
        let landed =
            if fault == Fault::After { w.rng.range(1, rows.len() as u64 + 1) as usize } else { rows.len() };
        let mut seqs = Vec::with_capacity(rows.len());
        for r in &rows[..landed] {
            let id = (shard, r.seq);
            let now = w.now_ms;
            match w.published.get(&id) {
                // Inside the duplicate window the stream answers with the first sequence.
                Some(&(seq, at)) if now.saturating_sub(at) <= DUPLICATE_WINDOW_MS => seqs.push(seq),
                _ => {
                    let seq = w.head() + 1;
                    let events = unpack(&r.body, |_| seq).map_err(|e| StoreError::Engine(e.to_string()))?;
                    w.stream.push(Msg { seq, shard, part: r.part, events });
                    w.published.insert(id, (seq, now));
                    seqs.push(seq);
                }
            }
        }
        if fault == Fault::After {
            return Err(w.injected("publish acknowledgements lost"));
        }
        Ok(seqs)
    }

    async fn consumer(&self, name: &str, scope: Scope, offset: u64) -> StoreResult<Arc<dyn EventLog>> {
        self.0.lock().read_fault("creating a durable consumer")?;
        Ok(Arc::new(SimLog::create(self.0.clone(), name, scope, offset)))
    }
}

/// The bus: records what the notifier publishes; the rest goes nowhere (fire and forget).
impl Broadcast for SimPorts {
    fn invalidate(&self, _inv: Invalidation) {}

    fn notifications(&self, items: &[NotifItem]) {
        let mut w = self.0.lock();
        let clock_high = w.clock_high;
        w.pushes.extend(items.iter().map(|item| Push { clock_high, item: item.clone() }));
    }

    fn counters(&self, _epoch: u64, _values: &[(CounterKey, i64)], _events: &[Event]) {}

    fn count_move(&self, _m: likewise_core::comment::uncounted::Move, _made: bool) {}
}

/// Upstream data from the base store, with the notifier's reads of it (settings, follows)
/// failing now and then like the other ports: a notifier step fails between absorbing events
/// and committing them.
pub struct SimMeta(pub Sim, pub Arc<dyn likewise_core::ports::MetaStore>);

#[async_trait]
impl likewise_core::ports::MetaStore for SimMeta {
    async fn put_post(&self, id: PostId, meta: likewise_core::model::PostMeta) -> StoreResult<()> {
        self.1.put_post(id, meta).await
    }
    async fn posts(&self, ids: &[PostId]) -> StoreResult<Vec<Option<likewise_core::model::PostMeta>>> {
        self.1.posts(ids).await
    }
    async fn put_user(&self, id: UserId, profile: likewise_core::model::UserProfile) -> StoreResult<()> {
        self.1.put_user(id, profile).await
    }
    async fn users(&self, ids: &[UserId]) -> StoreResult<Vec<Option<likewise_core::model::UserProfile>>> {
        self.1.users(ids).await
    }
    async fn set_follow(&self, follower: UserId, followee: UserId, follows: bool) -> StoreResult<()> {
        self.1.set_follow(follower, followee, follows).await
    }
    async fn followees(&self, follower: UserId, limit: usize) -> StoreResult<Vec<UserId>> {
        self.0.lock().read_fault("followees")?;
        self.1.followees(follower, limit).await
    }
    async fn put_settings(
        &self,
        user: UserId,
        settings: likewise_core::model::ViewerSettings,
    ) -> StoreResult<()> {
        self.1.put_settings(user, settings).await
    }
    async fn settings(&self, user: UserId) -> StoreResult<likewise_core::model::ViewerSettings> {
        self.0.lock().read_fault("settings")?;
        self.1.settings(user).await
    }
    async fn ping(&self) -> StoreResult<()> {
        self.1.ping().await
    }
}
