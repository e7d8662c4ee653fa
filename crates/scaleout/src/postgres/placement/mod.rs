//! Placement: which shard holds a post's or a user's rows.
//!
//! Posts and users map to a fixed number of logical **buckets** (`id % buckets`, about
//! 4,096); the **catalog** (the `placement` tables on shard 0, migration 15) maps each bucket
//! to a physical shard. The bucket count never changes after a deployment is created, so a
//! bucket is the unit that moves when shards are added: no ID, key or row names a physical
//! shard, and more than 64 shards work.
//!
//! IDs that are routed without their post carry the **bucket**:
//! - a comment ID: `| 41 bits ms | 10 bits of the shard's sequence | 12 bits bucket |`
//!   (the post's bucket, so a comment, its replies and its likes follow the post);
//! - a notification item ID: `sequence * 4096 + bucket` (the recipient's bucket).
//!
//! **Legacy IDs.** Before migration 15, rows were placed by `id % shards` and comment and item
//! IDs kept the shard in their low 6 bits. The migration moves nothing: it picks a bucket
//! count that is a multiple of the shard count, so `(id % buckets) % shards == id % shards`,
//! places bucket `b` on shard `b % shards`, and records the highest comment and item ID
//! issued so far. IDs up to those are routed the old way (`(id % 64) % legacy shards`); new
//! ones are always issued above them ([`Placement::comment_id`]). A store that has not read a
//! catalog (a schema before migration 15) routes every ID the old way and issues old-layout
//! IDs: exactly what the code before placement did.

use super::{PgStore, i, pg_err, u};
use likewise_core::comment::id::{EPOCH_UNIX_MS, SEQUENCE_BITS, TIMESTAMP_BITS};
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::{StoreError, StoreResult};

/// Buckets a deployment aims for (the bucket count is the largest multiple of the shard
/// count at creation that is at most this).
pub const TARGET_BUCKETS: u32 = 1 << BUCKET_BITS;

/// Bits of a comment ID (and factor of an item ID) that carry the bucket.
pub const BUCKET_BITS: u32 = 12;

/// Most shards a deployment can have: each must be able to own a bucket.
pub const MAX_SHARDS: usize = TARGET_BUCKETS as usize;

/// Low bits of a legacy comment or item ID that carried its shard.
const LEGACY_SHARD_BITS: u32 = 6;

/// Bits of the shard's sequence in a comment ID.
const COMMENT_SEQ_BITS: u32 = SEQUENCE_BITS - BUCKET_BITS;

/// How IDs issued before placement are routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Legacy {
    /// Shards when the catalog was created (legacy IDs name one of them).
    pub shards: usize,
    /// The highest comment ID issued before the catalog; `u64::MAX` when there is no catalog.
    pub comment_max: u64,
    /// The highest notification item ID issued before the catalog (`u64::MAX`: no catalog).
    pub item_max: u64,
}

/// One version of the bucket-to-shard map, with the rules that route IDs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Catalog version (0: no catalog read).
    pub version: i64,
    shard_of_bucket: Vec<u32>,
    legacy: Legacy,
}

impl Placement {
    /// The bucket count for a deployment created with `shards` shards: a multiple of it, so
    /// that the initial placement keeps every row where `id % shards` put it.
    pub fn bucket_count(shards: usize) -> u32 {
        let n = shards.clamp(1, MAX_SHARDS) as u32;
        n * (TARGET_BUCKETS / n)
    }

    /// The placement the catalog starts with: bucket `b` on shard `b % shards`.
    pub fn initial(shards: usize, legacy: Legacy, version: i64) -> Placement {
        let buckets = Self::bucket_count(shards);
        Placement { version, shard_of_bucket: (0..buckets).map(|b| b % shards as u32).collect(), legacy }
    }

    /// The placement of a store that has read no catalog: every ID is legacy.
    pub fn before_catalog(shards: usize) -> Placement {
        Self::initial(shards, Legacy { shards, comment_max: u64::MAX, item_max: u64::MAX }, 0)
    }

    /// A placement read from a catalog: `shard_of_bucket[b]` for every bucket.
    pub fn from_catalog(
        version: i64,
        shard_of_bucket: Vec<u32>,
        legacy: Legacy,
    ) -> Result<Placement, String> {
        if shard_of_bucket.is_empty() || shard_of_bucket.len() > TARGET_BUCKETS as usize {
            return Err(format!("the catalog has {} buckets", shard_of_bucket.len()));
        }
        if legacy.shards == 0 {
            return Err("the catalog names no legacy shard count".into());
        }
        Ok(Placement { version, shard_of_bucket, legacy })
    }

    /// Whether this placement came from a catalog (new IDs carry buckets).
    pub fn has_catalog(&self) -> bool {
        self.legacy.comment_max != u64::MAX
    }

    /// The number of buckets.
    pub fn buckets(&self) -> u32 {
        self.shard_of_bucket.len() as u32
    }

    /// The legacy routing rules.
    pub fn legacy(&self) -> Legacy {
        self.legacy
    }

    /// The shard of each bucket.
    pub fn shards_of_buckets(&self) -> &[u32] {
        &self.shard_of_bucket
    }

    /// The highest shard index any bucket or legacy ID names, plus one.
    pub fn shards_named(&self) -> usize {
        let most = self.shard_of_bucket.iter().max().map_or(0, |m| *m as usize + 1);
        most.max(self.legacy.shards)
    }

    /// Buckets placed on `shard`.
    pub fn buckets_on(&self, shard: usize) -> usize {
        self.shard_of_bucket.iter().filter(|s| **s as usize == shard).count()
    }

    /// The bucket of a post or user ID.
    pub fn bucket_of(&self, id: u64) -> u32 {
        (id % self.shard_of_bucket.len() as u64) as u32
    }

    fn shard_of_bucket(&self, bucket: u32) -> usize {
        self.shard_of_bucket[bucket as usize % self.shard_of_bucket.len()] as usize
    }

    /// The shard holding a post's rows.
    pub fn shard_of_post(&self, post: PostId) -> usize {
        self.shard_of_bucket(self.bucket_of(post.0))
    }

    /// The shard holding a user's rows.
    pub fn shard_of_user(&self, user: UserId) -> usize {
        self.shard_of_bucket(self.bucket_of(user.0))
    }

    fn legacy_shard(&self, id: u64) -> usize {
        ((id % (1 << LEGACY_SHARD_BITS)) as usize) % self.legacy.shards
    }

    /// The bucket of a comment (its post's); `None` for a legacy comment, placed by its ID.
    pub fn bucket_of_comment(&self, id: CommentId) -> Option<u32> {
        (id.0 > self.legacy.comment_max).then_some((id.0 % (1 << BUCKET_BITS)) as u32)
    }

    /// The shard holding a comment (its post's shard).
    pub fn shard_of_comment(&self, id: CommentId) -> usize {
        if id.0 <= self.legacy.comment_max {
            self.legacy_shard(id.0)
        } else {
            self.shard_of_bucket((id.0 % (1 << BUCKET_BITS)) as u32)
        }
    }

    /// The shard holding a notification item (its recipient's shard).
    pub fn shard_of_item(&self, item: u64) -> usize {
        if item <= self.legacy.item_max {
            self.legacy_shard(item)
        } else {
            self.shard_of_bucket((item % (1 << BUCKET_BITS)) as u32)
        }
    }

    /// A new comment ID for a comment on `post`, made on `shard` at `now_ms` from `seq`, a
    /// number the shard never hands out twice. Always above the legacy IDs, whatever the
    /// clock says.
    pub fn comment_id(&self, post: PostId, shard: usize, seq: u64, now_ms: u64) -> CommentId {
        let max_ms = (1u64 << TIMESTAMP_BITS) - 1;
        let mut ms = now_ms.saturating_sub(EPOCH_UNIX_MS).min(max_ms);
        if !self.has_catalog() {
            let low = ((seq & 0xFFFF) << LEGACY_SHARD_BITS) | shard as u64;
            return CommentId((ms << SEQUENCE_BITS) | low);
        }
        // A node whose clock is behind the one that issued the last legacy ID still issues
        // IDs above it: it borrows the next millisecond.
        ms = ms.max((self.legacy.comment_max >> SEQUENCE_BITS) + 1).min(max_ms);
        let low = ((seq % (1 << COMMENT_SEQ_BITS)) << BUCKET_BITS) | u64::from(self.bucket_of(post.0));
        CommentId((ms << SEQUENCE_BITS) | low)
    }

    /// A new notification item ID for `recipient`, made on `shard` from `seq` (the shard's
    /// item sequence, which only grows, so new IDs stay above the legacy ones).
    pub fn item_id(&self, recipient: UserId, shard: usize, seq: u64) -> u64 {
        if self.has_catalog() {
            (seq << BUCKET_BITS) | u64::from(self.bucket_of(recipient.0))
        } else {
            (seq << LEGACY_SHARD_BITS) | shard as u64
        }
    }
}

/// Read the catalog (shard 0's `placement_catalog` and `placement`); `None` before migration
/// 15 or before `likewise migrate` filled it. An error when it names shards this store was
/// not given.
pub(crate) async fn load(c: &tokio_postgres::Client, shards: usize) -> StoreResult<Option<Placement>> {
    let exists: bool =
        c.query_one("SELECT to_regclass('placement_catalog') IS NOT NULL", &[]).await.map_err(pg_err)?.get(0);
    if !exists {
        return Ok(None);
    }
    let Some(meta) = c
        .query_opt(
            "SELECT version, buckets, legacy_shards, legacy_comment_max, legacy_item_max FROM placement_catalog",
            &[],
        )
        .await
        .map_err(pg_err)?
    else {
        return Ok(None);
    };
    let buckets: i32 = meta.get(1);
    let rows = c.query("SELECT bucket, shard FROM placement ORDER BY bucket", &[]).await.map_err(pg_err)?;
    let mut map = vec![u32::MAX; buckets.max(0) as usize];
    for r in &rows {
        let (b, s): (i32, i32) = (r.get(0), r.get(1));
        if let Some(slot) = map.get_mut(b as usize) {
            *slot = s as u32;
        }
    }
    let corrupt = |detail: String| StoreError::Corrupt { keyspace: "placement", detail };
    if let Some(b) = map.iter().position(|s| *s == u32::MAX) {
        return Err(corrupt(format!("bucket {b} of {buckets} has no shard")));
    }
    let legacy = Legacy {
        shards: meta.get::<_, i32>(2) as usize,
        comment_max: u(meta.get(3)),
        item_max: u(meta.get(4)),
    };
    let p = Placement::from_catalog(meta.get(0), map, legacy).map_err(corrupt)?;
    if p.shards_named() > shards {
        return Err(StoreError::Engine(format!(
            "the placement catalog places data on {} shards, but store.postgres_shards lists {shards}: \
             list every shard, in the order they were added",
            p.shards_named()
        )));
    }
    Ok(Some(p))
}

impl PgStore {
    /// Register `url` as the next shard in the catalog on shard 0, so every running node opens
    /// it when it next reads the catalog (within [`crate::postgres::reshard::WATCH_INTERVAL`]).
    /// The store must have read the catalog (its shards then include every registered one):
    /// the new shard's number is their count.
    pub async fn register_shard(&self, url: &str) -> StoreResult<usize> {
        let index = self.shard_count();
        let mut c0 = self.conn(0).await?;
        let tx = c0.transaction().await.map_err(pg_err)?;
        let version: Option<i64> = tx
            .query_opt("SELECT version FROM placement_catalog FOR UPDATE", &[])
            .await
            .map_err(pg_err)?
            .map(|r| r.get(0));
        if version.is_none() {
            return Err(StoreError::Engine(
                "no placement catalog on shard 0: run `likewise migrate` first".into(),
            ));
        }
        let taken: i64 = tx
            .query_one(
                "SELECT count(*) FROM placement_shards WHERE shard >= $1 OR url = $2",
                &[&(index as i32), &url],
            )
            .await
            .map_err(pg_err)?
            .get(0);
        if taken > 0 {
            return Err(StoreError::Engine(format!(
                "the catalog registers this URL already, or a shard numbered {index} or above: \
                 list every registered shard in store.postgres_shards, in order"
            )));
        }
        tx.execute("INSERT INTO placement_shards (shard, url) VALUES ($1, $2)", &[&(index as i32), &url])
            .await
            .map_err(pg_err)?;
        tx.execute("UPDATE placement_catalog SET version = version + 1", &[]).await.map_err(pg_err)?;
        tx.commit().await.map_err(pg_err)?;
        drop(c0);
        self.load_placement().await?;
        Ok(index)
    }
}

/// Create the catalog on shard 0 unless it exists: the initial placement for the shards
/// listed now, and the highest comment and item IDs every shard has issued (those keep their
/// legacy route). Run by `likewise migrate` after every shard has migration 15; the catalog
/// row's primary key makes a second, concurrent migrator insert nothing.
pub(crate) async fn create_catalog(pg: &PgStore) -> StoreResult<()> {
    let mut c0 = pg.conn(0).await?;
    if load(&c0, pg.shard_count()).await?.is_some() {
        return Ok(());
    }
    let (mut comment_max, mut item_max) = (0u64, 0u64);
    for shard in 0..pg.shard_count() {
        let c = pg.conn(shard).await?;
        let r = c
            .query_one(
                "SELECT (SELECT coalesce(max(id), 0) FROM comments), (SELECT coalesce(max(id), 0) FROM notif_items)",
                &[],
            )
            .await
            .map_err(pg_err)?;
        comment_max = comment_max.max(u(r.get(0)));
        item_max = item_max.max(u(r.get(1)));
    }
    let shards = pg.shard_count();
    let buckets = Placement::bucket_count(shards);
    let tx = c0.transaction().await.map_err(pg_err)?;
    let created = tx
        .execute(
            "INSERT INTO placement_catalog (version, buckets, legacy_shards, legacy_comment_max, legacy_item_max)
             VALUES (1, $1, $2, $3, $4) ON CONFLICT DO NOTHING",
            &[&(buckets as i32), &(shards as i32), &i(comment_max), &i(item_max)],
        )
        .await
        .map_err(pg_err)?;
    if created == 1 {
        tx.execute(
            "INSERT INTO placement (bucket, shard) SELECT b, b % $2 FROM generate_series(0, $1 - 1) AS b",
            &[&(buckets as i32), &(shards as i32)],
        )
        .await
        .map_err(pg_err)?;
    }
    tx.commit().await.map_err(pg_err)?;
    Ok(())
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod unit {
    use super::*;

    fn catalog(shards: usize, comment_max: u64, item_max: u64) -> Placement {
        Placement::initial(shards, Legacy { shards, comment_max, item_max }, 1)
    }

    #[test]
    fn the_initial_placement_keeps_every_row_where_modulo_put_it() {
        for shards in [1, 2, 3, 5, 7, 64, 100, 1000] {
            let p = catalog(shards, 0, 0);
            assert!(p.buckets() <= TARGET_BUCKETS && p.buckets() > TARGET_BUCKETS - shards as u32);
            for id in (0..10_000u64).chain([u64::MAX, u64::MAX - 1, 1 << 40, 12_345_678_901]) {
                assert_eq!(p.shard_of_post(PostId(id)), (id % shards as u64) as usize, "{shards} {id}");
                assert_eq!(p.shard_of_user(UserId(id)), (id % shards as u64) as usize, "{shards} {id}");
            }
        }
    }

    #[test]
    fn more_than_64_shards_route_comments_and_items_to_their_posts_and_recipients() {
        let p = catalog(100, 0, 0);
        let mut shards_seen = std::collections::HashSet::new();
        for post in 0..5_000u64 {
            let shard = p.shard_of_post(PostId(post));
            shards_seen.insert(shard);
            for (seq, now) in
                [(0, EPOCH_UNIX_MS + 5), (1023, EPOCH_UNIX_MS + 5), (post * 7919, 1_800_000_000_000)]
            {
                let id = p.comment_id(PostId(post), shard, seq, now);
                assert_eq!(p.shard_of_comment(id), shard, "post {post} comment {id:?}");
            }
            let item = p.item_id(UserId(post), shard, post + 1);
            assert_eq!(p.shard_of_item(item), p.shard_of_user(UserId(post)));
        }
        assert_eq!(shards_seen.len(), 100, "every shard holds posts");
        assert!(shards_seen.iter().any(|s| *s >= 64));
    }

    #[test]
    fn legacy_ids_keep_their_old_route_and_new_ones_sort_above_them() {
        let before = Placement::before_catalog(3);
        // The old layout: the shard in the low 6 bits.
        let old = before.comment_id(PostId(7), 1, 41, EPOCH_UNIX_MS + 10_000);
        assert_eq!(old.0 % 64, 1);
        assert_eq!(before.shard_of_comment(old), 1);
        let old_item = before.item_id(UserId(8), 2, 9);
        assert_eq!(before.shard_of_item(old_item), 2);

        let after = catalog(3, old.0, old_item);
        assert_eq!(after.shard_of_comment(old), 1);
        assert_eq!(after.shard_of_item(old_item), 2);
        // A node whose clock lags still issues IDs above every legacy one.
        let new = after.comment_id(PostId(7), 1, 0, EPOCH_UNIX_MS + 1);
        assert!(new.0 > old.0);
        assert_eq!(after.shard_of_comment(new), 1);
        let new_item = after.item_id(UserId(8), 2, 10);
        assert!(new_item > old_item);
        assert_eq!(after.shard_of_item(new_item), after.shard_of_user(UserId(8)));
    }

    #[test]
    fn a_moved_bucket_takes_its_comments_along() {
        let p = catalog(2, 0, 0);
        let post = PostId(4);
        let id = p.comment_id(post, 0, 5, EPOCH_UNIX_MS + 99);
        let mut map = p.shards_of_buckets().to_vec();
        map[p.bucket_of(post.0) as usize] = 2;
        let moved = Placement::from_catalog(2, map, p.legacy()).expect("catalog");
        assert_eq!(moved.shard_of_post(post), 2);
        assert_eq!(moved.shard_of_comment(id), 2);
        assert_eq!(moved.shards_named(), 3);
    }
}
