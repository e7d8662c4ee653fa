//! Notification inboxes on the embedded engine.
//!
//! | keyspace       | key                                  | value            |
//! |----------------|--------------------------------------|------------------|
//! | `notif_items`  | recipient(8) id(8)                   | item record v1   |
//! | `notif_keys`   | recipient(8) post(8) kind(1)         | id(8)            |
//! | `notif_actors` | id(8) actor(8) [source(8)]           | added ms(8)      |
//! | `notif_time`   | recipient(8) !updated(8) id(8)       | (empty)          |
//! | `notif_age`    | updated(8) recipient(8) id(8)        | (empty)          |
//!
//! `notif_actors` holds each actor's exact set of contributions to an item (the comment
//! liked or written; a post like, and every row written before contributions were kept, is
//! source 0 and has no source bytes): an actor is a member while one of theirs remains, and
//! `actor_count` counts members, which makes adds and removes idempotent (a redelivered event
//! changes nothing). Each row's time lets an item whose named actors were removed name the
//! newest remaining ones instead (rows written before the time was kept hold no value and
//! count as oldest). `notif_time` orders an inbox
//! newest first (the timestamp is stored inverted): an item's `updated_ms` is the stamp of
//! the batch that last changed it, strictly increasing from batch to batch (the last one is
//! kept in `offsets`), so the order is the order of the inbox's changes.
//!
//! `notif_age` holds the same entries as `notif_time` ordered by time alone, oldest first:
//! the retention ([`NotificationStore::prune_notifications`]) takes the items last updated
//! before its cutoff from its front, without a scan of every inbox. Stores written before it
//! existed get it built once on open ([`index_item_ages`]).

use super::error::engine_err;
use super::state::EmbeddedStore;
use crate::keys::{be_u64, num_value, pair_key, parse_num};
use async_trait::async_trait;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::notify::NotifItem;
use likewise_core::notify::{Change, ItemUpdate, NotifCommit, NotifKey, NotifKind, next_stamp};
use likewise_core::ports::NotificationStore;
use likewise_core::{StoreError, StoreResult};
use std::collections::HashMap;

const ITEM_V1: u8 = 1;
const NEXT_ID: &[u8] = b"notif:next_id";
/// The change stamp of the last batch applied (`likewise_core::notify::next_stamp`).
const LAST_STAMP: &[u8] = b"notif:last_stamp";

fn key_bytes(k: &NotifKey) -> [u8; 17] {
    let mut b = [0u8; 17];
    b[..16].copy_from_slice(&pair_key(k.recipient.0, k.post.0));
    b[16] = k.kind.code();
    b
}

/// An actor row: source 0 keeps the 16-byte key rows had before sources were kept.
fn actor_key(item: u64, actor: UserId, source: u64) -> Vec<u8> {
    let mut k = pair_key(item, actor.0).to_vec();
    if source != 0 {
        k.extend_from_slice(&source.to_be_bytes());
    }
    k
}

/// `actor`'s stored contributions to `item`.
fn actor_sources(s: &super::state::Inner, item: u64, actor: UserId) -> StoreResult<Vec<u64>> {
    let mut out = Vec::new();
    for g in s.notif_actors.prefix(pair_key(item, actor.0)) {
        let k = g.key().map_err(engine_err)?;
        out.push(if k.len() >= 24 { be_u64(&k, 16) } else { 0 });
    }
    Ok(out)
}

fn time_key(recipient: u64, updated: u64, id: u64) -> [u8; 24] {
    let mut b = [0u8; 24];
    b[..8].copy_from_slice(&recipient.to_be_bytes());
    b[8..16].copy_from_slice(&(u64::MAX - updated).to_be_bytes());
    b[16..].copy_from_slice(&id.to_be_bytes());
    b
}

fn age_key(recipient: u64, updated: u64, id: u64) -> [u8; 24] {
    let mut b = [0u8; 24];
    b[..8].copy_from_slice(&updated.to_be_bytes());
    b[8..16].copy_from_slice(&recipient.to_be_bytes());
    b[16..].copy_from_slice(&id.to_be_bytes());
    b
}

/// Marks (in `offsets`) a store whose `notif_age` holds every item.
const AGES_INDEXED: &[u8] = b"notif:ages_indexed";

/// Items indexed per write while [`index_item_ages`] builds the index.
const INDEX_CHUNK: usize = 10_000;

/// Build `notif_age` from the stored items, once: stores written before the retention have
/// none. Runs on open, before anything else writes; an open interrupted midway builds it
/// again (the entries are the same).
pub(super) fn index_item_ages(s: &super::state::Inner) -> StoreResult<()> {
    if s.offsets.get(AGES_INDEXED).map_err(engine_err)?.is_some() {
        return Ok(());
    }
    let mut batch = s.db.batch();
    let (mut n, mut pending) = (0u64, 0usize);
    for kv in s.notif_items.iter() {
        let (k, v) = kv.into_inner().map_err(engine_err)?;
        if k.len() != 16 {
            return Err(StoreError::Corrupt {
                keyspace: "notif_items",
                detail: format!("a key of {} bytes", k.len()),
            });
        }
        let (r, id) = (be_u64(&k, 0), be_u64(&k, 8));
        let it = decode(UserId(r), id, &v)?;
        batch.insert(&s.notif_age, age_key(r, it.updated_ms, id), []);
        n += 1;
        pending += 1;
        if pending == INDEX_CHUNK {
            batch.commit().map_err(engine_err)?;
            batch = s.db.batch();
            pending = 0;
        }
    }
    batch.insert(&s.offsets, AGES_INDEXED, []);
    batch.commit().map_err(engine_err)?;
    if n > 0 {
        tracing::info!(items = n, "indexed the notification items by age");
    }
    Ok(())
}

fn encode(it: &NotifItem) -> Vec<u8> {
    let mut b = Vec::with_capacity(35 + 8 * it.recent.len());
    b.push(ITEM_V1);
    b.push(it.key.kind.code());
    for v in [it.key.post.0, it.comment.map_or(0, |c| c.0), it.actor_count, it.updated_ms] {
        b.extend_from_slice(&v.to_be_bytes());
    }
    b.push(it.recent.len() as u8);
    for u in &it.recent {
        b.extend_from_slice(&u.0.to_be_bytes());
    }
    b
}

fn decode(recipient: UserId, id: u64, b: &[u8]) -> StoreResult<NotifItem> {
    let bad = |d: &str| StoreError::Corrupt { keyspace: "notif_items", detail: d.into() };
    if b.len() < 35 || b[0] != ITEM_V1 {
        return Err(bad("bad record"));
    }
    let kind = NotifKind::from_code(b[1]).ok_or_else(|| bad("bad kind"))?;
    let n = b[34] as usize;
    if b.len() != 35 + 8 * n {
        return Err(bad("bad length"));
    }
    let comment = be_u64(b, 10);
    Ok(NotifItem {
        id,
        key: NotifKey { recipient, post: PostId(be_u64(b, 2)), kind },
        comment: (comment != 0).then_some(CommentId(comment)),
        actor_count: be_u64(b, 18),
        updated_ms: be_u64(b, 26),
        recent: (0..n).map(|i| UserId(be_u64(b, 35 + 8 * i))).collect(),
    })
}

/// The stored item for `key`, or a new one with the next ID; with its previous update time.
fn load_item(
    s: &super::state::Inner,
    key: NotifKey,
    next_id: &mut u64,
) -> StoreResult<(NotifItem, Option<u64>)> {
    let existing = match s.notif_keys.get(key_bytes(&key)).map_err(engine_err)? {
        Some(idv) if idv.len() == 8 => {
            let id = be_u64(&idv, 0);
            let rec = s.notif_items.get(pair_key(key.recipient.0, id)).map_err(engine_err)?;
            rec.map(|r| decode(key.recipient, id, &r)).transpose()?
        }
        _ => None,
    };
    Ok(match existing {
        Some(it) => {
            let u = it.updated_ms;
            (it, Some(u))
        }
        None => {
            let id = *next_id;
            *next_id += 1;
            (NotifItem { id, key, comment: None, actor_count: 0, recent: Vec::new(), updated_ms: 0 }, None)
        }
    })
}

struct Work {
    up: ItemUpdate,
    old_updated: Option<u64>,
    /// When each contribution this batch added was made.
    added_ms: HashMap<(UserId, u64), u64>,
}

/// The item's stored actors, newest first by their latest contribution (for
/// [`ItemUpdate::refill`]).
fn newest_actors(s: &super::state::Inner, item: u64) -> StoreResult<Vec<UserId>> {
    let mut latest: HashMap<UserId, u64> = HashMap::new();
    for g in s.notif_actors.prefix(item.to_be_bytes()) {
        let (k, v) = g.into_inner().map_err(engine_err)?;
        let at = if v.len() == 8 { be_u64(&v, 0) } else { 0 };
        let e = latest.entry(UserId(be_u64(&k, 8))).or_default();
        *e = (*e).max(at);
    }
    let mut all: Vec<(u64, UserId)> = latest.into_iter().map(|(u, at)| (at, u)).collect();
    all.sort_unstable_by(|a, b| b.cmp(a));
    Ok(all.into_iter().map(|(_, u)| u).collect())
}

/// Where `consumer`'s writer fence is kept (`offsets` keyspace).
fn fence_key(consumer: &str) -> Vec<u8> {
    format!("{consumer}#fence").into_bytes()
}

fn stored_fence(s: &super::state::Inner, consumer: &str) -> StoreResult<u64> {
    match s.offsets.get(fence_key(consumer)).map_err(engine_err)? {
        Some(v) => parse_num("offsets", &v),
        None => Ok(0),
    }
}

#[async_trait]
impl NotificationStore for EmbeddedStore {
    async fn fence_notifications(&self, consumer: &str) -> StoreResult<u64> {
        let s = &*self.inner;
        let _one_writer = s.notif_lock.lock();
        let next = stored_fence(s, consumer)? + 1;
        s.offsets.insert(fence_key(consumer), num_value(next)).map_err(engine_err)?;
        Ok(next)
    }

    async fn commit_notifications(
        &self,
        commits: &[NotifCommit],
        changes: &[Change],
    ) -> StoreResult<Vec<NotifItem>> {
        let s = &*self.inner;
        let _one_writer = s.notif_lock.lock();
        // One process owns an embedded store, but a notifier restarted in it (a test, a
        // supervisor) must not race the one it replaced.
        let mut superseded = Vec::new();
        for c in commits {
            if stored_fence(s, &c.consumer)? != c.fence {
                superseded.push(c.consumer.as_str());
            }
        }
        if !superseded.is_empty() {
            return Err(StoreError::Superseded(superseded.join(",")));
        }
        let mut next_id = match s.offsets.get(NEXT_ID).map_err(engine_err)? {
            Some(v) => parse_num("offsets", &v)?,
            None => 1,
        };
        let last_stamp = match s.offsets.get(LAST_STAMP).map_err(engine_err)? {
            Some(v) => parse_num("offsets", &v)?,
            None => 0,
        };
        let stamp = next_stamp(last_stamp, likewise_engine::now_ms());
        let mut work: HashMap<NotifKey, Work> = HashMap::new();
        let mut order: Vec<NotifKey> = Vec::new();
        for ch in changes {
            let (key, actor) = (ch.key(), ch.actor());
            if let std::collections::hash_map::Entry::Vacant(slot) = work.entry(key) {
                let (item, old_updated) = load_item(s, key, &mut next_id)?;
                slot.insert(Work { up: ItemUpdate::new(item), old_updated, added_ms: HashMap::new() });
                order.push(key);
            }
            let Some(w) = work.get_mut(&key) else { continue };
            if !w.up.knows(actor) {
                // A new item has no rows.
                let stored =
                    if w.old_updated.is_some() { actor_sources(s, w.up.item.id, actor)? } else { Vec::new() };
                w.up.load(actor, stored);
            }
            w.up.apply(ch);
            if let Change::Add { ts_ms, .. } = ch {
                w.added_ms.insert((actor, ch.source()), *ts_ms);
            }
        }
        let mut batch = s.db.batch();
        let mut out = Vec::with_capacity(order.len());
        for key in order {
            let Some(mut w) = work.remove(&key) else { continue };
            if w.old_updated.is_some() && w.up.needs_refill() {
                w.up.refill(newest_actors(s, w.up.item.id)?);
            }
            w.up.stamp(stamp);
            let it = w.up.item;
            let r = it.key.recipient.0;
            for c in &w.up.added {
                let at = w.added_ms.get(c).copied().unwrap_or(it.updated_ms);
                batch.insert(&s.notif_actors, actor_key(it.id, c.0, c.1), at.to_be_bytes());
            }
            for c in &w.up.removed {
                batch.remove(&s.notif_actors, actor_key(it.id, c.0, c.1));
            }
            if let Some(old) = w.old_updated {
                batch.remove(&s.notif_time, time_key(r, old, it.id));
                batch.remove(&s.notif_age, age_key(r, old, it.id));
            }
            if it.actor_count == 0 {
                if w.old_updated.is_some() {
                    batch.remove(&s.notif_items, pair_key(r, it.id));
                    batch.remove(&s.notif_keys, key_bytes(&key));
                }
            } else {
                batch.insert(&s.notif_items, pair_key(r, it.id), encode(&it));
                batch.insert(&s.notif_keys, key_bytes(&key), it.id.to_be_bytes());
                batch.insert(&s.notif_time, time_key(r, it.updated_ms, it.id), []);
                batch.insert(&s.notif_age, age_key(r, it.updated_ms, it.id), []);
            }
            if it.actor_count > 0 || w.old_updated.is_some() {
                out.push(it);
            }
        }
        batch.insert(&s.offsets, NEXT_ID, num_value(next_id));
        batch.insert(&s.offsets, LAST_STAMP, num_value(stamp));
        for c in commits {
            batch.insert(&s.offsets, c.consumer.as_bytes(), num_value(c.offset));
        }
        batch.commit().map_err(engine_err)?;
        Ok(out)
    }

    async fn notif_members(&self, item: u64, users: &[UserId]) -> StoreResult<Vec<bool>> {
        users.iter().map(|u| Ok(!actor_sources(&self.inner, item, *u)?.is_empty())).collect()
    }

    async fn inbox(
        &self,
        recipient: UserId,
        after: Option<(u64, u64)>,
        limit: usize,
    ) -> StoreResult<Vec<NotifItem>> {
        let s = &*self.inner;
        let start = match after {
            Some((u, id)) => {
                let mut k = time_key(recipient.0, u, id).to_vec();
                k.push(0); // strictly after
                k
            }
            None => recipient.0.to_be_bytes().to_vec(),
        };
        let end = time_key(recipient.0, 0, u64::MAX).to_vec();
        let mut out = Vec::new();
        for g in s.notif_time.range(start..=end).take(limit) {
            let k = g.key().map_err(engine_err)?;
            let id = be_u64(&k, 16);
            if let Some(v) = s.notif_items.get(pair_key(recipient.0, id)).map_err(engine_err)? {
                out.push(decode(recipient, id, &v)?);
            }
        }
        Ok(out)
    }

    async fn prune_notifications(&self, shard: usize, before_ms: u64, limit: usize) -> StoreResult<u64> {
        if shard != 0 || limit == 0 {
            return Ok(0);
        }
        let s = &*self.inner;
        // The notifier's writer lock: an item it is changing is never pruned under it.
        let _one_writer = s.notif_lock.lock();
        let mut old = Vec::new();
        for g in s.notif_age.range(..before_ms.to_be_bytes().to_vec()).take(limit) {
            let k = g.key().map_err(engine_err)?;
            if k.len() != 24 {
                return Err(StoreError::Corrupt {
                    keyspace: "notif_age",
                    detail: format!("a key of {} bytes", k.len()),
                });
            }
            old.push((be_u64(&k, 8), be_u64(&k, 0), be_u64(&k, 16)));
        }
        let mut batch = s.db.batch();
        for &(r, updated, id) in &old {
            batch.remove(&s.notif_age, age_key(r, updated, id));
            batch.remove(&s.notif_time, time_key(r, updated, id));
            if let Some(v) = s.notif_items.get(pair_key(r, id)).map_err(engine_err)? {
                let it = decode(UserId(r), id, &v)?;
                batch.remove(&s.notif_items, pair_key(r, id));
                // The key names this item unless a newer one took it (it never does while
                // this one is stored; checked all the same).
                let kb = key_bytes(&it.key);
                if s.notif_keys
                    .get(kb)
                    .map_err(engine_err)?
                    .is_some_and(|v| v.len() == 8 && be_u64(&v, 0) == id)
                {
                    batch.remove(&s.notif_keys, kb);
                }
            }
            for g in s.notif_actors.prefix(id.to_be_bytes()) {
                batch.remove(&s.notif_actors, g.key().map_err(engine_err)?.to_vec());
            }
        }
        batch.commit().map_err(engine_err)?;
        Ok(old.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embedded::EmbeddedOptions;

    /// A store written before `notif_age` existed gets it built on open, and its old items
    /// are then pruned like new ones.
    #[tokio::test]
    async fn items_stored_before_the_age_index_are_indexed_on_open_and_pruned() {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = |post| NotifKey { recipient: UserId(1), post: PostId(post), kind: NotifKind::PostLiked };
        let add = |post, actor| Change::Add { key: key(post), actor: UserId(actor), comment: None, ts_ms: 1 };
        let stamps = {
            let s = EmbeddedStore::open(dir.path(), &EmbeddedOptions::default()).expect("open");
            let fence = s.fence_notifications("notifier").await.expect("fence");
            let a = s.apply_notifications("notifier", fence, 1, &[add(1, 10), add(1, 11)]).await.expect("a");
            let b = s.apply_notifications("notifier", fence, 2, &[add(2, 12)]).await.expect("b");
            // As an earlier version left it: no age entries, no mark.
            let inner = &*s.inner;
            let mut batch = inner.db.batch();
            for g in inner.notif_age.iter() {
                batch.remove(&inner.notif_age, g.key().expect("key").to_vec());
            }
            batch.remove(&inner.offsets, AGES_INDEXED);
            batch.commit().expect("commit");
            assert_eq!(s.prune_notifications(0, u64::MAX, 10).await.expect("prune"), 0, "nothing indexed");
            (a[0].updated_ms, b[0].updated_ms)
        };
        let s = EmbeddedStore::open(dir.path(), &EmbeddedOptions::default()).expect("reopen");
        assert_eq!(s.inner.notif_age.iter().count(), 2);
        assert_eq!(s.prune_notifications(0, stamps.1, 10).await.expect("prune"), 1);
        let left = s.inbox(UserId(1), None, 10).await.expect("inbox");
        assert_eq!(left.iter().map(|it| it.key).collect::<Vec<_>>(), vec![key(2)]);
        assert_eq!(s.inner.notif_actors.iter().count(), 1, "the pruned item's actors went with it");
        assert_eq!(s.inner.notif_keys.iter().count(), 1);
        assert_eq!(s.inner.notif_time.iter().count(), 1);
        // Other shards hold nothing on this engine.
        assert_eq!(s.prune_notifications(1, u64::MAX, 10).await.expect("prune"), 0);
        assert_eq!(s.prune_notifications(0, u64::MAX, 10).await.expect("prune"), 1);
        assert!(s.inbox(UserId(1), None, 10).await.expect("inbox").is_empty());
        for ks in [
            &s.inner.notif_items,
            &s.inner.notif_keys,
            &s.inner.notif_actors,
            &s.inner.notif_time,
            &s.inner.notif_age,
        ] {
            assert_eq!(ks.iter().count(), 0);
        }
    }
}
