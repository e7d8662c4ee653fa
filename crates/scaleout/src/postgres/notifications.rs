//! Notification inboxes on PostgreSQL: `notif_items` (one row per (recipient, post, kind)) and
//! `notif_actors` (each actor's exact contributions to an item, `source` as in
//! `Change::source`: an actor is a member while one remains, and `actor_count` counts members;
//! with when each was made, so an item thinned by removals names its newest remaining
//! actors), both on the recipient's shard.
//!
//! `apply_notifications` groups the changes by recipient shard and applies each shard's part
//! in ONE transaction, serialized per shard by an advisory lock (the embedded engine's single
//! writer). The consumer offset (`consumer_offsets` on [`PgStore::offset_shard`], shard 0 for
//! the notifier) is written last, in that shard's transaction, so a single-shard deployment is
//! exactly as atomic as the embedded engine.
//! That transaction opens first and locks the consumer's fence row (`<consumer>#fence` in
//! `consumer_offsets`): a notifier takes a new fence when it starts under its lease, so one
//! that lost its lease with a write still in flight (a partition) is refused before it
//! changes any shard, and cannot undo what its successor applied meanwhile.
//! With several shards, a crash between shard transactions leaves the offset behind changes
//! already applied: the consumer replays them, which is harmless, because changes are
//! idempotent (an Add of a stored contribution or a Remove of an absent one changes nothing; replaying a
//! shard's changes in order rebuilds the same `recent` list, and an item a replay leaves as
//! it was keeps its `updated_ms`). An item's `updated_ms` is the stamp of the batch that last
//! changed it, strictly increasing from batch to batch (the last one is kept in the
//! `<consumer>#stamp` row beside the offset, read under the fence row's lock), and on each
//! shard past the last batch any notifier wrote there (the `notifications#shard-stamp` row,
//! read under the shard's writer lock): with the notifier split into partitions, several
//! writers change one recipient's items, and their changes still sort in commit order.
//!
//! The retention ([`NotificationStore::prune_notifications`], run per shard by that shard's
//! workers) deletes the items last updated before its cutoff, oldest first through the
//! `notif_age` index (migration 25), with their actors: a small batch per transaction, under
//! the writer lock, so the notifier waits at most one batch and never changes an item being
//! pruned.
//!
//! Item IDs are unique across shards: `nextval(notif_item_seq) * 4096 + the recipient's
//! bucket` (`placement`), so the item's shard is read from its ID ([`PgStore::shard_of_item`]).

use super::moderation::lim;
use super::placement::Placement;
use super::{PgStore, i, pg_err, u};
use async_trait::async_trait;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::notify::NotifItem;
use likewise_core::notify::{
    Change, ItemUpdate, NotifCommit, NotifKey, NotifKind, RECENT_ACTORS, next_stamp,
};
use likewise_core::ports::NotificationStore;
use likewise_core::{StoreError, StoreResult};
use std::collections::{HashMap, HashSet};
use tokio_postgres::{Row, Transaction};

/// Advisory lock serializing notification writers on a shard (any constant unique to it).
const WRITER_LOCK: i64 = 0x4c_696b_6e6f_7469;
/// The columns [`item_of`] decodes, in order.
const ITEM_COLS: &str = "id, recipient, post_id, kind, comment_id, actor_count, recent, updated_ms";

impl PgStore {
    /// The shard an inbox item lives on (its ID carries its recipient's bucket).
    pub(crate) fn shard_of_item(&self, item: u64) -> usize {
        self.placement().shard_of_item(item)
    }
}

fn item_of(r: &Row) -> StoreResult<NotifItem> {
    let code: i16 = r.get(3);
    let kind = u8::try_from(code)
        .ok()
        .and_then(NotifKind::from_code)
        .ok_or_else(|| StoreError::Corrupt { keyspace: "notif_items", detail: format!("bad kind {code}") })?;
    let comment: Option<i64> = r.get(4);
    let recent: Vec<i64> = r.get(6);
    Ok(NotifItem {
        id: u(r.get(0)),
        key: NotifKey { recipient: UserId(u(r.get(1))), post: PostId(u(r.get(2))), kind },
        // Comment 0 means none, as in the embedded record.
        comment: comment.map(u).filter(|c| *c != 0).map(CommentId),
        actor_count: u(r.get(5)),
        recent: recent.into_iter().map(|a| UserId(u(a))).collect(),
        updated_ms: u(r.get(7)),
    })
}

/// An item being changed: `id` is 0 for an item not stored yet (allocated at write time).
struct Work {
    up: ItemUpdate,
    existed: bool,
}

/// Apply one shard's changes (in order) inside `tx`; returns the touched items that exist
/// after them or existed before (the embedded engine's output rule), by key.
async fn apply_shard(
    tx: &Transaction<'_>,
    shard: usize,
    ids: &Placement,
    changes: &[&Change],
    stamp: u64,
) -> StoreResult<Vec<(NotifKey, NotifItem)>> {
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&WRITER_LOCK]).await.map_err(pg_err)?;
    // The shard's last stamp, read and moved under the writer lock: the notifiers of several
    // partitions write this shard's items one at a time, and each batch is stamped past the
    // one committed before it, so a recipient's changes sort in commit order whichever
    // partition (and whichever process's clock) made them: a resumed event stream
    // (`Last-Event-ID`) misses none.
    let shard_last: Option<i64> = tx
        .query_opt("SELECT upto FROM consumer_offsets WHERE consumer = $1", &[&SHARD_STAMP])
        .await
        .map_err(pg_err)?
        .map(|r| r.get(0));
    let stamp = next_stamp(shard_last.map_or(0, u), stamp);
    tx.execute(
        "INSERT INTO consumer_offsets (consumer, upto) VALUES ($1, $2)
         ON CONFLICT (consumer) DO UPDATE SET upto = GREATEST(consumer_offsets.upto, EXCLUDED.upto)",
        &[&SHARD_STAMP, &i(stamp)],
    )
    .await
    .map_err(pg_err)?;

    // 1. The stored items of every key, locked.
    let mut keys: Vec<NotifKey> = Vec::new();
    let mut seen: HashSet<NotifKey> = HashSet::new();
    for ch in changes {
        let key = ch.key();
        if seen.insert(key) {
            keys.push(key);
        }
    }
    let recipients: Vec<i64> = keys.iter().map(|k| i(k.recipient.0)).collect();
    let posts: Vec<i64> = keys.iter().map(|k| i(k.post.0)).collect();
    let kinds: Vec<i16> = keys.iter().map(|k| i16::from(k.kind.code())).collect();
    let rows = tx
        .query(
            &format!(
                "SELECT {ITEM_COLS} FROM notif_items
                 WHERE (recipient, post_id, kind) IN
                       (SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::smallint[]))
                 FOR UPDATE"
            ),
            &[&recipients, &posts, &kinds],
        )
        .await
        .map_err(pg_err)?;
    let mut stored: HashMap<NotifKey, NotifItem> = HashMap::new();
    for r in &rows {
        let it = item_of(r)?;
        stored.insert(it.key, it);
    }

    // 2. The stored contributions of every (item, actor) the changes touch, read under the
    //    writer lock (no other transaction changes them meanwhile); a new item has none.
    let mut work: HashMap<NotifKey, Work> = HashMap::new();
    for ch in changes {
        let key = ch.key();
        work.entry(key).or_insert_with(|| match stored.remove(&key) {
            Some(item) => Work { up: ItemUpdate::new(item), existed: true },
            None => Work {
                up: ItemUpdate::new(NotifItem {
                    id: 0,
                    key,
                    comment: None,
                    actor_count: 0,
                    recent: Vec::new(),
                    updated_ms: 0,
                }),
                existed: false,
            },
        });
    }
    let mut probe: HashSet<(i64, i64)> = HashSet::new();
    for ch in changes {
        let w = &work[&ch.key()];
        if w.existed {
            probe.insert((i(w.up.item.id), i(ch.actor().0)));
        }
    }
    let mut sources: HashMap<(u64, UserId), Vec<u64>> = HashMap::new();
    if !probe.is_empty() {
        let (items, actors): (Vec<i64>, Vec<i64>) = probe.iter().copied().unzip();
        let rows = tx
            .query(
                // One primary-key range per (item, actor), never a join over the table.
                "SELECT n.item, n.actor, a.source
                 FROM unnest($1::bigint[], $2::bigint[]) AS n(item, actor)
                 JOIN LATERAL (SELECT source FROM notif_actors a
                               WHERE a.item = n.item AND a.actor = n.actor) a ON true",
                &[&items, &actors],
            )
            .await
            .map_err(pg_err)?;
        for r in &rows {
            sources.entry((u(r.get(0)), UserId(u(r.get(1))))).or_default().push(u(r.get(2)));
        }
    }

    // 3. The state machine, change by change, over the exact contributions.
    let mut added_ms: HashMap<(NotifKey, UserId, u64), u64> = HashMap::new();
    for ch in changes {
        let (key, actor) = (ch.key(), ch.actor());
        let Some(w) = work.get_mut(&key) else { continue };
        if !w.up.knows(actor) {
            let stored = if w.existed { sources.remove(&(w.up.item.id, actor)) } else { None };
            w.up.load(actor, stored.unwrap_or_default());
        }
        w.up.apply(ch);
        if let Change::Add { ts_ms, .. } = ch {
            added_ms.insert((key, actor, ch.source()), *ts_ms);
        }
    }

    // 4. IDs for the new items that gained a member.
    let fresh: Vec<NotifKey> = keys
        .iter()
        .filter(|k| work.get(*k).is_some_and(|w| !w.existed && w.up.item.actor_count > 0))
        .copied()
        .collect();
    if !fresh.is_empty() {
        let rows = tx
            .query(
                "SELECT nextval('notif_item_seq') FROM generate_series(1, $1::bigint)",
                &[&(fresh.len() as i64)],
            )
            .await
            .map_err(pg_err)?;
        if rows.len() != fresh.len() {
            return Err(pg_err("notification IDs ran short"));
        }
        for (k, r) in fresh.iter().zip(&rows) {
            if let Some(w) = work.get_mut(k) {
                w.up.item.id = ids.item_id(k.recipient, shard, u(r.get(0)));
            }
        }
    }

    // 5. Actor rows: insert the contributions the batch added, delete those it removed (of
    //    items that stay: an emptied item's rows go with it below). Step 2 read them under the
    //    writer lock, so an insert never meets an existing row: a plain insert, not
    //    `ON CONFLICT`, whose speculative insertion costs about twice a plain row. The primary
    //    key is the table's only index: do not add another, or the planner may probe through
    //    it (see `write.rs`).
    let (mut add_items, mut add_actors, mut add_sources, mut add_ms) = (vec![], vec![], vec![], vec![]);
    let (mut del_items, mut del_actors, mut del_sources) = (vec![], vec![], vec![]);
    for k in &keys {
        let Some(w) = work.get(k) else { continue };
        if w.up.item.actor_count == 0 {
            continue;
        }
        for c in &w.up.added {
            add_items.push(i(w.up.item.id));
            add_actors.push(i(c.0.0));
            add_sources.push(i(c.1));
            add_ms.push(i(added_ms.get(&(*k, c.0, c.1)).copied().unwrap_or(w.up.item.updated_ms)));
        }
        for c in &w.up.removed {
            del_items.push(i(w.up.item.id));
            del_actors.push(i(c.0.0));
            del_sources.push(i(c.1));
        }
    }
    if !add_items.is_empty() {
        tx.execute(
            "INSERT INTO notif_actors (item, actor, source, added_ms)
             SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[])",
            &[&add_items, &add_actors, &add_sources, &add_ms],
        )
        .await
        .map_err(pg_err)?;
    }
    if !del_items.is_empty() {
        tx.execute(
            "DELETE FROM notif_actors
             WHERE (item, actor, source) IN
                   (SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]))",
            &[&del_items, &del_actors, &del_sources],
        )
        .await
        .map_err(pg_err)?;
    }

    // 6. Items: upsert the live ones, delete the emptied ones.
    let mut gone: Vec<i64> = Vec::new();
    let mut live: Vec<&NotifItem> = Vec::new();
    let mut out = Vec::with_capacity(keys.len());
    for k in &keys {
        let Some(w) = work.get_mut(k) else { continue };
        // Removals took named actors out of `recent`: name the newest remaining ones (by
        // their latest contribution).
        if w.existed && w.up.needs_refill() {
            let named: Vec<i64> = w.up.item.recent.iter().map(|a| i(a.0)).collect();
            let rows = tx
                .query(
                    "SELECT actor FROM notif_actors WHERE item = $1 AND actor <> ALL($2)
                     GROUP BY actor ORDER BY max(added_ms) DESC, actor DESC LIMIT $3",
                    &[&i(w.up.item.id), &named, &(RECENT_ACTORS as i64)],
                )
                .await
                .map_err(pg_err)?;
            w.up.refill(rows.iter().map(|r| UserId(u(r.get(0)))));
        }
        w.up.stamp(stamp);
    }
    for k in &keys {
        let Some(w) = work.get(k) else { continue };
        if w.up.item.actor_count == 0 {
            if w.existed {
                gone.push(i(w.up.item.id));
                out.push((*k, w.up.item.clone()));
            }
            continue;
        }
        live.push(&w.up.item);
        out.push((*k, w.up.item.clone()));
    }
    if !gone.is_empty() {
        tx.execute("DELETE FROM notif_actors WHERE item = ANY($1)", &[&gone]).await.map_err(pg_err)?;
        tx.execute("DELETE FROM notif_items WHERE id = ANY($1)", &[&gone]).await.map_err(pg_err)?;
    }
    if !live.is_empty() {
        let ids: Vec<i64> = live.iter().map(|it| i(it.id)).collect();
        let recipients: Vec<i64> = live.iter().map(|it| i(it.key.recipient.0)).collect();
        let posts: Vec<i64> = live.iter().map(|it| i(it.key.post.0)).collect();
        let kinds: Vec<i16> = live.iter().map(|it| i16::from(it.key.kind.code())).collect();
        let comments: Vec<Option<i64>> = live.iter().map(|it| it.comment.map(|c| i(c.0))).collect();
        let counts: Vec<i64> = live.iter().map(|it| i(it.actor_count)).collect();
        // Per-row arrays travel as array literals (`{1,2}`): unnest cannot yield ragged arrays.
        let recent: Vec<String> = live
            .iter()
            .map(|it| {
                let ids: Vec<String> = it.recent.iter().map(|a| i(a.0).to_string()).collect();
                format!("{{{}}}", ids.join(","))
            })
            .collect();
        let updated: Vec<i64> = live.iter().map(|it| i(it.updated_ms)).collect();
        tx.execute(
            "INSERT INTO notif_items
                 (id, recipient, post_id, kind, comment_id, actor_count, recent, updated_ms)
             SELECT id, recipient, post_id, kind, comment_id, actor_count, recent::bigint[], updated_ms
             FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::smallint[], $5::bigint[],
                         $6::bigint[], $7::text[], $8::bigint[])
                  AS v(id, recipient, post_id, kind, comment_id, actor_count, recent, updated_ms)
             ON CONFLICT (id) DO UPDATE SET
                 comment_id = EXCLUDED.comment_id, actor_count = EXCLUDED.actor_count,
                 recent = EXCLUDED.recent, updated_ms = EXCLUDED.updated_ms",
            &[&ids, &recipients, &posts, &kinds, &comments, &counts, &recent, &updated],
        )
        .await
        .map_err(pg_err)?;
    }
    Ok(out)
}

/// Move each of `consumers` to its `uptos` entry (exactly, as the embedded engine: a consumer
/// may rewind to replay), in one statement.
async fn put_offsets(tx: &Transaction<'_>, consumers: &[String], uptos: &[i64]) -> StoreResult<()> {
    tx.execute(
        "INSERT INTO consumer_offsets (consumer, upto) SELECT * FROM unnest($1::text[], $2::bigint[])
         ON CONFLICT (consumer) DO UPDATE SET upto = EXCLUDED.upto",
        &[&consumers, &uptos],
    )
    .await
    .map_err(pg_err)?;
    Ok(())
}

/// The `consumer_offsets` row holding `consumer`'s writer fence (on its offset shard): a
/// notifier partition's, or a snapshot's (`snapshots.rs`).
pub(super) fn fence_key(consumer: &str) -> String {
    format!("{consumer}#fence")
}

/// The `consumer_offsets` row holding the change stamp of `consumer`'s last batch
/// (`likewise_core::notify::next_stamp`), on its offset shard.
fn stamp_key(consumer: &str) -> String {
    format!("{consumer}#stamp")
}

/// The `consumer_offsets` row of each shard holding the stamp of the last batch written to
/// the shard's items, by any notifier.
const SHARD_STAMP: &str = "notifications#shard-stamp";

/// How long the server keeps a fenced transaction that hears nothing from its client: a
/// writer cut off while holding the fence rows' locks must not keep its successor waiting.
const FENCED_TX_IDLE_LIMIT: &str = "5s";

/// In `tx`, lock the fence rows of `writers` (each a consumer and the fence token it holds)
/// until the transaction ends, or refuse with `Superseded` naming every writer whose fence
/// was taken over. Locked in one order, so two writers of overlapping sets cannot deadlock.
pub(super) async fn lock_fences<'a>(
    tx: &Transaction<'_>,
    writers: impl Iterator<Item = (&'a str, u64)>,
) -> StoreResult<()> {
    tx.batch_execute(&format!("SET LOCAL idle_in_transaction_session_timeout = '{FENCED_TX_IDLE_LIMIT}'"))
        .await
        .map_err(pg_err)?;
    let writers: Vec<(&str, u64)> = writers.collect();
    let fences: Vec<String> = writers.iter().map(|(c, _)| fence_key(c)).collect();
    let current: HashMap<String, i64> = tx
        .query(
            "SELECT consumer, upto FROM consumer_offsets WHERE consumer = ANY($1)
             ORDER BY consumer FOR UPDATE",
            &[&fences],
        )
        .await
        .map_err(pg_err)?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let superseded: Vec<&str> = writers
        .iter()
        .zip(&fences)
        .filter(|((_, fence), f)| current.get(*f).copied().map_or(0, u) != *fence)
        .map(|((c, _), _)| *c)
        .collect();
    if !superseded.is_empty() {
        return Err(StoreError::Superseded(superseded.join(",")));
    }
    Ok(())
}

#[async_trait]
impl NotificationStore for PgStore {
    async fn fence_notifications(&self, consumer: &str) -> StoreResult<u64> {
        let c = self.conn(self.offset_shard(consumer)?).await?;
        let row = c
            .query_one(
                "INSERT INTO consumer_offsets (consumer, upto) VALUES ($1, 1)
                 ON CONFLICT (consumer) DO UPDATE SET upto = consumer_offsets.upto + 1 RETURNING upto",
                &[&fence_key(consumer)],
            )
            .await
            .map_err(pg_err)?;
        Ok(u(row.get(0)))
    }

    async fn commit_notifications(
        &self,
        commits: &[NotifCommit],
        changes: &[Change],
    ) -> StoreResult<Vec<NotifItem>> {
        let Some(first) = commits.first() else { return Ok(Vec::new()) };
        // The offsets live where `CounterStore::offset` reads them (shard 0 unless `name@N`).
        let home = self.offset_shard(&first.consumer)?;
        for c in commits {
            if self.offset_shard(&c.consumer)? != home {
                return Err(StoreError::Engine(format!(
                    "notification consumers {} and {} keep their offsets on different shards",
                    first.consumer, c.consumer
                )));
            }
        }
        // The home transaction opens first and locks the fence rows until it commits, after
        // the other shards' changes: a writer whose fence was taken over changes nothing on
        // any shard, and no successor commits between its check and its commit. Each
        // statement covers every commit (arrays), so a notifier holding many partitions
        // makes as many round trips as one holding one.
        let mut home_conn = self.conn(home).await?;
        let home_tx = home_conn.transaction().await.map_err(pg_err)?;
        lock_fences(&home_tx, commits.iter().map(|c| (c.consumer.as_str(), c.fence))).await?;
        // The batch's change stamp, past the last one of every consumer (read under the fence
        // rows' locks, so no other writer moves them meanwhile).
        let stamps: Vec<String> = commits.iter().map(|c| stamp_key(&c.consumer)).collect();
        let last_stamp: Option<i64> = home_tx
            .query_one("SELECT max(upto) FROM consumer_offsets WHERE consumer = ANY($1)", &[&stamps])
            .await
            .map_err(pg_err)?
            .get(0);
        let stamp = next_stamp(last_stamp.map_or(0, u), likewise_engine::now_ms());
        let mut touched: HashMap<NotifKey, NotifItem> = HashMap::new();
        let mut home_part = Vec::new();
        let ids = self.placement();
        for (shard, idx) in self.group(changes, |ch| ids.shard_of_user(ch.key().recipient)) {
            let part: Vec<&Change> = idx.iter().map(|k| &changes[*k]).collect();
            if shard == home {
                home_part = part;
                continue;
            }
            let mut c = self.conn(shard).await?;
            let tx = c.transaction().await.map_err(pg_err)?;
            touched.extend(apply_shard(&tx, shard, &ids, &part, stamp).await?);
            tx.commit().await.map_err(pg_err)?;
        }
        if !home_part.is_empty() {
            touched.extend(apply_shard(&home_tx, home, &ids, &home_part, stamp).await?);
        }
        let mut names: Vec<String> = commits.iter().map(|c| c.consumer.clone()).collect();
        let mut uptos: Vec<i64> = commits.iter().map(|c| i(c.offset)).collect();
        names.extend(stamps);
        uptos.extend(std::iter::repeat_n(i(stamp), commits.len()));
        put_offsets(&home_tx, &names, &uptos).await?;
        home_tx.commit().await.map_err(pg_err)?;
        // In the order each item was first touched, as the embedded engine returns them.
        let mut out = Vec::with_capacity(touched.len());
        for ch in changes {
            if let Some(it) = touched.remove(&ch.key()) {
                out.push(it);
            }
        }
        Ok(out)
    }

    async fn notif_members(&self, item: u64, users: &[UserId]) -> StoreResult<Vec<bool>> {
        if users.is_empty() {
            return Ok(Vec::new());
        }
        let c = self.conn(self.shard_of_item(item)).await?;
        let actors: Vec<i64> = users.iter().map(|a| i(a.0)).collect();
        let rows = c
            .query(
                "SELECT DISTINCT actor FROM notif_actors WHERE item = $1 AND actor = ANY($2)",
                &[&i(item), &actors],
            )
            .await
            .map_err(pg_err)?;
        let found: HashSet<i64> = rows.iter().map(|r| r.get(0)).collect();
        Ok(actors.iter().map(|a| found.contains(a)).collect())
    }

    async fn notif_members_many(&self, asks: &[(u64, Vec<UserId>)]) -> StoreResult<Vec<Vec<bool>>> {
        // One query per shard: every (item, actor) pair asked, matched against the actors.
        let mut by_shard: std::collections::BTreeMap<usize, (Vec<i64>, Vec<i64>)> = Default::default();
        for (item, users) in asks {
            let s = by_shard.entry(self.shard_of_item(*item)).or_default();
            for u in users {
                s.0.push(i(*item));
                s.1.push(i(u.0));
            }
        }
        let found =
            futures::future::try_join_all(by_shard.into_iter().filter(|(_, (k, _))| !k.is_empty()).map(
                |(shard, (items, actors))| async move {
                    let c = self.conn(shard).await?;
                    c.query(
                    "SELECT DISTINCT k.item, k.actor FROM unnest($1::bigint[], $2::bigint[]) AS k(item, actor)
                     WHERE EXISTS (SELECT 1 FROM notif_actors a WHERE a.item = k.item AND a.actor = k.actor)",
                    &[&items, &actors],
                )
                .await
                .map_err(pg_err)
                },
            ))
            .await?;
        let pairs: HashSet<(i64, i64)> = found.iter().flatten().map(|r| (r.get(0), r.get(1))).collect();
        Ok(asks
            .iter()
            .map(|(item, users)| users.iter().map(|u| pairs.contains(&(i(*item), i(u.0)))).collect())
            .collect())
    }

    async fn inbox(
        &self,
        recipient: UserId,
        after: Option<(u64, u64)>,
        limit: usize,
    ) -> StoreResult<Vec<NotifItem>> {
        let c = self.conn(self.shard_of_user(recipient)).await?;
        let limit = lim(limit);
        // Most recently updated first, ties by ascending ID (the embedded key order).
        let rows = match after {
            Some((updated, id)) => {
                // Stored times and IDs are below 2^63; a larger cursor is past every item in
                // its dimension, which these clamped bounds express exactly.
                let (updated, id) = match i64::try_from(updated) {
                    Ok(t) => (t, i64::try_from(id).unwrap_or(i64::MAX)),
                    Err(_) => (i64::MAX, -1),
                };
                c.query(
                    &format!(
                        "SELECT {ITEM_COLS} FROM notif_items
                         WHERE recipient = $1 AND updated_ms <= $2 AND (updated_ms < $2 OR id > $3)
                         ORDER BY updated_ms DESC, id LIMIT $4"
                    ),
                    &[&i(recipient.0), &updated, &id, &limit],
                )
                .await
            }
            None => {
                c.query(
                    &format!(
                        "SELECT {ITEM_COLS} FROM notif_items WHERE recipient = $1
                         ORDER BY updated_ms DESC, id LIMIT $2"
                    ),
                    &[&i(recipient.0), &limit],
                )
                .await
            }
        }
        .map_err(pg_err)?;
        rows.iter().map(item_of).collect()
    }

    async fn prune_notifications(&self, shard: usize, before_ms: u64, limit: usize) -> StoreResult<u64> {
        if limit == 0 {
            return Ok(0);
        }
        // Stored times are below 2^63: a larger cutoff is past every item.
        let before = i64::try_from(before_ms).unwrap_or(i64::MAX);
        let mut c = self.conn(shard).await?;
        let tx = c.transaction().await.map_err(pg_err)?;
        // The notifier's writer lock on this shard: it reads and changes items under it, so it
        // never meets an item half pruned, and it waits at most for this one batch.
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&WRITER_LOCK]).await.map_err(pg_err)?;
        let rows = tx
            .query(
                "SELECT id FROM notif_items WHERE updated_ms < $1 ORDER BY updated_ms, id LIMIT $2",
                &[&before, &(limit as i64)],
            )
            .await
            .map_err(pg_err)?;
        let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        if !ids.is_empty() {
            tx.execute("DELETE FROM notif_actors WHERE item = ANY($1)", &[&ids]).await.map_err(pg_err)?;
            tx.execute("DELETE FROM notif_items WHERE id = ANY($1)", &[&ids]).await.map_err(pg_err)?;
        }
        tx.commit().await.map_err(pg_err)?;
        Ok(ids.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::testing::TestShards;
    use likewise_core::ports::CounterStore;
    use likewise_store::embedded::{EmbeddedOptions, EmbeddedStore};

    /// `actor` liked post 5 of `recipient`, at 1,000 ms plus the actor's ID.
    fn add(recipient: u64, actor: u64) -> Change {
        Change::Add {
            key: NotifKey { recipient: UserId(recipient), post: PostId(5), kind: NotifKind::PostLiked },
            actor: UserId(actor),
            comment: None,
            ts_ms: 1_000 + actor,
        }
    }

    /// An item without its ID (IDs differ between engines), its change stamp (from each
    /// engine's clock) as the rank of the batch that stamped it.
    fn shape(it: &NotifItem, ranks: &mut HashMap<u64, u64>) -> NotifItem {
        let next = ranks.len() as u64;
        let rank = *ranks.entry(it.updated_ms).or_insert(next);
        NotifItem { id: 0, updated_ms: rank, ..it.clone() }
    }

    /// An inbox as [`shape`]s, in an order that does not depend on IDs (items changed in
    /// one batch share their stamp, and their IDs break the tie).
    fn inbox_shape(items: &[NotifItem], ranks: &mut HashMap<u64, u64>) -> Vec<NotifItem> {
        let mut v: Vec<NotifItem> = items.iter().map(|it| shape(it, ranks)).collect();
        v.sort_by_key(|it| (std::cmp::Reverse(it.updated_ms), it.key));
        v
    }

    /// A recipient's whole inbox, paged two at a time through the keyset cursor.
    async fn paged(s: &dyn NotificationStore, r: UserId) -> Vec<NotifItem> {
        let mut out: Vec<NotifItem> = Vec::new();
        loop {
            let after = out.last().map(|it| (it.updated_ms, it.id));
            let page = s.inbox(r, after, 2).await.expect("inbox");
            if page.is_empty() {
                return out;
            }
            out.extend(page);
        }
    }

    /// The same batches of changes, applied to the embedded engine and to two PostgreSQL
    /// shards, give the same returned items, inboxes, pages and actor sets (an actor with
    /// several contributions to an item stays until the last is withdrawn).
    #[tokio::test]
    async fn matches_the_embedded_engine() {
        let t = TestShards::create(2).await;
        let pg = t.store().await;
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = EmbeddedOptions {
            cache_bytes: 8 << 20,
            memtable_bytes: 4 << 20,
            max_journal_bytes: 64 << 20,
            ..Default::default()
        };
        let emb = EmbeddedStore::open(dir.path(), &opts).expect("embedded");
        let kinds = [NotifKind::PostLiked, NotifKind::Commented];
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |n: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % n
        };
        let mut ts = 1_000u64;
        let mut batches: Vec<Vec<Change>> = Vec::new();
        for _ in 0..40 {
            let mut batch = Vec::new();
            for _ in 0..next(12) {
                let key = NotifKey {
                    recipient: UserId(1 + next(4)),
                    post: PostId(1 + next(2)),
                    kind: kinds[next(2) as usize],
                };
                let actor = UserId(10 + next(4));
                ts += 1;
                // Few comments, so actors often hold several contributions to one item.
                let comment = [None, Some(CommentId(100)), Some(CommentId(101))][next(3) as usize];
                batch.push(if next(5) < 2 {
                    Change::Remove { key, actor, comment }
                } else {
                    Change::Add { key, actor, comment, ts_ms: ts }
                });
            }
            batches.push(batch);
        }
        // Redeliveries: a batch applied again changes nothing but is still reported.
        batches.push(batches[3].clone());
        batches.push(batches[39].clone());
        let mut emptied = 0;
        let (mut ranks_a, mut ranks_b, mut last_stamp) = (HashMap::new(), HashMap::new(), 0);
        let (fa, fb) = (
            emb.fence_notifications("notifier").await.expect("fence"),
            pg.fence_notifications("notifier").await.expect("fence"),
        );
        for (n, batch) in batches.iter().enumerate() {
            let a = emb.apply_notifications("notifier", fa, n as u64, batch).await.expect("embedded");
            let b = pg.apply_notifications("notifier", fb, n as u64, batch).await.expect("postgres");
            assert_eq!(
                a.iter().map(|it| shape(it, &mut ranks_a)).collect::<Vec<_>>(),
                b.iter().map(|it| shape(it, &mut ranks_b)).collect::<Vec<_>>(),
                "{n}"
            );
            // Each batch's stamp is past every earlier one.
            let newest = b.iter().map(|it| it.updated_ms).max().unwrap_or(0);
            assert!(b.iter().all(|it| it.updated_ms == newest || it.updated_ms <= last_stamp), "{n}: {b:?}");
            last_stamp = last_stamp.max(newest);
            for it in &b {
                assert_eq!(pg.shard_of_item(it.id), pg.shard_of_user(it.key.recipient), "{it:?}");
            }
            emptied += b.iter().filter(|it| it.actor_count == 0).count();
        }
        assert!(emptied > 0, "the script should empty some items");
        let actors: Vec<UserId> = (10..22).map(UserId).collect();
        for r in 1..=4 {
            let a = emb.inbox(UserId(r), None, 100).await.expect("embedded");
            let b = pg.inbox(UserId(r), None, 100).await.expect("postgres");
            assert!(!b.is_empty());
            assert_eq!(inbox_shape(&a, &mut ranks_a), inbox_shape(&b, &mut ranks_b));
            assert_eq!(paged(&pg, UserId(r)).await, b, "keyset pages");
            for y in &b {
                let x = a.iter().find(|x| x.key == y.key).expect("the same item");
                let ma = emb.notif_members(x.id, &actors).await.expect("embedded");
                let mb = pg.notif_members(y.id, &actors).await.expect("postgres");
                assert_eq!(ma, mb);
                assert_eq!(mb.iter().filter(|m| **m).count() as u64, y.actor_count);
            }
            // The whole page's members at once: the same answers.
            let asks: Vec<(u64, Vec<UserId>)> = b.iter().map(|y| (y.id, actors.clone())).collect();
            let many = pg.notif_members_many(&asks).await.expect("postgres");
            for ((item, users), got) in asks.iter().zip(&many) {
                assert_eq!(got, &pg.notif_members(*item, users).await.expect("postgres"));
            }
        }
        // The offset lands where `CounterStore::offset` reads it, and may rewind.
        assert_eq!(pg.offset("notifier").await.expect("offset"), batches.len() as u64 - 1);
        assert!(pg.apply_notifications("notifier", fb, 0, &[]).await.expect("rewind").is_empty());
        assert_eq!(pg.offset("notifier").await.expect("offset"), 0);
    }

    /// Each shard prunes its own recipients' items, by the same cutoff as the embedded
    /// engine: an old item on one shard goes when that shard's pruner runs, another shard's
    /// stays until its own does, and once every shard ran the inboxes match the embedded
    /// engine's, actors included.
    #[tokio::test]
    async fn each_shard_prunes_its_own_items_as_the_embedded_engine_does() {
        let t = TestShards::create(2).await;
        let pg = t.store().await;
        let dir = tempfile::tempdir().expect("tempdir");
        let emb = EmbeddedStore::open(dir.path(), &EmbeddedOptions::default()).expect("embedded");
        assert_ne!(pg.shard_of_user(UserId(1)), pg.shard_of_user(UserId(2)));
        let add = |r: u64, post: u64, actor: u64| Change::Add {
            key: NotifKey { recipient: UserId(r), post: PostId(post), kind: NotifKind::PostLiked },
            actor: UserId(actor),
            comment: None,
            ts_ms: 1_000 + actor,
        };
        let old_batch = [add(1, 5, 10), add(1, 5, 11), add(2, 5, 10), add(2, 6, 12)];
        let new_batch = [add(1, 7, 13), add(2, 6, 14)];
        let (s1, s2) = (pg.shard_of_user(UserId(1)), pg.shard_of_user(UserId(2)));
        let runs: [(&dyn NotificationStore, Vec<usize>); 2] = [(&emb, vec![0]), (&pg, vec![s1, s2])];
        let mut inboxes = Vec::new();
        for (s, shards) in runs {
            let f = s.fence_notifications("notifier").await.expect("fence");
            let old = s.apply_notifications("notifier", f, 1, &old_batch).await.expect("old");
            let new = s.apply_notifications("notifier", f, 2, &new_batch).await.expect("new");
            let (old_ms, new_ms) = (old[0].updated_ms, new[0].updated_ms);
            if shards.len() == 2 {
                // Only recipient 1's shard: recipient 2's old item stays meanwhile.
                assert_eq!(s.prune_notifications(shards[0], new_ms, 1_000).await.expect("prune"), 1);
                let r2 = s.inbox(UserId(2), None, 10).await.expect("inbox");
                assert_eq!(r2.len(), 2, "the other shard's items wait for its own pruner");
            }
            let mut pruned = 0;
            for sh in shards {
                pruned += s.prune_notifications(sh, new_ms, 1_000).await.expect("prune");
            }
            assert!(pruned >= 1);
            let mut ranks = HashMap::new();
            let mut shapes = Vec::new();
            for r in [1, 2] {
                let items = paged(s, UserId(r)).await;
                assert!(
                    items.iter().all(|it| it.updated_ms >= new_ms && it.updated_ms > old_ms),
                    "{items:?}"
                );
                for it in &items {
                    let members =
                        s.notif_members(it.id, &(10..15).map(UserId).collect::<Vec<_>>()).await.expect("m");
                    shapes.push((shape(it, &mut ranks), members));
                }
            }
            inboxes.push(shapes);
        }
        assert_eq!(inboxes[0], inboxes[1]);
        // Kept: recipient 1's post 7 (13), recipient 2's post 6 (12 and 14, updated later).
        assert_eq!(inboxes[0].len(), 2, "{:?}", inboxes[0]);
        for sh in [s1, s2] {
            let c = pg.conn(sh).await.expect("conn");
            let orphans: i64 = c
                .query_one(
                    "SELECT count(*) FROM notif_actors a
                     WHERE NOT EXISTS (SELECT 1 FROM notif_items i WHERE i.id = a.item)",
                    &[],
                )
                .await
                .expect("orphans")
                .get(0);
            assert_eq!(orphans, 0, "shard {sh}: every pruned item's actors went with it");
        }
    }

    /// A writer whose fence was taken over (it lost its lease while a write was in flight)
    /// changes nothing on any shard, and its successor's writes go on; on both engines.
    #[tokio::test]
    async fn a_superseded_writer_changes_nothing() {
        let t = TestShards::create(2).await;
        let pg = t.store().await;
        let dir = tempfile::tempdir().expect("tempdir");
        let emb = EmbeddedStore::open(dir.path(), &EmbeddedOptions::default()).expect("embedded");
        // Recipients 1 and 2 live on different shards: the refusal must cover both.
        assert_ne!(pg.shard_of_user(UserId(1)), pg.shard_of_user(UserId(2)));
        let engines: [&dyn NotificationStore; 2] = [&emb, &pg];
        let offsets: [&dyn CounterStore; 2] = [&emb, &pg];
        for (s, o) in engines.into_iter().zip(offsets) {
            let old = s.fence_notifications("notifier").await.expect("fence");
            s.apply_notifications("notifier", old, 3, &[add(1, 10), add(2, 10)]).await.expect("first holder");
            let new = s.fence_notifications("notifier").await.expect("fence");
            assert!(new > old);
            let stale = s.apply_notifications("notifier", old, 9, &[add(1, 11), add(2, 11)]).await;
            assert!(matches!(stale, Err(StoreError::Superseded(_))), "{stale:?}");
            for r in [1, 2] {
                let items = s.inbox(UserId(r), None, 10).await.expect("inbox");
                assert_eq!(items.len(), 1);
                assert_eq!(items[0].actor_count, 1, "the refused write added nothing for {r}");
            }
            assert_eq!(o.offset("notifier").await.expect("offset"), 3, "the refused offset");
            s.apply_notifications("notifier", new, 4, &[add(1, 12), add(2, 12)]).await.expect("successor");
            for r in [1, 2] {
                assert_eq!(s.inbox(UserId(r), None, 10).await.expect("inbox")[0].actor_count, 2);
            }
            assert_eq!(o.offset("notifier").await.expect("offset"), 4);
        }
    }

    /// One commit for several partitions, on both engines: every partition's offset moves
    /// with the changes; when one partition's fence was taken over, nothing is written (not
    /// the other partitions' changes or offsets either) and the refusal names exactly the
    /// partitions fenced off.
    #[tokio::test]
    async fn a_commit_of_several_partitions_is_all_or_nothing_and_names_the_fenced_off() {
        let t = TestShards::create(2).await;
        let pg = t.store().await;
        let dir = tempfile::tempdir().expect("tempdir");
        let emb = EmbeddedStore::open(dir.path(), &EmbeddedOptions::default()).expect("embedded");
        let engines: [&dyn NotificationStore; 2] = [&emb, &pg];
        let offsets: [&dyn CounterStore; 2] = [&emb, &pg];
        for (s, o) in engines.into_iter().zip(offsets) {
            let names = ["notifications.p1", "notifications.p2", "notifications.p3"];
            let mut commits = Vec::new();
            for (k, name) in names.iter().enumerate() {
                let fence = s.fence_notifications(name).await.expect("fence");
                commits.push(NotifCommit { consumer: name.to_string(), fence, offset: 10 + k as u64 });
            }
            s.commit_notifications(&commits, &[add(1, 10), add(2, 10)]).await.expect("all three");
            for (k, name) in names.iter().enumerate() {
                assert_eq!(o.offset(name).await.expect("offset"), 10 + k as u64, "{name}");
            }
            // p2 and p3 are taken over elsewhere.
            s.fence_notifications(names[1]).await.expect("fence");
            s.fence_notifications(names[2]).await.expect("fence");
            for c in &mut commits {
                c.offset += 10;
            }
            let stale = s.commit_notifications(&commits, &[add(1, 11), add(2, 11)]).await;
            match stale {
                Err(StoreError::Superseded(which)) => assert_eq!(which, "notifications.p2,notifications.p3"),
                other => panic!("{other:?}"),
            }
            for r in [1, 2] {
                assert_eq!(s.inbox(UserId(r), None, 10).await.expect("inbox")[0].actor_count, 1, "{r}");
            }
            for (k, name) in names.iter().enumerate() {
                assert_eq!(o.offset(name).await.expect("offset"), 10 + k as u64, "{name} did not move");
            }
        }
    }

    /// Two partitions' notifiers change one recipient's items: the later commit sorts after
    /// the earlier although its writer's clock (its own stamp row) is an hour behind, so a
    /// client resuming the event stream after the first change gets the second.
    #[tokio::test]
    async fn changes_of_two_partitions_sort_in_commit_order() {
        let t = TestShards::create(2).await;
        let pg = t.store().await;
        let (p1, p2) = ("notifications.p1", "notifications.p2");
        let add = |post: u64, actor: u64| Change::Add {
            key: NotifKey { recipient: UserId(1), post: PostId(post), kind: NotifKind::PostLiked },
            actor: UserId(actor),
            comment: None,
            ts_ms: 1_000,
        };
        let (f1, f2) = (
            pg.fence_notifications(p1).await.expect("fence"),
            pg.fence_notifications(p2).await.expect("fence"),
        );
        // p1's writer stamped its last batch an hour ahead (a clock since set back).
        let ahead = likewise_engine::now_ms() + 3_600_000;
        let c = pg.conn(0).await.expect("conn");
        c.execute(
            "INSERT INTO consumer_offsets (consumer, upto) VALUES ($1, $2)",
            &[&stamp_key(p1), &i(ahead)],
        )
        .await
        .expect("stamp");
        let first = pg.apply_notifications(p1, f1, 5, &[add(1, 10)]).await.expect("p1");
        let second = pg.apply_notifications(p2, f2, 6, &[add(2, 11)]).await.expect("p2");
        assert!(first[0].updated_ms > ahead);
        assert!(second[0].updated_ms > first[0].updated_ms, "{first:?} then {second:?}");
        let inbox = pg.inbox(UserId(1), None, 10).await.expect("inbox");
        assert_eq!(inbox.iter().map(|it| it.key.post.0).collect::<Vec<_>>(), vec![2, 1], "newest first");
    }
}
