//! Integrity on the API side: the flags the integrity consumer (`likewise_workers::integrity`)
//! raised, moderators' verdicts on them, and the discounts of confirmed accounts' likes in
//! displayed counts (`integrity.discount_flagged`).
//!
//! Every API node reads the consumer's snapshot (one storage read a second at most): the
//! discounts at its front for every displayed like count, the flags for the moderation list.
//! Verdicts are written to the `IntegrityStore` by any node; the consumer applies them in its
//! next round, so a discount starts (or ends) within about a second.

pub use crate::cache::snapshot::{Discount, INTEGRITY, SnapshotReader};
use crate::shared::Shared;
use crate::{ServiceError, ServiceResult};
use likewise_core::ids::UserId;
use likewise_core::integrity::codec::decode_flags;
use likewise_core::integrity::{Decision, Flag, Verdict};
use std::sync::Arc;

/// A flag as moderators see it.
#[derive(Debug, Clone, PartialEq)]
pub struct FlagView {
    /// What the consumer saw.
    pub flag: Flag,
    /// The latest verdict, if any.
    pub decision: Option<Decision>,
    /// Confirmed, with discounting on: its likes are left out of displayed counts.
    pub likes_discounted: bool,
}

/// Flags and verdicts.
pub struct Integrity {
    shared: Arc<Shared>,
}

impl Integrity {
    /// The service over the shared state.
    pub fn new(shared: Arc<Shared>) -> Self {
        Integrity { shared }
    }

    fn view(&self, flag: Flag, decision: Option<Decision>) -> FlagView {
        let confirmed = decision.is_some_and(|d| d.verdict == Verdict::Confirm);
        FlagView { flag, decision, likes_discounted: confirmed && self.shared.integrity.discount_on() }
    }

    /// All flags, newest first (ties: lower account first).
    async fn all(&self) -> ServiceResult<Vec<Flag>> {
        let (body, _) = self.shared.integrity.current().await?;
        let mut flags = decode_flags(&body).unwrap_or_default();
        flags.sort_by(|a, b| b.flagged_at_ms.cmp(&a.flagged_at_ms).then(a.user.cmp(&b.user)));
        Ok(flags)
    }

    /// A page of flags strictly after `after` (`(flagged_at_ms, user)` of the previous page's
    /// last), and the position of this page's last when more follow.
    pub async fn list(
        &self,
        after: Option<(u64, u64)>,
        limit: usize,
    ) -> ServiceResult<(Vec<FlagView>, Option<(u64, u64)>)> {
        let flags = self.all().await?;
        let start = match after {
            Some((at, user)) => {
                flags.partition_point(|f| f.flagged_at_ms > at || (f.flagged_at_ms == at && f.user <= user))
            }
            None => 0,
        };
        let page: Vec<Flag> = flags.iter().skip(start).take(limit).cloned().collect();
        let next = (start + page.len() < flags.len())
            .then(|| page.last().map(|f| (f.flagged_at_ms, f.user)))
            .flatten();
        let users: Vec<UserId> = page.iter().map(|f| UserId(f.user)).collect();
        let decisions = self.shared.stores.integrity.decisions(&users).await?;
        Ok((page.into_iter().zip(decisions).map(|(f, d)| self.view(f, d)).collect(), next))
    }

    /// Record a moderator's verdict on a flagged account at `now_ms`.
    pub async fn decide(&self, user: UserId, verdict: Verdict, now_ms: u64) -> ServiceResult<FlagView> {
        let flag = self
            .all()
            .await?
            .into_iter()
            .find(|f| f.user == user.0)
            .ok_or(ServiceError::NotFound("flagged account"))?;
        let d = Decision { user, verdict, at_ms: now_ms };
        self.shared.stores.integrity.put_decision(d).await?;
        Ok(self.view(flag, Some(d)))
    }
}
