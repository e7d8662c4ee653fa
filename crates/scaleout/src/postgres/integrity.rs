//! Moderators' integrity verdicts on PostgreSQL (`IntegrityStore`): `integrity_decisions`
//! (migration 13) on shard 0, one row per account, replaced by a later verdict.

use super::moderation::{lim, ord, unord};
use super::{PgStore, i, pg_err, u};
use async_trait::async_trait;
use likewise_core::ids::UserId;
use likewise_core::integrity::{Decision, Verdict};
use likewise_core::ports::IntegrityStore;
use likewise_core::{StoreError, StoreResult};

fn row_to_decision(r: &tokio_postgres::Row) -> StoreResult<Decision> {
    let code: i16 = r.get(1);
    let verdict = u8::try_from(code).ok().and_then(Verdict::from_code).ok_or_else(|| {
        StoreError::Corrupt { keyspace: "integrity_decisions", detail: format!("unknown verdict {code}") }
    })?;
    Ok(Decision { user: UserId(unord(r.get(0))), verdict, at_ms: u(r.get(2)) })
}

#[async_trait]
impl IntegrityStore for PgStore {
    async fn put_decision(&self, d: Decision) -> StoreResult<()> {
        let c = self.conn(0).await?;
        c.execute(
            "INSERT INTO integrity_decisions (user_ord, verdict, at_ms) VALUES ($1, $2, $3)
             ON CONFLICT (user_ord) DO UPDATE SET verdict = EXCLUDED.verdict, at_ms = EXCLUDED.at_ms",
            &[&ord(d.user.0), &i16::from(d.verdict.code()), &i(d.at_ms)],
        )
        .await
        .map_err(pg_err)?;
        Ok(())
    }

    async fn decisions(&self, users: &[UserId]) -> StoreResult<Vec<Option<Decision>>> {
        if users.is_empty() {
            return Ok(Vec::new());
        }
        let c = self.conn(0).await?;
        let ords: Vec<i64> = users.iter().map(|u| ord(u.0)).collect();
        let rows = c
            .query(
                "SELECT user_ord, verdict, at_ms FROM integrity_decisions WHERE user_ord = ANY($1)",
                &[&ords],
            )
            .await
            .map_err(pg_err)?;
        let mut found = std::collections::HashMap::with_capacity(rows.len());
        for r in &rows {
            let d = row_to_decision(r)?;
            found.insert(d.user, d);
        }
        Ok(users.iter().map(|u| found.get(u).copied()).collect())
    }

    async fn decisions_after(&self, after: (u64, UserId), limit: usize) -> StoreResult<Vec<Decision>> {
        let c = self.conn(0).await?;
        let rows = c
            .query(
                "SELECT user_ord, verdict, at_ms FROM integrity_decisions
                 WHERE (at_ms, user_ord) > ($1, $2) ORDER BY at_ms, user_ord LIMIT $3",
                &[&i(after.0), &ord(after.1.0), &lim(limit)],
            )
            .await
            .map_err(pg_err)?;
        rows.iter().map(row_to_decision).collect()
    }
}
