//! The write fence of a bucket move, enforced by the source shard itself, so that no writer
//! (an API node's write path, a worker, an operator's tool) can slip a row past it.
//!
//! While a rebalance runs, every bucketed table on the source has a row trigger that, for the
//! row's bucket, refuses the row with SQLSTATE `LW001` when the bucket is listed in
//! `bucket_fences` (the writer reads the placement again and retries, on the bucket's new
//! shard once the move has switched), and otherwise takes a shared transaction-level advisory
//! lock on the bucket and checks again:
//! - the mover lists the buckets first, then takes their locks exclusively: once it holds
//!   them, every transaction that wrote a row of them before the listing has ended, and every
//!   later one is refused without waiting.
//!
//! Installing a trigger takes a lock that waits for every open transaction writing that
//! table, so a transaction that wrote before the trigger existed has ended before the first
//! fence is taken. The check runs in a fresh snapshot (a volatile function's statements see
//! what committed before them), so a writer that waited on the lock sees the fence the mover
//! committed meanwhile. The mover's own statements pass (`SET LOCAL lw.mover = 'on'`).
//! The tables the aggregator derives from events (`counters`, `comment_ranks`:
//! `Fence::Moved`) refuse a bucket's rows only once it has moved: the drain waits for the
//! aggregator to write them.
//! The triggers stay on a shard once a bucket has left it: a node that has not read the new
//! catalog yet must still be refused. Until then that shard's writes pay for them (a
//! plpgsql call and an index probe per row); removing them once every node has confirmed the
//! new catalog is not built yet.

use super::tables::{Fence, TABLES, Table};

/// The advisory lock class of bucket fences (the first key of the two-key lock).
pub(crate) const LOCK_CLASS: i32 = 0x4c57_4246; // "LWBF"

/// How long creating a fence trigger may wait for its table's lock before it lets the table's
/// writers go and tries again.
pub(crate) const LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// The SQLSTATE a fenced write fails with.
pub(crate) const MOVED: &str = "LW001";

/// `jsonb_build_object` of `row`'s `key` columns: a changed row's key in `bucket_changes`.
pub(crate) fn key_json(row: &str, key: &[String]) -> String {
    let parts: Vec<String> = key.iter().map(|c| format!("'{c}', {row}.\"{c}\"")).collect();
    format!("jsonb_build_object({})", parts.join(", "))
}

/// The columns that identify a table's rows.
pub(crate) struct RowKey {
    pub columns: Vec<String>,
    /// Whether they are the primary key (never null, indexed), not every column.
    pub primary: bool,
}

/// The columns that identify a row of `table`: its primary key, or every column.
async fn key_columns(c: &tokio_postgres::Client, table: &str) -> Result<RowKey, tokio_postgres::Error> {
    let pk: Vec<String> = c
        .query(
            "SELECT a.attname::text FROM pg_index i
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
             WHERE i.indrelid = $1::text::regclass AND i.indisprimary
             ORDER BY array_position(i.indkey::smallint[], a.attnum)",
            &[&table],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if !pk.is_empty() {
        return Ok(RowKey { columns: pk, primary: true });
    }
    let columns = c
        .query(
        "SELECT attname::text FROM pg_attribute WHERE attrelid = $1::text::regclass AND attnum > 0 AND NOT attisdropped
         ORDER BY attnum",
        &[&table],
    )
    .await?
    .iter()
    .map(|r| r.get(0))
    .collect();
    Ok(RowKey { columns, primary: false })
}

fn function(t: &Table, key: &[String]) -> String {
    // A derived table's rows are refused only once moved; they take no lock (the mover never
    // waits for their writers: the drain waits for the one that matters), and the move copies
    // them whole under the fence, after the drain.
    let check = match t.fence {
        Fence::Moving => format!(
            "-- Refused at once when fenced: a writer never waits out a move holding its
             -- connection (a worker's pool full of them would starve the aggregator the
             -- move waits for). A bucket being copied (logging) takes writes.
             IF EXISTS (SELECT 1 FROM bucket_fences f WHERE f.bucket = b AND NOT f.logging) THEN
               RAISE EXCEPTION 'bucket % is moving or has moved to another shard', b
                 USING ERRCODE = '{MOVED}';
             END IF;
             -- Otherwise the mover waits for this transaction before it copies.
             PERFORM pg_advisory_xact_lock_shared({LOCK_CLASS}, b);
             SELECT f.logging INTO lg FROM bucket_fences f WHERE f.bucket = b;
             IF FOUND AND NOT lg THEN
               RAISE EXCEPTION 'bucket % is moving or has moved to another shard', b
                 USING ERRCODE = '{MOVED}';
             END IF;
             -- Being copied: the key of the row is logged for the catch-up (the old key too,
             -- should an update change it).
             IF lg THEN
               INSERT INTO bucket_changes (tbl, bucket, key) VALUES (TG_TABLE_NAME, b, {new_key})
                 ON CONFLICT DO NOTHING;
               IF TG_OP = 'UPDATE' THEN
                 INSERT INTO bucket_changes (tbl, bucket, key) VALUES (TG_TABLE_NAME, b, {old_key})
                   ON CONFLICT DO NOTHING;
               END IF;
             END IF;",
            new_key = key_json("r", key),
            old_key = key_json("OLD", key),
        ),
        Fence::Moved => format!(
            "IF EXISTS (SELECT 1 FROM bucket_fences f WHERE f.bucket = b AND f.moved) THEN
               RAISE EXCEPTION 'bucket % has moved to another shard', b USING ERRCODE = '{MOVED}';
             END IF;"
        ),
    };
    format!(
        "CREATE OR REPLACE FUNCTION lw_fence_{name}() RETURNS trigger LANGUAGE plpgsql AS $f$
         DECLARE r {name}; b integer; lg boolean;
         BEGIN
           IF current_setting('lw.mover', true) = 'on' THEN
             IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
             RETURN NEW;
           END IF;
           IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
           b := {bucket};
           IF b IS NOT NULL THEN
             {check}
           END IF;
           IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
           RETURN NEW;
         END $f$",
        name = t.name,
        bucket = t.bucket,
    )
}

/// Install every fenced table's trigger on the shard `c` is connected to, unless it is there;
/// each table's key columns, in [`TABLES`]' order (the catch-up replaces rows by them).
/// One table at a time, each in its own transaction: the lock creating a trigger takes waits
/// for that table's writers only, so it never closes a cycle with a writer holding another
/// table (taking them all in one transaction would).
///
/// That lock also makes every new writer of the table queue behind it. A writer's transaction
/// can be open and waiting on its own client (a worker applying a batch to several shards
/// waits for a pooled connection to another one), so a lock that waits for it can stop the
/// whole process: each attempt gives up after [`LOCK_WAIT`] and tries again a moment later,
/// as online schema changes do.
pub(crate) async fn install(
    c: &deadpool_postgres::ClientWrapper,
) -> Result<Vec<RowKey>, tokio_postgres::Error> {
    let mut keys = Vec::with_capacity(TABLES.len());
    for t in TABLES {
        // The function always (an upgrade may change what it checks; replacing one takes no
        // table lock), the trigger unless it is there.
        let key = key_columns(c, t.name).await?;
        c.batch_execute(&function(t, &key.columns)).await?;
        keys.push(key);
        let there: bool = c
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'lw_fence' AND tgrelid = to_regclass($1))",
                &[&t.name],
            )
            .await?
            .get(0);
        if there {
            continue;
        }
        let create = format!(
            "BEGIN; SET LOCAL lock_timeout = '{ms}ms';
             CREATE TRIGGER lw_fence BEFORE INSERT OR UPDATE OR DELETE ON {name}
               FOR EACH ROW EXECUTE FUNCTION lw_fence_{name}();
             COMMIT",
            ms = LOCK_WAIT.as_millis(),
            name = t.name
        );
        let mut attempt = 0;
        loop {
            attempt += 1;
            let done = c.batch_execute(&create).await;
            if done.is_err() {
                // End the failed transaction on this pooled connection.
                let _ = c.batch_execute("ROLLBACK").await;
            }
            match done {
                Ok(()) => break,
                // Another mover created it meanwhile.
                Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::DUPLICATE_OBJECT) => break,
                Err(e)
                    if attempt < 600
                        && (e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE)
                            || e.code() == Some(&tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED)) =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(rand::random_range(20..120))).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok(keys)
}
