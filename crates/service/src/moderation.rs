//! Moderation in layers (docs/moderation.md), applied to every comment before it is written:
//!
//! 1. permission checks, synchronous: the post's author blocked the commenter (403, likes
//!    refused too), comments off / followers only (403, in `comments.rs`), and a per-user rate
//!    limit (429 with Retry-After; never per post: a viral post legitimately gets thousands of
//!    comments a second from different people);
//! 2. author filters: hidden words -> `hidden_by_filter`, Restrict -> `restricted` until the
//!    post's author approves;
//! 3. classifiers: the offline rules classifier (toxicity, spam signals and the user's comment
//!    velocity) behind the `Classifier` port, and near-duplicate detection with SimHash across
//!    posts (the Nth copy within a day is held back);
//! 4. reports feed a review queue; enough distinct reporters auto-hide a comment as `pending`.
//!
//! Held comments are accepted (201) and shadow-visible to their author, so spammers are not
//! tipped off.

use crate::cache::Usage;
use crate::cache::ttl::TtlMap;
use crate::rate::RateTable;
use crate::shared::Shared;
use crate::{ServiceError, ServiceResult, now_ms};
use likewise_core::comment::appeal::HeldBy;
use likewise_core::comment::classify::{Classifier, RulesClassifier, should_hold};
use likewise_core::comment::hidden_words::HiddenWords;
use likewise_core::comment::id::first_id_at;
use likewise_core::comment::simhash::{copies, duplicate_radius};
use likewise_core::comment::status::CommentStatus;
use likewise_core::ids::{CommentId, UserId};
use likewise_core::ports::cluster::Invalidation;
use std::sync::Arc;
use std::time::Duration;

pub use crate::options::ModerationOptions;

/// Users the like limiter holds at once: 256 KiB, small enough to stay in a core's L2 cache.
/// Each check touches one random line of the table, and at 2 MiB that line came from memory:
/// 87% of the check's time was that one load, 6% of all CPU in the hot-post benchmark, and
/// 256 KiB measured +10% likes/s with consecutive liker IDs (docs/benchmarks.md, "What we tried").
/// What the table must remember is the users near their limit, not every liker: a one-time
/// liker's entry (at the default 120 likes a minute) is 500 ms from expiry, a user deep into
/// the burst is minutes from it, and a full bucket overwrites the entry closest to expiry
/// (see [`RateTable`]). So past 64k distinct likers a second, one-time likers are forgotten
/// early (harmless: they were allowed anyway, and `likewise_rate_limit_evictions_total`
/// counts it), while the users being held back stay.
const LIKE_USERS: usize = 1 << 15;
/// Users the comment limiter holds at once: 512 KiB (a one-time commenter's entry lives 3 s
/// at the default 20 a minute: 21k comments a second of distinct users).
const COMMENT_USERS: usize = 1 << 16;

/// A per-user limiter ([`RateTable`]: fixed memory, one cache line per check) answering in
/// the service's terms.
struct UserRate(RateTable);

impl UserRate {
    fn new(per_minute: u32, burst: u32, users: usize, name: &'static str) -> Self {
        UserRate(RateTable::new(per_minute, burst, users, name))
    }

    /// Count one action; `Err(RateLimited(seconds))` when over the allowance.
    fn check(&self, user: UserId) -> ServiceResult<()> {
        self.0.check(user.0).map_err(|wait| ServiceError::RateLimited(retry_after_secs(wait)))
    }
}

/// `Retry-After` for a wait: whole seconds, rounded up (a client retrying at the floor would
/// be refused again), at least 1.
fn retry_after_secs(wait: Duration) -> u64 {
    (wait.as_millis().div_ceil(1000) as u64).max(1)
}

/// The synchronous moderation layers, with their state and caches.
pub struct Moderation {
    shared: Arc<Shared>,
    opts: ModerationOptions,
    limiter: UserRate,
    /// Likes per user, in process on every node (see [`Moderation::check_like_rate`]).
    like_limiter: Option<UserRate>,
    classifier: Arc<dyn Classifier>,
    /// Per post author, everyone they block: one load, then O(1) per like or comment, even
    /// for a hot post liked by a new user every microsecond. `None`: too many to cache, ask
    /// storage per pair.
    blocks: TtlMap<UserId, Option<Arc<std::collections::HashSet<UserId>>>>,
    restricts: TtlMap<(UserId, UserId), bool>,
    hidden: TtlMap<UserId, Arc<HiddenWords>>,
}

impl Moderation {
    /// Moderation with the offline rules classifier, tuned by the options' `moderation`.
    pub fn new(shared: Arc<Shared>) -> Self {
        let opts = shared.opts.moderation.clone();
        let (ttl, capacity) = (shared.opts.meta_ttl, shared.opts.meta_capacity);
        let like_limiter = (opts.likes_per_minute > 0)
            .then(|| UserRate::new(opts.likes_per_minute, opts.like_burst, LIKE_USERS, "likes"));
        Moderation {
            limiter: UserRate::new(opts.comments_per_minute, opts.comment_burst, COMMENT_USERS, "comments"),
            like_limiter,
            classifier: Arc::new(RulesClassifier),
            blocks: TtlMap::new("blocks", ttl, capacity),
            restricts: TtlMap::new("restricts", ttl, capacity),
            hidden: TtlMap::new("hidden_words", ttl, capacity / 10 + 1),
            opts,
            shared,
        }
    }

    /// Count one comment against `user`'s rate; `Err` with the seconds to wait when over.
    pub fn check_rate_locally(&self, user: UserId) -> ServiceResult<()> {
        self.limiter.check(user).inspect_err(|_| {
            metrics::counter!("likewise_comment_rate_limited_total").increment(1);
        })
    }

    /// Usage of the caches (for `/metrics`).
    pub(crate) fn cache_usage(&self) -> [Usage; 3] {
        [self.blocks.usage(), self.restricts.usage(), self.hidden.usage()]
    }

    /// Drop an entry another node announced, if it is one of these caches'.
    pub(crate) fn invalidate(&self, inv: Invalidation) {
        match inv {
            Invalidation::Blocks(u) => self.blocks.remove(&u),
            Invalidation::Restrict(a, b) => self.restricts.remove(&(a, b)),
            Invalidation::HiddenWords(u) => self.hidden.remove(&u),
            _ => {}
        }
    }

    /// Count one like or unlike against `user`'s allowance: a like farm driving one account
    /// gets 429s after its burst. Kept in process even when a shared limiter exists: a
    /// Redis round trip per like would cost more than the abuse it stops, and spread over N
    /// API nodes the allowance is at most N times the configured one (exact with sticky
    /// routing by user).
    pub fn check_like_rate(&self, user: UserId) -> ServiceResult<()> {
        let Some(limiter) = &self.like_limiter else { return Ok(()) };
        limiter.check(user).inspect_err(|_| {
            metrics::counter!("likewise_like_rate_limited_total").increment(1);
        })
    }

    /// Count one comment against `user`'s rate: in the shared limiter when the deployment has
    /// one (so the allowance does not grow with the number of API nodes), else in process.
    /// If the shared limiter is unreachable, the process limits alone rather than refusing
    /// every comment.
    pub async fn check_comment_rate(&self, user: UserId) -> ServiceResult<()> {
        let o = &self.opts;
        if let Some(rl) = &self.shared.stores.rate_limiter {
            match rl.check(&format!("comment:{}", user.0), o.comment_burst, o.comments_per_minute).await {
                Ok(None) => return Ok(()),
                Ok(Some(ms)) => {
                    metrics::counter!("likewise_comment_rate_limited_total").increment(1);
                    return Err(ServiceError::RateLimited(ms.div_ceil(1000).max(1)));
                }
                Err(e) => tracing::warn!(error = %e, "shared rate limiter unavailable; limiting in process"),
            }
        }
        self.check_rate_locally(user)
    }

    /// Has `owner` blocked `other`? (cached per owner)
    pub async fn is_blocked(&self, owner: UserId, other: UserId) -> ServiceResult<bool> {
        const MAX_CACHED_BLOCKS: usize = 10_000;
        if owner == other {
            return Ok(false);
        }
        let set = match self.blocks.get(&owner) {
            Some(set) => set,
            None => {
                let list = self.shared.stores.moderation.blocked_users(owner, MAX_CACHED_BLOCKS + 1).await?;
                let set = (list.len() <= MAX_CACHED_BLOCKS).then(|| Arc::new(list.into_iter().collect()));
                self.blocks.put(owner, set.clone());
                set
            }
        };
        match set {
            Some(set) => Ok(set.contains(&other)),
            None => Ok(self.shared.stores.moderation.is_blocked(owner, other).await?),
        }
    }

    /// Refuse with 403 when the post's author blocked `viewer`.
    pub async fn check_not_blocked(&self, post_author: UserId, viewer: UserId) -> ServiceResult<()> {
        if self.is_blocked(post_author, viewer).await? {
            return Err(ServiceError::Forbidden("the author of this post has blocked you".into()));
        }
        Ok(())
    }

    /// Refuse with 403 when the author of the comment `viewer` answers or likes blocked them.
    pub async fn check_not_blocked_by_commenter(&self, author: UserId, viewer: UserId) -> ServiceResult<()> {
        if self.is_blocked(author, viewer).await? {
            return Err(ServiceError::Forbidden("the author of this comment has blocked you".into()));
        }
        Ok(())
    }

    /// `owner` blocks or unblocks `other`.
    pub async fn set_block(&self, owner: UserId, other: UserId, on: bool) -> ServiceResult<()> {
        self.shared.stores.moderation.set_block(owner, other, on).await?;
        self.blocks.remove(&owner);
        self.shared.announce(Invalidation::Blocks(owner));
        Ok(())
    }

    /// `owner` restricts or stops restricting `other`.
    pub async fn set_restrict(&self, owner: UserId, other: UserId, on: bool) -> ServiceResult<()> {
        self.shared.stores.moderation.set_restrict(owner, other, on).await?;
        self.restricts.put((owner, other), on);
        self.shared.announce(Invalidation::Restrict(owner, other));
        Ok(())
    }

    /// Replace `owner`'s hidden words (validated: count and length limits, no blank entry);
    /// returns the list as stored, invisible characters dropped.
    pub async fn put_hidden_words(&self, owner: UserId, words: Vec<String>) -> ServiceResult<Vec<String>> {
        // A word of only whitespace and invisible characters is refused rather than stored as
        // an entry that shows as nothing and can never match.
        likewise_core::comment::hidden_words::refuse_blank(&words)
            .map_err(|e| ServiceError::Invalid(e.to_string()))?;
        // Invisible characters are dropped as from comment text (`names`): the matcher sees
        // through them anyway, and the list read back shows what is matched.
        let words: Vec<String> =
            words.into_iter().map(|w| likewise_core::names::strip_invisible(&w).trim().to_string()).collect();
        if words.iter().any(|w| w.contains('\n')) {
            return Err(ServiceError::Invalid("hidden words cannot contain line breaks".into()));
        }
        let matcher = HiddenWords::new(&words).map_err(|e| ServiceError::Invalid(e.to_string()))?;
        self.shared.stores.moderation.put_hidden_words(owner, &words).await?;
        self.hidden.put(owner, Arc::new(matcher));
        self.shared.announce(Invalidation::HiddenWords(owner));
        Ok(words)
    }

    async fn hidden_words(&self, owner: UserId) -> ServiceResult<Arc<HiddenWords>> {
        if let Some(h) = self.hidden.get(&owner) {
            return Ok(h);
        }
        let words = self.shared.stores.moderation.hidden_words(owner).await?;
        // Stored lists were validated on the way in; one that no longer validates (limits
        // lowered since) filters nothing rather than failing every comment on the post.
        let h = match HiddenWords::new(&words) {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(error = %e, owner = owner.0, "stored hidden words no longer valid");
                HiddenWords::new(&[]).map_err(|e| ServiceError::Invalid(e.to_string()))?
            }
        };
        let h = Arc::new(h);
        self.hidden.put(owner, h.clone());
        Ok(h)
    }

    async fn is_restricted(&self, owner: UserId, other: UserId) -> ServiceResult<bool> {
        if let Some(b) = self.restricts.get(&(owner, other)) {
            return Ok(b);
        }
        let b = self.shared.stores.moderation.is_restricted(owner, other).await?;
        self.restricts.put((owner, other), b);
        Ok(b)
    }

    /// Layers 2 and 3: the status a new comment starts in, and the layer that held it.
    pub async fn initial_status(
        &self,
        author: UserId,
        post_author: UserId,
        text: &str,
        simhash: u64,
    ) -> ServiceResult<(CommentStatus, Option<HeldBy>)> {
        if author != post_author {
            if self.is_restricted(post_author, author).await? {
                return Ok((CommentStatus::Restricted, Some(HeldBy::Restricted)));
            }
            if self.hidden_words(post_author).await?.matches(text) {
                return Ok((CommentStatus::HiddenByFilter, Some(HeldBy::HiddenWords)));
            }
        }
        let since =
            CommentId(first_id_at(now_ms().saturating_sub(self.opts.duplicate_window.as_millis() as u64)));
        let recent = self.shared.stores.moderation.fingerprints(author, since, 200).await?;
        let last_minute = CommentId(first_id_at(now_ms().saturating_sub(60_000)));
        let velocity = recent.iter().filter(|(id, _)| *id >= last_minute).count() as u32;
        let verdict = self.classifier.classify(text, velocity);
        if should_hold(&verdict) {
            return Ok((CommentStatus::HiddenByFilter, Some(HeldBy::Classifier)));
        }
        // Near, not only equal: spam pasted with a word changed or added each time counts as
        // copies too (the radius is wider for texts long enough to tell), and so do copies
        // that drifted a word at a time, each near the one before (`simhash::copies`).
        let radius = duplicate_radius(text);
        let earlier: Vec<u64> = recent.iter().map(|(_, h)| *h).collect();
        let copies = copies(&earlier, simhash, radius);
        if copies >= self.opts.duplicate_copies {
            return Ok((CommentStatus::HiddenByFilter, Some(HeldBy::NearDuplicate)));
        }
        Ok((CommentStatus::Visible, None))
    }

    /// The report threshold that auto-hides a comment.
    pub fn report_threshold(&self) -> u32 {
        self.opts.report_threshold
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_rate_answers_with_the_seconds_to_wait() {
        let r = UserRate::new(6, 1, 1024, "test"); // one action per 10 s, no burst
        assert!(r.check(UserId(1)).is_ok());
        assert!(
            matches!(r.check(UserId(1)), Err(ServiceError::RateLimited(9 | 10))),
            "a second action inside the interval is refused with the wait"
        );
        assert!(r.check(UserId(2)).is_ok(), "another user has their own allowance");
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1_000)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1_001)), 2, "rounded up");
        assert_eq!(retry_after_secs(Duration::from_millis(59_999)), 60);
    }
}
