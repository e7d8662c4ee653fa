//! Online rewrite of a populated shard's `likes` and `user_likes` into migration 26's layouts,
//! run by `likewise migrate` after the migrations, while likes go on.
//!
//! For each table still in its old layout:
//! 1. one transaction creates `<table>_rewrite` in the new layout and a row trigger on the
//!    table that applies every insert, update and delete to it as well;
//! 2. batches of rows, in key order, are copied under `FOR SHARE`: a row deleted or updated
//!    meanwhile waits for its batch to commit and then reaches the copy through the trigger,
//!    and a row its batch does not see (uncommitted, or deleted) the trigger handles alone;
//! 3. one short transaction under an exclusive lock drops the old table, gives the new one
//!    its name, and recreates the old one's other triggers (a bucket move's fences).
//!
//! Every step can be stopped and run again: a copy that stopped keeps its rows and its
//! trigger, and the next run copies again from the start (`ON CONFLICT DO NOTHING`).
//! Prepared statements of running nodes are planned again against the new table (same
//! columns, same result types).

use super::pg_err;
use likewise_core::StoreResult;

/// One table to rewrite.
struct Rewrite {
    table: &'static str,
    /// True while the table is in its old layout.
    old: &'static str,
    /// The new layout, as `<table>_rewrite`, with its indexes.
    create: &'static str,
    /// The key, in primary-key order.
    key: [&'static str; 3],
    /// The new table's columns, and the expressions of a source row `r` (or `NEW`) that fill
    /// them (`{r}` is replaced).
    columns: &'static str,
    values: &'static str,
    /// Index renames after the swap: (name in the rewrite, final name).
    indexes: &'static [(&'static str, &'static str)],
}

const REWRITES: [Rewrite; 2] = [
    Rewrite {
        table: "likes",
        old: "SELECT EXISTS (SELECT 1 FROM pg_attribute
                             WHERE attrelid = 'likes'::regclass AND attname = 'kind' AND attnum = 1)",
        create: "CREATE TABLE likes_rewrite (
                     target   bigint   NOT NULL,
                     user_id  bigint   NOT NULL,
                     liked_at bigint   NOT NULL,
                     kind     smallint NOT NULL,
                     paged    boolean  NOT NULL DEFAULT false,
                     post_id  bigint,
                     CONSTRAINT likes_rewrite_pkey PRIMARY KEY (kind, target, user_id)
                 );
                 CREATE INDEX likes_rewrite_unpaged ON likes_rewrite
                     (kind, target, liked_at DESC, user_id DESC) WHERE NOT paged;",
        key: ["kind", "target", "user_id"],
        columns: "target, user_id, liked_at, kind, paged, post_id",
        // A post like's post is its target.
        values: "{r}.target, {r}.user_id, {r}.liked_at, {r}.kind, {r}.paged,
                 CASE WHEN {r}.kind = 1 AND {r}.post_id = {r}.target THEN NULL ELSE {r}.post_id END",
        indexes: &[("likes_rewrite_unpaged", "likes_unpaged_by_time")],
    },
    Rewrite {
        table: "user_likes",
        old: "SELECT EXISTS (SELECT 1 FROM pg_attribute
                             WHERE attrelid = 'user_likes'::regclass AND attname = 'kind' AND attnum = 2)",
        create: "CREATE TABLE user_likes_rewrite (
                     user_id  bigint   NOT NULL,
                     target   bigint   NOT NULL,
                     kind     smallint NOT NULL,
                     liked_at bigint,
                     CONSTRAINT user_likes_rewrite_pkey PRIMARY KEY (user_id, kind, target)
                 );",
        key: ["user_id", "kind", "target"],
        columns: "user_id, target, kind, liked_at",
        values: "{r}.user_id, {r}.target, {r}.kind, NULL::bigint",
        indexes: &[],
    },
];

/// Rows copied per transaction.
pub const BATCH: i64 = 5_000;

/// How long the swap and the trigger's creation wait for the table's lock before letting its
/// writers go and trying again.
const LOCK_WAIT_MS: i64 = 1_000;

/// What [`rewrite`] did to one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewritten {
    pub table: &'static str,
    /// Rows copied by the batches (rows written meanwhile reached the copy by the trigger).
    pub copied: u64,
}

/// Rewrite every table of this shard still in its old layout; `batch` rows per transaction.
pub async fn rewrite(c: &mut tokio_postgres::Client, batch: i64) -> StoreResult<Vec<Rewritten>> {
    let mut out = Vec::new();
    for r in &REWRITES {
        let old: bool = c.query_one(r.old, &[]).await.map_err(pg_err)?.get(0);
        if !old {
            continue;
        }
        prepare(c, r).await?;
        let copied = copy(c, r, batch).await?;
        swap(c, r).await?;
        c.batch_execute(&format!("ANALYZE {}", r.table)).await.map_err(pg_err)?;
        out.push(Rewritten { table: r.table, copied });
    }
    Ok(out)
}

fn mirror_function(r: &Rewrite) -> String {
    let t = r.table;
    let key_of =
        |row: &str| r.key.iter().map(|k| format!("w.{k} = {row}.{k}")).collect::<Vec<_>>().join(" AND ");
    let new_values = r.values.replace("{r}", "NEW");
    let set: Vec<String> = r.columns.split(", ").map(|c| format!("{c} = EXCLUDED.{c}")).collect();
    format!(
        "CREATE OR REPLACE FUNCTION lw_rewrite_{t}() RETURNS trigger LANGUAGE plpgsql AS $f$
         BEGIN
             IF TG_OP IN ('DELETE', 'UPDATE') THEN
                 DELETE FROM {t}_rewrite w WHERE {old_key};
             END IF;
             IF TG_OP IN ('INSERT', 'UPDATE') THEN
                 INSERT INTO {t}_rewrite ({columns}) VALUES ({new_values})
                 ON CONFLICT ({key}) DO UPDATE SET {set};
             END IF;
             RETURN NULL;
         END
         $f$",
        old_key = key_of("OLD"),
        columns = r.columns,
        key = r.key.join(", "),
        set = set.join(", "),
    )
}

/// The new table and the trigger that keeps it up with the old one (once: a run that stopped
/// finds both).
async fn prepare(c: &mut tokio_postgres::Client, r: &Rewrite) -> StoreResult<()> {
    let t = r.table;
    let exists: bool = c
        .query_one(&format!("SELECT to_regclass('{t}_rewrite') IS NOT NULL"), &[])
        .await
        .map_err(pg_err)?
        .get(0);
    if exists {
        return Ok(());
    }
    let sql = format!(
        "{create}
         {function};
         CREATE TRIGGER lw_rewrite AFTER INSERT OR UPDATE OR DELETE ON {t}
             FOR EACH ROW EXECUTE FUNCTION lw_rewrite_{t}();",
        create = r.create,
        function = mirror_function(r),
    );
    let mut attempt = 0;
    loop {
        attempt += 1;
        let tx = c.transaction().await.map_err(pg_err)?;
        let made = async {
            bounded(&tx).await?;
            tx.batch_execute(&sql).await
        };
        match made.await {
            Ok(()) => return tx.commit().await.map_err(pg_err),
            Err(e) if lock_timeout(&e) && attempt < LOCK_ATTEMPTS => pause().await,
            Err(e) => return Err(pg_err(e)),
        }
    }
}

/// Copy the old table's rows in key order, `batch` per transaction; returns the rows copied.
async fn copy(c: &mut tokio_postgres::Client, r: &Rewrite, batch: i64) -> StoreResult<u64> {
    let t = r.table;
    let key = r.key.join(", ");
    let desc: Vec<String> = r.key.iter().map(|k| format!("{k} DESC")).collect();
    let last: Vec<String> =
        r.key.iter().map(|k| format!("(array_agg({k}::bigint ORDER BY {}))[1]", desc.join(", "))).collect();
    // Locked rows wait for nothing but the writers of the same rows, which wait for the batch.
    let statement = format!(
        "WITH src AS (
             SELECT * FROM {t} WHERE ({key}) > ($1::bigint, $2::bigint, $3::bigint)
             ORDER BY {key} LIMIT $4 FOR SHARE
         ), ins AS (
             INSERT INTO {t}_rewrite ({columns}) SELECT {values} FROM src r ON CONFLICT DO NOTHING
         )
         SELECT count(*), {last} FROM src",
        columns = r.columns,
        values = r.values.replace("{r}", "r"),
        last = last.join(", "),
    );
    let statement = c.prepare(&statement).await.map_err(pg_err)?;
    let mut after = (i64::MIN, i64::MIN, i64::MIN);
    let mut copied = 0u64;
    loop {
        let row = c.query_one(&statement, &[&after.0, &after.1, &after.2, &batch]).await.map_err(pg_err)?;
        let n: i64 = row.get(0);
        copied += n as u64;
        if n < batch {
            return Ok(copied);
        }
        after = (row.get(1), row.get(2), row.get(3));
    }
}

/// Put the new table in the old one's place, with the old one's other triggers.
async fn swap(c: &mut tokio_postgres::Client, r: &Rewrite) -> StoreResult<()> {
    let t = r.table;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let tx = c.transaction().await.map_err(pg_err)?;
        match swap_in(&tx, r).await {
            Ok(()) => return tx.commit().await.map_err(pg_err),
            Err(e) if lock_timeout(&e) && attempt < LOCK_ATTEMPTS => pause().await,
            Err(e) => return Err(pg_err(format!("swapping {t}: {e}"))),
        }
    }
}

async fn swap_in(tx: &tokio_postgres::Transaction<'_>, r: &Rewrite) -> Result<(), tokio_postgres::Error> {
    let t = r.table;
    bounded(tx).await?;
    tx.batch_execute(&format!("LOCK TABLE {t} IN ACCESS EXCLUSIVE MODE")).await?;
    // Each trigger with its function: a PL/pgSQL function compiled against the old table's
    // row type is compiled again in every session once its definition is replaced.
    let triggers: Vec<(String, String)> = tx
        .query(
            "SELECT pg_get_triggerdef(oid), pg_get_functiondef(tgfoid) FROM pg_trigger
             WHERE tgrelid = $1::text::regclass AND NOT tgisinternal AND tgname <> 'lw_rewrite'",
            &[&t],
        )
        .await?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let mut sql = format!(
        "DROP TABLE {t};
         ALTER TABLE {t}_rewrite RENAME TO {t};
         ALTER TABLE {t} RENAME CONSTRAINT {t}_rewrite_pkey TO {t}_pkey;
         DROP FUNCTION lw_rewrite_{t}();"
    );
    for (from, to) in r.indexes {
        sql.push_str(&format!("ALTER INDEX {from} RENAME TO {to};"));
    }
    for (trigger, function) in triggers {
        sql.push_str(&format!("{trigger};\n{function};\n"));
    }
    tx.batch_execute(&sql).await
}

/// Attempts of a transaction whose lock wait timed out.
const LOCK_ATTEMPTS: usize = 60;

/// Bound the transaction's lock waits: a lock request queued behind a long transaction would
/// hold up every writer of the table queued behind it.
async fn bounded(tx: &tokio_postgres::Transaction<'_>) -> Result<(), tokio_postgres::Error> {
    tx.batch_execute(&format!("SET LOCAL lock_timeout = {LOCK_WAIT_MS}")).await
}

fn lock_timeout(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE)
}

async fn pause() {
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::testing::TestShards;
    use likewise_core::event::Event;
    use likewise_core::ids::UserId;
    use likewise_core::like::{LikeAction, LikeOp, Target};
    use likewise_core::write::{WriteOp, WriteOutcome};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    const T0: i64 = 1_700_000_000_000;
    /// Posts of the populated shard; post likes of post p, comment likes of comment p + 1M.
    const POSTS: i64 = 5_000;

    /// A like row: (kind, target, user) -> (liked_at, post_id).
    type Rows = BTreeMap<(i16, i64, i64), (i64, Option<i64>)>;

    async fn likes(c: &tokio_postgres::Client) -> Rows {
        c.query("SELECT kind, target, user_id, liked_at, post_id FROM likes", &[])
            .await
            .expect("likes")
            .iter()
            .map(|r| ((r.get(0), r.get(1), r.get(2)), (r.get(3), r.get(4))))
            .collect()
    }

    async fn reverse(c: &tokio_postgres::Client) -> Vec<(i64, i16, i64)> {
        c.query("SELECT user_id, kind, target FROM user_likes ORDER BY 1, 2, 3", &[])
            .await
            .expect("user_likes")
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    }

    /// A shard at migration 25 holding `rows` likes (a tenth of them comment likes) and their
    /// reverse index, migrated to 26 (which keeps a populated shard's layout), is rewritten
    /// in batches of `batch` while one writer likes and unlikes through the write path and
    /// the reverse-index projection, before, during and after the swap. Afterwards both
    /// tables are in the new layout with exactly the rows the writes left, the post likes
    /// without a post_id, and the shard's other triggers (a bucket move's fences) kept.
    async fn rewrite_while_likes_go_on(rows: i64, batch: i64, seed: u64) {
        let t = TestShards::create_at(1, 25).await;
        let mut c = t.client(0).await;
        c.batch_execute(&format!(
            "INSERT INTO likes (kind, target, user_id, post_id, liked_at)
             SELECT CASE WHEN g % 10 = 0 THEN 2 ELSE 1 END,
                    CASE WHEN g % 10 = 0 THEN 1000000 + g % {POSTS} ELSE g % {POSTS} END,
                    g, g % {POSTS}, {T0} + g
             FROM generate_series(1, {rows}) g;
             INSERT INTO user_likes (user_id, kind, target, liked_at)
             SELECT user_id, kind, target, liked_at FROM likes;"
        ))
        .await
        .expect("likes of an older build");
        assert_eq!(crate::postgres::migrate::apply(&mut c).await.expect("migrate"), vec![26]);
        let old: bool = c.query_one(REWRITES[0].old, &[]).await.expect("layout").get(0);
        assert!(old, "migration 26 keeps a populated shard's layout");
        // A bucket move's fences, as a shard that has been rebalanced keeps them.
        let s = t.connect();
        crate::postgres::reshard::fence::install(&s.conn(0).await.expect("conn")).await.expect("fences");
        // A post like's post_id goes in the rewrite.
        let mut model: Rows =
            likes(&c).await.into_iter().map(|(k, (at, post))| (k, (at, post.filter(|_| k.0 != 1)))).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (s, stop) = (s.clone(), stop.clone());
            let mut model = std::mem::take(&mut model);
            tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(seed);
                let mut ts = T0 + 10 * rows;
                let mut batches = 0u64;
                // Until stopped, and at least a few batches after the swap.
                while !stop.load(Ordering::Relaxed) || !batches.is_multiple_of(8) {
                    batches += 1;
                    let mut ops = Vec::new();
                    for _ in 0..rng.random_range(1..40) {
                        ts += 1;
                        let post = rng.random_range(0..POSTS);
                        let comment = rng.random_bool(0.1);
                        let target = if comment {
                            Target::comment(1_000_000 + post as u64)
                        } else {
                            Target::post(post as u64)
                        };
                        let user = rng.random_range(1..rows + 1_000);
                        ops.push(WriteOp::Like(LikeOp {
                            target,
                            user: UserId(user as u64),
                            action: if rng.random_bool(0.5) { LikeAction::Like } else { LikeAction::Unlike },
                            target_author: UserId(7),
                            post: post as u64,
                            ts_ms: ts as u64,
                            trace: None,
                        }));
                    }
                    let out = s.apply_async(&ops).await.expect("likes during the rewrite");
                    let mut events = Vec::new();
                    for (op, o) in ops.iter().zip(out) {
                        let (WriteOp::Like(l), WriteOutcome::Like(o)) = (op, o) else { unreachable!() };
                        let key = (i16::from(l.target.kind.code()), l.target.id as i64, l.user.0 as i64);
                        let liked = l.action == LikeAction::Like;
                        let post = (l.target.kind.code() == 2).then_some(l.post as i64);
                        // The model's transitions are the write path's.
                        let changed = if liked {
                            !model.contains_key(&key) && model.insert(key, (l.ts_ms as i64, post)).is_none()
                        } else {
                            model.remove(&key).is_some()
                        };
                        assert_eq!(o.changed, changed, "{key:?}");
                        if changed {
                            events.push(Event::like(
                                0,
                                liked,
                                l.target,
                                l.target_author,
                                l.user,
                                l.ts_ms,
                                l.post,
                            ));
                        }
                    }
                    crate::postgres::outbox::project_reverse(&s, &events).await.expect("reverse index");
                }
                model
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let done = rewrite(&mut c, batch).await.expect("rewrite");
        stop.store(true, Ordering::Relaxed);
        let model = writer.await.expect("writer");
        assert_eq!(done.iter().map(|r| r.table).collect::<Vec<_>>(), vec!["likes", "user_likes"]);
        assert!(done.iter().all(|r| r.copied as i64 >= rows * 9 / 10), "{done:?}");
        // The new layouts, under their old names, with nothing of the rewrite left.
        for r in &REWRITES {
            let old: bool = c.query_one(r.old, &[]).await.expect("layout").get(0);
            assert!(!old, "{} rewritten", r.table);
        }
        let left: i64 = c
            .query_one(
                "SELECT (SELECT count(*) FROM pg_class
                         WHERE relname LIKE '%\\_rewrite%' AND relnamespace = 'public'::regnamespace)
                      + (SELECT count(*) FROM pg_proc WHERE proname LIKE 'lw\\_rewrite%')
                      + (SELECT count(*) FROM pg_trigger WHERE tgname = 'lw_rewrite')",
                &[],
            )
            .await
            .expect("leftovers")
            .get(0);
        assert_eq!(left, 0);
        let names: Vec<String> = c
            .query(
                "SELECT indexrelid::regclass::text || ' ' || pg_get_indexdef(indexrelid) FROM pg_index
                 WHERE indrelid IN ('likes'::regclass, 'user_likes'::regclass) ORDER BY 1",
                &[],
            )
            .await
            .expect("indexes")
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(
            names,
            vec![
                "likes_pkey CREATE UNIQUE INDEX likes_pkey ON public.likes USING btree (kind, target, user_id)",
                "likes_unpaged_by_time CREATE INDEX likes_unpaged_by_time ON public.likes USING btree \
                 (kind, target, liked_at DESC, user_id DESC) WHERE (NOT paged)",
                "user_likes_pkey CREATE UNIQUE INDEX user_likes_pkey ON public.user_likes USING btree \
                 (user_id, kind, target)",
            ]
        );
        let fences: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_trigger
                 WHERE tgname = 'lw_fence' AND tgrelid IN ('likes'::regclass, 'user_likes'::regclass)",
                &[],
            )
            .await
            .expect("fences")
            .get(0);
        assert_eq!(fences, 2, "the fences stay");
        // Exactly the rows the writes left, each with its time; a post like has no post_id.
        let got = likes(&c).await;
        assert_eq!(got.len(), model.len());
        assert!(got == model, "likes differ from the writes' model");
        let mut want: Vec<(i64, i16, i64)> = model.keys().map(|(k, t, u)| (*u, *k, *t)).collect();
        want.sort_unstable();
        assert!(reverse(&c).await == want, "the reverse index differs from the likes");
    }

    /// A rewrite stopped after its trigger and part of the copy (a crash), with likes and
    /// unlikes of copied and uncopied rows meanwhile, is finished by the next run.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stopped_rewrite_is_finished_by_the_next_run() {
        let t = TestShards::create_at(1, 25).await;
        let mut c = t.client(0).await;
        c.batch_execute(
            "INSERT INTO likes (kind, target, user_id, post_id, liked_at)
             SELECT 1, g % 10, g, g % 10, 1700000000000 + g FROM generate_series(1, 1000) g;",
        )
        .await
        .expect("likes of an older build");
        crate::postgres::migrate::apply(&mut c).await.expect("migrate");
        let likes_table = &REWRITES[0];
        prepare(&mut c, likes_table).await.expect("trigger");
        // The first 300 rows in key order copied, then the process stopped.
        c.execute(
            "INSERT INTO likes_rewrite (target, user_id, liked_at, kind, paged, post_id)
             SELECT target, user_id, liked_at, kind, paged, NULL FROM likes ORDER BY kind, target, user_id LIMIT 300",
            &[],
        )
        .await
        .expect("part of the copy");
        let s = t.connect();
        let mut ops = Vec::new();
        for user in [1u64, 2, 3, 995, 996, 997] {
            // Unlikes of rows copied and not copied yet, and new likes.
            ops.push(crate::postgres::test_ops::like(Target::post(user % 10), user % 10, user, false));
            ops.push(crate::postgres::test_ops::like(Target::post(user % 10), user % 10, 5_000 + user, true));
        }
        s.apply_async(&ops).await.expect("writes while stopped");
        let want = likes(&c).await;
        assert_eq!(want.len(), 1000);
        let done = rewrite(&mut c, 100).await.expect("the next run");
        assert_eq!(done[0].table, "likes");
        let got: Rows = likes(&c).await;
        let want: Rows = want.into_iter().map(|(k, (at, _))| (k, (at, None))).collect();
        assert!(got == want, "likes differ after the resumed rewrite");
        let old: bool = c.query_one(likes_table.old, &[]).await.expect("layout").get(0);
        assert!(!old);
    }

    /// 200,000 likes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_populated_shard_is_rewritten_online_while_likes_go_on() {
        rewrite_while_likes_go_on(200_000, BATCH, 1).await;
    }

    /// Small batches, so that more of them meet the writer's likes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn small_batches_meet_concurrent_likes() {
        for seed in 0..3 {
            rewrite_while_likes_go_on(20_000, 300, seed).await;
        }
    }
}
