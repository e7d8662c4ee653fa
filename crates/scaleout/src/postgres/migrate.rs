//! Versioned SQL migrations, applied in order to every shard by `likewise migrate`.
//!
//! Each migration runs in one transaction together with its row in `schema_migrations`, under
//! an advisory lock, so two migrators never interleave and a failed migration leaves nothing
//! half-applied. Migrations are append-only: never edit one that has shipped.

use super::pg_err;
use likewise_core::StoreResult;

/// Every migration, in order: (version, name, SQL).
pub const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "likes_and_outbox", include_str!("migrations/0001_likes_and_outbox.sql")),
    (2, "comments", include_str!("migrations/0002_comments.sql")),
    (
        3,
        "upstream_moderation_views_notifications",
        include_str!("migrations/0003_upstream_moderation_views_notifications.sql"),
    ),
    (4, "outbox_lz4", include_str!("migrations/0004_outbox_lz4.sql")),
    (5, "liker_pages", include_str!("migrations/0005_liker_pages.sql")),
    (6, "notif_actor_times", include_str!("migrations/0006_notif_actor_times.sql")),
    (8, "holds_and_appeals", include_str!("migrations/0008_holds_and_appeals.sql")),
    (10, "consumer_snapshots", include_str!("migrations/0010_consumer_snapshots.sql")),
    (11, "comment_keys", include_str!("migrations/0011_comment_keys.sql")),
    (12, "comment_ranks", include_str!("migrations/0012_comment_ranks.sql")),
    (13, "integrity", include_str!("migrations/0013_integrity.sql")),
    (14, "hourly_views", include_str!("migrations/0014_hourly_views.sql")),
    (15, "placement", include_str!("migrations/0015_placement.sql")),
    (16, "bucket_moves", include_str!("migrations/0016_bucket_moves.sql")),
    (17, "shard_registry", include_str!("migrations/0017_shard_registry.sql")),
    (18, "comment_keys_post", include_str!("migrations/0018_comment_keys_post.sql")),
    (19, "bucket_changes", include_str!("migrations/0019_bucket_changes.sql")),
    (20, "reviewed_reports", include_str!("migrations/0020_reviewed_reports.sql")),
    (21, "comment_rank_history", include_str!("migrations/0021_comment_rank_history.sql")),
    (22, "held_marks", include_str!("migrations/0022_held_marks.sql")),
    (23, "held_replies", include_str!("migrations/0023_held_replies.sql")),
    (24, "notif_contributions", include_str!("migrations/0024_notif_contributions.sql")),
    (25, "notif_retention", include_str!("migrations/0025_notif_retention.sql")),
    (26, "like_bytes", include_str!("migrations/0026_like_bytes.sql")),
];

/// Advisory lock key held while migrating (any constant unique to Likewise).
const LOCK: i64 = 0x4c_696b_6577_6973;

async fn ensure_table(c: &tokio_postgres::Client) -> StoreResult<()> {
    c.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version    integer PRIMARY KEY,
             name       text NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now()
         )",
    )
    .await
    .map_err(pg_err)
}

async fn applied(c: &tokio_postgres::Client) -> StoreResult<Vec<i32>> {
    let rows =
        c.query("SELECT version FROM schema_migrations ORDER BY version", &[]).await.map_err(pg_err)?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Apply the missing migrations to one shard; returns the versions applied.
pub async fn apply(c: &mut tokio_postgres::Client) -> StoreResult<Vec<i32>> {
    apply_through(c, i32::MAX).await
}

/// Apply the missing migrations up to version `last` (an older schema, for upgrade tests).
pub async fn apply_through(c: &mut tokio_postgres::Client, last: i32) -> StoreResult<Vec<i32>> {
    c.execute("SELECT pg_advisory_lock($1)", &[&LOCK]).await.map_err(pg_err)?;
    let result = async {
        ensure_table(c).await?;
        let done = applied(c).await?;
        let mut now = Vec::new();
        for (version, name, sql) in MIGRATIONS {
            if done.contains(version) || *version > last {
                continue;
            }
            let tx = c.transaction().await.map_err(pg_err)?;
            tx.batch_execute(sql).await.map_err(|e| pg_err(format!("migration {version} ({name}): {e}")))?;
            tx.execute("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", &[version, name])
                .await
                .map_err(pg_err)?;
            tx.commit().await.map_err(pg_err)?;
            now.push(*version);
        }
        Ok(now)
    }
    .await;
    let _ = c.execute("SELECT pg_advisory_unlock($1)", &[&LOCK]).await;
    result
}

/// Versions this build expects that the shard lacks.
pub async fn missing(c: &tokio_postgres::Client) -> StoreResult<Vec<i32>> {
    let exists: bool =
        c.query_one("SELECT to_regclass('schema_migrations') IS NOT NULL", &[]).await.map_err(pg_err)?.get(0);
    let done = if exists { applied(c).await? } else { Vec::new() };
    Ok(MIGRATIONS.iter().map(|m| m.0).filter(|v| !done.contains(v)).collect())
}

/// Connect to `url`; when its database does not exist, create it through the server's
/// `postgres` database (so a fresh machine needs only `likewise migrate`).
pub async fn create_database_if_missing(url: &str) -> StoreResult<()> {
    let super::tls::Connect { config: cfg, tls, .. } = super::tls::connect(url).map_err(pg_err)?;
    match cfg.connect(tls.clone()).await {
        Ok((_c, conn)) => {
            drop(conn);
            Ok(())
        }
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::INVALID_CATALOG_NAME) => {
            let name = cfg.get_dbname().ok_or_else(|| pg_err("the URL names no database"))?.to_string();
            if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(pg_err(format!(
                    "will not create database {name:?}: use letters, digits and '_'"
                )));
            }
            let mut admin = cfg.clone();
            admin.dbname("postgres");
            let (c, conn) = admin.connect(tls).await.map_err(pg_err)?;
            let task = tokio::spawn(conn);
            let r = c.batch_execute(&format!("CREATE DATABASE {name}")).await;
            drop(c);
            let _ = task.await;
            match r {
                Ok(()) => Ok(()),
                Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::DUPLICATE_DATABASE) => Ok(()),
                Err(e) => Err(pg_err(e)),
            }
        }
        Err(e) => Err(pg_err(e)),
    }
}
