//! A target's likers, newest first, stored as pages: one row per (target, write batch, 16 ms
//! window) holding that batch's likers of the target, instead of one row per like.
//!
//! Why: a like wrote two memtable rows, `user_likes` and a likers row. Each row is a descent
//! of fjall's memtable skiplist on the single writer thread, then flush and compaction work;
//! leaving the likers row out measured +29-36% likes/s (`docs/benchmarks.md`, "What we tried").
//! A hot post's batch of a thousand likes now writes one likers row.
//!
//! Layout: key kind(1) target(8) ts_max(8) page(8), value 2, the byte width w of the page's
//! largest user ID, then entries (ts_max - ts (1), user (w)) sorted ascending by (ts, user).
//! Pages written before that format (value 1) hold (ts(8) user(8)) entries, and are read as
//! they are until a change rewrites them: a page of one like took 17 value bytes, now 6.
//! Every entry of a page has `ts_max - SPAN_MS <= ts <= ts_max`: a batch's
//! likes whose request times spread wider are split into several pages. That bound is what
//! makes both reads below cheap:
//! - an unlike finds its liker's page among the pages with `ts_max` in `[ts, ts + SPAN_MS]`
//!   (`user_likes` holds `ts`), without storing which page it is;
//! - a newest-first page of likers after the cursor (t, user) starts at the pages with
//!   `ts_max <= t + SPAN_MS`, and can stop once the next page's `ts_max` is older than the
//!   last entry it needs.
//!
//! `page` is the batch's first event sequence number (unique per batch that writes likes),
//! or, for pages converted from the per-like rows of earlier versions, a counter with the
//! top bit set.

use super::error::engine_err;
use crate::keys::{V1, be_u64, target_prefix};
use likewise_core::ids::UserId;
use likewise_core::like::Target;
use likewise_core::ports::Liker;
use likewise_core::{StoreError, StoreResult};

/// Widest spread of like times within one page.
pub(super) const SPAN_MS: u64 = 16;

/// Key of a page.
pub(super) fn page_key(t: Target, ts_max: u64, page: u64) -> [u8; 25] {
    page_key_at(target_prefix(t), ts_max, page)
}

/// Key of a page of the target whose [`target_prefix`] is `prefix`.
pub(super) fn page_key_at(prefix: [u8; 9], ts_max: u64, page: u64) -> [u8; 25] {
    let mut k = [0u8; 25];
    k[0..9].copy_from_slice(&prefix);
    k[9..17].copy_from_slice(&ts_max.to_be_bytes());
    k[17..25].copy_from_slice(&page.to_be_bytes());
    k
}

/// A page's entries, (ts, user), sorted ascending.
pub(super) type Entries = Vec<(u64, u64)>;

/// Format byte of the compact pages (module docs): entries of `ts_max - ts` in one byte and
/// the user in the page's byte width.
const V2: u8 = 2;

/// The value of a page keyed with `ts_max`: compact ([`V2`]) when every entry lies within 255
/// ms below `ts_max`, which [`split`] guarantees; pages of the fixed-width format ([`V1`])
/// otherwise, and as earlier versions wrote them.
pub(super) fn encode(ts_max: u64, entries: &[(u64, u64)]) -> Vec<u8> {
    if entries.iter().any(|(ts, _)| *ts > ts_max || ts_max - ts > u64::from(u8::MAX)) {
        let mut v = Vec::with_capacity(1 + entries.len() * 16);
        v.push(V1);
        for (ts, user) in entries {
            v.extend_from_slice(&ts.to_be_bytes());
            v.extend_from_slice(&user.to_be_bytes());
        }
        return v;
    }
    let width = entries.iter().map(|(_, user)| byte_width(*user)).max().unwrap_or(1);
    let mut v = Vec::with_capacity(2 + entries.len() * (1 + width));
    v.push(V2);
    v.push(width as u8);
    for (ts, user) in entries {
        v.push((ts_max - ts) as u8);
        v.extend_from_slice(&user.to_be_bytes()[8 - width..]);
    }
    v
}

/// Bytes a user ID needs, 1 to 8.
fn byte_width(n: u64) -> usize {
    (8 - n.leading_zeros() as usize / 8).max(1)
}

/// A page value's records, read in place.
struct Records<'a> {
    v: &'a [u8],
    ts_max: u64,
    /// Bytes before the first record.
    start: usize,
    /// Bytes of the user ID in a compact record (0 in a fixed-width page).
    width: usize,
    len: usize,
}

impl<'a> Records<'a> {
    fn of(ts_max: u64, v: &'a [u8]) -> StoreResult<Self> {
        let bad = || corrupt(format!("bad page of {} bytes", v.len()));
        match v.first() {
            Some(&V1) if (v.len() - 1).is_multiple_of(16) => {
                Ok(Records { v, ts_max, start: 1, width: 0, len: (v.len() - 1) / 16 })
            }
            Some(&V2) => {
                let width = usize::from(*v.get(1).ok_or_else(bad)?);
                if !(1..=8).contains(&width) || !(v.len() - 2).is_multiple_of(1 + width) {
                    return Err(bad());
                }
                Ok(Records { v, ts_max, start: 2, width, len: (v.len() - 2) / (1 + width) })
            }
            _ => Err(bad()),
        }
    }

    fn get(&self, i: usize) -> (u64, u64) {
        if self.width == 0 {
            let at = self.start + i * 16;
            return (be_u64(self.v, at), be_u64(self.v, at + 8));
        }
        let at = self.start + i * (1 + self.width);
        let mut user = [0u8; 8];
        user[8 - self.width..].copy_from_slice(&self.v[at + 1..at + 1 + self.width]);
        (self.ts_max.saturating_sub(u64::from(self.v[at])), u64::from_be_bytes(user))
    }
}

/// The entries of the page keyed with `ts_max`.
pub(super) fn decode(ts_max: u64, v: &[u8]) -> StoreResult<Entries> {
    let r = Records::of(ts_max, v)?;
    Ok((0..r.len).map(|i| r.get(i)).collect())
}

/// Entries in a page value, without decoding them.
pub(super) fn count(v: &[u8]) -> StoreResult<usize> {
    Ok(Records::of(0, v)?.len)
}

/// Whether the page keyed with `ts_max` holds `entry`: a binary search over its fixed-size
/// records, without decoding the page (an unlike looks through the pages of a 16 ms window,
/// which on a hot post hold thousands of likers).
pub(super) fn holds(ts_max: u64, v: &[u8], entry: (u64, u64)) -> StoreResult<bool> {
    let r = Records::of(ts_max, v)?;
    let (mut lo, mut hi) = (0, r.len);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match r.get(mid).cmp(&entry) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return Ok(true),
        }
    }
    Ok(false)
}

fn corrupt(detail: String) -> StoreError {
    StoreError::Corrupt { keyspace: "liker_pages", detail }
}

fn ts_max_of(key: &[u8]) -> StoreResult<u64> {
    if key.len() != 25 {
        return Err(corrupt("bad key".into()));
    }
    Ok(be_u64(key, 9))
}

/// Split entries sorted ascending into runs spanning at most [`SPAN_MS`] each.
pub(super) fn split(entries: &[(u64, u64)]) -> Vec<&[(u64, u64)]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..entries.len() {
        if entries[i].0 - entries[start].0 > SPAN_MS {
            out.push(&entries[start..i]);
            start = i;
        }
    }
    if start < entries.len() {
        out.push(&entries[start..]);
    }
    out
}

/// The stored page holding (ts, user) of target `t`, if any: its key and entries.
pub(super) fn find(
    pages: &fjall::Keyspace,
    t: Target,
    ts: u64,
    user: UserId,
) -> StoreResult<Option<([u8; 25], Entries)>> {
    let lo = page_key(t, ts, 0);
    let hi = page_key(t, ts.saturating_add(SPAN_MS), u64::MAX);
    for g in pages.range(lo..=hi) {
        let (k, v) = g.into_inner().map_err(engine_err)?;
        let ts_max = ts_max_of(&k)?;
        if holds(ts_max, &v, (ts, user.0))? {
            let mut key = [0u8; 25];
            key.copy_from_slice(&k);
            return Ok(Some((key, decode(ts_max, &v)?)));
        }
    }
    Ok(None)
}

/// Likers of `t`, newest first (by time, then user, descending), strictly after `after`.
pub(super) fn list(
    pages: &fjall::Keyspace,
    t: Target,
    after: Option<Liker>,
    limit: usize,
) -> StoreResult<Vec<Liker>> {
    let cursor = after.map_or((u64::MAX, u64::MAX), |a| (a.liked_at_ms, a.user.0));
    let below = |e: &(u64, u64)| after.is_none() || *e < cursor;
    let lo = target_prefix(t).to_vec();
    let hi = page_key(t, cursor.0.saturating_add(SPAN_MS), u64::MAX).to_vec();
    let mut found: Entries = Vec::new();
    for g in pages.range(lo..=hi).rev() {
        let (k, v) = g.into_inner().map_err(engine_err)?;
        let ts_max = ts_max_of(&k)?;
        // Pages come newest `ts_max` first: once `limit` entries are found, a page whose
        // newest like is older than the limit-th found cannot change the answer.
        if found.len() >= limit {
            found.sort_unstable_by(|a, b| b.cmp(a));
            found.truncate(limit);
            if found.last().is_some_and(|last| ts_max < last.0) {
                break;
            }
        }
        // Only the page's newest `limit` entries below the cursor can be in the answer: a
        // binary search finds where they end, and no more of the page is read (a hot post's
        // page holds thousands of likers).
        let r = Records::of(ts_max, &v)?;
        let (mut lo, mut hi) = (0, r.len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if below(&r.get(mid)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        found.extend((lo.saturating_sub(limit)..lo).map(|i| r.get(i)));
    }
    found.sort_unstable_by(|a, b| b.cmp(a));
    found.truncate(limit);
    Ok(found.into_iter().map(|(ts, user)| Liker { user: UserId(user), liked_at_ms: ts }).collect())
}

/// Convert the per-like likers rows of earlier versions (key kind target ts user, no value)
/// into pages, then drop their keyspace. Idempotent: the pages written depend only on the
/// old rows, which nothing changes meanwhile, so a crash mid-way redoes the same writes.
pub(super) fn convert_old_rows(db: &fjall::Database, pages: &fjall::Keyspace) -> StoreResult<u64> {
    const OLD: &str = "likers";
    if !db.keyspace_exists(OLD) {
        return Ok(0);
    }
    let old = db.keyspace(OLD, fjall::KeyspaceCreateOptions::default).map_err(engine_err)?;
    let mut batch = db.batch();
    let mut in_batch = 0usize;
    let mut converted = 0u64;
    let mut page_no = 1u64 << 63;
    let mut run: Option<([u8; 9], Entries)> = None;
    let mut flush = |prefix: [u8; 9], entries: &Entries, batch: &mut fjall::OwnedWriteBatch| {
        for chunk in split(entries) {
            let Some(last) = chunk.last() else { continue };
            batch.insert(pages, page_key_at(prefix, last.0, page_no), encode(last.0, chunk));
            page_no += 1;
        }
    };
    for g in old.iter() {
        let k = g.key().map_err(engine_err)?;
        if k.len() != 25 {
            return Err(StoreError::Corrupt { keyspace: "likers", detail: "bad key".into() });
        }
        let mut prefix = [0u8; 9];
        prefix.copy_from_slice(&k[0..9]);
        let entry = (be_u64(&k, 9), be_u64(&k, 17));
        match &mut run {
            Some((p, entries)) if *p == prefix && entries.len() < 4_096 => entries.push(entry),
            _ => {
                if let Some((p, entries)) = run.take() {
                    in_batch += entries.len();
                    flush(p, &entries, &mut batch);
                }
                run = Some((prefix, vec![entry]));
            }
        }
        converted += 1;
        if in_batch >= 100_000 {
            batch.commit().map_err(engine_err)?;
            batch = db.batch();
            in_batch = 0;
        }
    }
    if let Some((p, entries)) = run.take() {
        flush(p, &entries, &mut batch);
    }
    batch.commit().map_err(engine_err)?;
    db.persist(fjall::PersistMode::SyncAll).map_err(engine_err)?;
    db.delete_keyspace(old).map_err(engine_err)?;
    tracing::info!(rows = converted, "converted per-like likers rows into pages");
    Ok(converted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embedded::{EmbeddedOptions, EmbeddedStore};
    use crate::keys::{liker_key, num_value, user_like_key};
    use likewise_core::like::{LikeAction, LikeOp};
    use likewise_core::ports::{CounterStore, LikeReader, WriteEngine};
    use likewise_core::write::WriteOp;
    use std::collections::BTreeMap;

    fn opts() -> EmbeddedOptions {
        EmbeddedOptions { cache_bytes: 8 << 20, memtable_bytes: 4 << 20, ..Default::default() }
    }

    fn op(target: Target, user: u64, like: bool, ts_ms: u64) -> WriteOp {
        WriteOp::Like(LikeOp {
            target,
            user: UserId(user),
            action: if like { LikeAction::Like } else { LikeAction::Unlike },
            target_author: UserId(9_999),
            post: target.id,
            ts_ms,
            trace: None,
        })
    }

    /// The store's likers of `t`, read whole and read in pages of `page`, and its recount.
    async fn read(s: &EmbeddedStore, t: Target, page: usize) -> (Vec<Liker>, Vec<Liker>, i64) {
        let whole = s.likers(t, None, 1_000_000).await.expect("likers");
        let mut paged: Vec<Liker> = Vec::new();
        loop {
            let next = s.likers(t, paged.last().copied(), page).await.expect("page");
            assert!(next.len() <= page);
            if next.is_empty() {
                break;
            }
            paged.extend(next);
        }
        let rows = s.recount_likes("test", t).await.expect("recount").rows;
        (whole, paged, rows)
    }

    /// A model's likers, newest first.
    fn expected(model: &BTreeMap<u64, u64>) -> Vec<Liker> {
        let mut v: Vec<Liker> =
            model.iter().map(|(user, ts)| Liker { user: UserId(*user), liked_at_ms: *ts }).collect();
        v.sort_by_key(|l| std::cmp::Reverse((l.liked_at_ms, l.user.0)));
        v
    }

    #[test]
    fn holds_agrees_with_the_decoded_page() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |n: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % n
        };
        for len in 0..40u64 {
            let mut entries: Entries = (0..len).map(|_| (next(8), next(8))).collect();
            entries.sort_unstable();
            entries.dedup();
            // Users of one to three bytes; compact pages, and fixed-width ones (times more
            // than 255 ms below the key's).
            let users: Vec<u64> = entries.iter().map(|e| e.1 << (8 * (len % 3))).collect();
            let entries: Entries = entries.iter().zip(users).map(|(e, u)| (e.0, u)).collect();
            for (ts_max, format) in [(8, V2), (1_000, V1)] {
                let v = encode(ts_max, &entries);
                assert!(entries.is_empty() || v[0] == format, "{ts_max}: {v:?}");
                assert_eq!(decode(ts_max, &v).expect("decode"), entries);
                assert_eq!(count(&v).expect("count"), entries.len());
                for ts in 0..9 {
                    for user in 0..9 {
                        let e = (ts, user << (8 * (len % 3)));
                        let held = holds(ts_max, &v, e).expect("holds");
                        assert_eq!(held, entries.contains(&e), "{e:?} in {entries:?}");
                    }
                }
            }
        }
        assert!(holds(0, &[V1, 0], (0, 0)).is_err(), "a torn page is corrupt");
        assert!(holds(0, &[V2, 2, 0, 1], (0, 0)).is_err(), "a torn page is corrupt");
        assert!(count(&[V2, 9]).is_err(), "no user ID is 9 bytes wide");
        assert_eq!(encode(7, &[(7, 5_000_000)]).len(), 6, "a page of one like: 1 + 1 + 1 + 3 bytes");
    }

    /// Batches of likes, unlikes and re-likes whose times spread wider than a page and
    /// repeat across users: the likers list, its keyset pages and the recount always equal a
    /// model of who likes what since when.
    #[tokio::test]
    async fn likers_pages_follow_likes_unlikes_and_relikes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = EmbeddedStore::open(dir.path(), &opts()).expect("open");
        let targets = [Target::post(1), Target::post(2)];
        let mut models: [BTreeMap<u64, u64>; 2] = Default::default();
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut pages_split = false;
        for round in 0..60u64 {
            let base = 1_000 + round * 20;
            let mut batch = Vec::new();
            let mut seen = std::collections::HashSet::new();
            for _ in 0..next(40) + 1 {
                let which = next(2) as usize;
                let user = next(80);
                // A batch's like times spread over up to 60 ms (wider than a page).
                let ts = base + next(60);
                pages_split |= ts - base > SPAN_MS;
                let like = next(3) != 0;
                batch.push(op(targets[which], user, like, ts));
                // The model applies each op in order, as the store resolves them.
                let m = &mut models[which];
                if like && !m.contains_key(&user) {
                    m.insert(user, ts);
                } else if !like {
                    m.remove(&user);
                }
                seen.insert((which, user));
            }
            s.apply(&batch).expect("apply");
            for (i, t) in targets.iter().enumerate() {
                let (whole, paged, rows) = read(&s, *t, 7).await;
                assert_eq!(whole, expected(&models[i]), "round {round}, target {i}");
                assert_eq!(paged, whole, "round {round}: keyset pages");
                assert_eq!(rows, models[i].len() as i64, "round {round}: recount");
            }
        }
        assert!(pages_split, "the script should spread a batch over several pages");
        assert!(models.iter().all(|m| !m.is_empty()));
    }

    /// Pages of the fixed-width format that earlier versions wrote are read as they are: the
    /// likers list, its keyset pages, the recount and unlikes agree with the likes, beside
    /// compact pages written since.
    #[tokio::test]
    async fn fixed_width_pages_of_earlier_versions_read_and_unlike_as_before() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = Target::post(7);
        let mut model = BTreeMap::new();
        {
            let db = fjall::Database::builder(dir.path()).open().expect("db");
            let pages = db.keyspace("liker_pages", fjall::KeyspaceCreateOptions::default).expect("pages");
            let user_likes =
                db.keyspace("user_likes", fjall::KeyspaceCreateOptions::default).expect("user_likes");
            let mut batch = db.batch();
            for page in 0..50u64 {
                // 20 likers a page, over 10 ms, as an earlier version wrote them.
                let ts_max = 60_000 + page * 10 + 9;
                let mut v = vec![V1];
                for i in 0..20u64 {
                    let (ts, user) = (ts_max - 9 + i / 2, 1_000_000 + page * 20 + i);
                    v.extend_from_slice(&ts.to_be_bytes());
                    v.extend_from_slice(&user.to_be_bytes());
                    batch.insert(&user_likes, user_like_key(UserId(user), t.kind, t.id), num_value(ts));
                    model.insert(user, ts);
                }
                batch.insert(&pages, page_key(t, ts_max, page + 1), v);
            }
            batch.commit().expect("commit");
            db.persist(fjall::PersistMode::SyncAll).expect("persist");
        }
        let s = EmbeddedStore::open(dir.path(), &opts()).expect("open");
        let (whole, paged, rows) = read(&s, t, 33).await;
        assert_eq!(whole, expected(&model));
        assert_eq!(paged, whole, "keyset pages");
        assert_eq!(rows, model.len() as i64, "recount");
        // Unlikes find their likers in the old pages; a re-like goes to a compact page.
        s.apply(&[op(t, 1_000_000, false, 90_000), op(t, 1_000_517, false, 90_000)]).expect("unlike");
        model.remove(&1_000_000);
        model.remove(&1_000_517);
        s.apply(&[op(t, 1_000_517, true, 90_001), op(t, 5, true, 90_001)]).expect("relike");
        model.insert(1_000_517, 90_001);
        model.insert(5, 90_001);
        let (whole, paged, rows) = read(&s, t, 7).await;
        assert_eq!(whole, expected(&model));
        assert_eq!(paged, whole, "keyset pages");
        assert_eq!(rows, model.len() as i64, "recount");
        let mut formats = std::collections::BTreeSet::new();
        for g in s.inner.likers.iter() {
            formats.insert(g.value().expect("value")[0]);
        }
        assert_eq!(formats, [V1, V2].into(), "old pages kept as they are, new ones compact");
    }

    /// Stores written before pages hold one likers row per like; opening converts them, the
    /// converted likers list and unlike as before, and a second open changes nothing.
    #[tokio::test]
    async fn per_like_rows_of_earlier_versions_are_converted_on_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = Target::post(7);
        let mut model = BTreeMap::new();
        {
            let db = fjall::Database::builder(dir.path()).open().expect("db");
            let old = db.keyspace("likers", fjall::KeyspaceCreateOptions::default).expect("likers");
            let user_likes =
                db.keyspace("user_likes", fjall::KeyspaceCreateOptions::default).expect("user_likes");
            let mut batch = db.batch();
            for user in 0..10_000u64 {
                // 9 likes per millisecond, some sharing a millisecond across page cuts.
                let ts = 50_000 + user / 9;
                batch.insert(&old, liker_key(t, ts, UserId(user)), []);
                batch.insert(&user_likes, user_like_key(UserId(user), t.kind, t.id), num_value(ts));
                model.insert(user, ts);
            }
            batch.commit().expect("commit");
            db.persist(fjall::PersistMode::SyncAll).expect("persist");
        }
        for open in 0..2 {
            let s = EmbeddedStore::open(dir.path(), &opts()).expect("open");
            assert!(!s.inner.db.keyspace_exists("likers"), "open {open}: the old keyspace is gone");
            let (whole, paged, rows) = read(&s, t, 333).await;
            assert_eq!(whole, expected(&model), "open {open}");
            assert_eq!(paged, whole, "open {open}: keyset pages");
            assert_eq!(rows, model.len() as i64, "open {open}: recount");
            if open == 0 {
                // Unlikes find the converted likers; a re-like moves one to a new page.
                s.apply(&[op(t, 4_500, false, 90_000), op(t, 17, false, 90_000), op(t, 9_998, true, 90_001)])
                    .expect("apply");
                model.remove(&4_500);
                model.remove(&17);
                s.apply(&[op(t, 17, true, 90_002)]).expect("relike");
                model.insert(17, 90_002);
                let (whole, _, rows) = read(&s, t, 1_000).await;
                assert_eq!(whole, expected(&model));
                assert_eq!(rows, model.len() as i64);
                s.inner.db.persist(fjall::PersistMode::SyncAll).expect("persist");
            }
        }
    }
}
