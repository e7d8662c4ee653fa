//! Integrity: accounts flagged as like farms or bot rings (docs/api.md, "Trending and
//! integrity"), and exact discounts of confirmed accounts' likes.
//!
//! - [`detect`]: the patterns (lockstep rings, brand-new accounts acting only together,
//!   inhuman sustained rates), over in-memory windows;
//! - [`discount`]: memberships of confirmed accounts and the per-target discounts;
//! - [`codec`]: the consumer's snapshot, with the discounts at its front for API nodes.
//!
//! [`Integrity`] is the consumer's whole state, pure: time is a parameter, the like rows a
//! confirm needs are handed in.

pub mod codec;
pub mod detect;
pub mod discount;

use crate::event::{Event, EventKind};
use crate::ids::UserId;
use crate::like::Target;
use detect::{Action, Detector};
use discount::Discounts;
use std::collections::HashMap;

/// Detection thresholds and windows.
#[derive(Debug, Clone, PartialEq)]
pub struct IntegrityOptions {
    /// How long a like stays in an account's recent set (ring detection).
    pub recent_window_ms: u64,
    /// Recent actions kept per account.
    pub recent_cap: usize,
    /// Lockstep core likes a ring member needs.
    pub min_shared: usize,
    /// Members a lockstep ring needs.
    pub ring_min: usize,
    /// How far from the members' median time a like may be and still be in lockstep.
    pub lockstep_ms: u64,
    /// An account first seen this recently is brand new.
    pub new_account_ms: u64,
    /// Lockstep core likes a member of a brand-new ring needs.
    pub new_min_shared: usize,
    /// Members a ring of brand-new accounts needs.
    pub new_ring_min: usize,
    /// The sustained-rate window.
    pub rate_window_ms: u64,
    /// Likes in that window that make a rate inhuman...
    pub rate_min_likes: u32,
    /// ...when at least this share of the window's seconds saw a like.
    pub rate_active_share: f64,
    /// Accounts tracked at most (the longest idle are forgotten first).
    pub max_users: usize,
    /// Flags kept at most (the oldest unconfirmed go first).
    pub max_flags: usize,
}

impl Default for IntegrityOptions {
    fn default() -> Self {
        IntegrityOptions {
            recent_window_ms: 10 * 60_000,
            recent_cap: 64,
            min_shared: 10,
            ring_min: 20,
            lockstep_ms: 60_000,
            new_account_ms: 24 * 3_600_000,
            new_min_shared: 6,
            new_ring_min: 10,
            rate_window_ms: 10 * 60_000,
            rate_min_likes: 500,
            rate_active_share: 0.5,
            max_users: 200_000,
            max_flags: 100_000,
        }
    }
}

/// Why an account was flagged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Many accounts liking the same targets within seconds of each other.
    LockstepRing,
    /// Brand-new accounts acting only together (lower thresholds).
    NewAccountsRing,
    /// Likes at a rate no person sustains.
    InhumanRate,
}

impl Reason {
    /// The name in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::LockstepRing => "lockstep_ring",
            Reason::NewAccountsRing => "new_accounts_ring",
            Reason::InhumanRate => "inhuman_rate",
        }
    }
    /// Which pattern a re-detected account's flag shows: rings outrank rates, and a
    /// lockstep ring outranks a ring of brand-new accounts.
    fn rank(self) -> u8 {
        match self {
            Reason::LockstepRing => 3,
            Reason::NewAccountsRing => 2,
            Reason::InhumanRate => 1,
        }
    }
    fn code(self) -> u8 {
        match self {
            Reason::LockstepRing => 1,
            Reason::NewAccountsRing => 2,
            Reason::InhumanRate => 3,
        }
    }
    fn from_code(c: u8) -> Option<Self> {
        match c {
            1 => Some(Reason::LockstepRing),
            2 => Some(Reason::NewAccountsRing),
            3 => Some(Reason::InhumanRate),
            _ => None,
        }
    }
}

/// What the detector saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Evidence {
    /// A ring: how many partners, how many lockstep likes of shared targets, the widest gap
    /// to a target's median like time, and a few partners.
    Ring {
        /// Other accounts in the ring.
        partners: u64,
        /// This account's lockstep likes of the ring's shared targets.
        shared_targets: u64,
        /// The widest distance of those likes from the ring's median time (ms).
        span_ms: u64,
        /// Some partners.
        sample_partners: Vec<u64>,
    },
    /// A rate: likes in the window, its length and how many of its seconds saw a like.
    Rate {
        /// Likes in the window.
        likes: u32,
        /// The window (s).
        window_s: u64,
        /// Seconds of the window with a like.
        active_seconds: u64,
    },
}

/// A flagged account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flag {
    /// The account.
    pub user: u64,
    /// The pattern.
    pub reason: Reason,
    /// What was seen.
    pub evidence: Evidence,
    /// When it was flagged (ms).
    pub flagged_at_ms: u64,
}

/// A moderator's verdict on a flagged account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A farm or bot: its likes are discounted (when configured).
    Confirm,
    /// Not one: the flag is dismissed and its likes count again.
    Clear,
}

impl Verdict {
    /// Stable one-byte code (storage).
    pub fn code(self) -> u8 {
        match self {
            Verdict::Confirm => 1,
            Verdict::Clear => 2,
        }
    }
    /// Inverse of [`Verdict::code`].
    pub fn from_code(c: u8) -> Option<Self> {
        match c {
            1 => Some(Verdict::Confirm),
            2 => Some(Verdict::Clear),
            _ => None,
        }
    }
}

/// A stored verdict: the latest one per account wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// The account.
    pub user: UserId,
    /// The verdict.
    pub verdict: Verdict,
    /// When it was given (ms).
    pub at_ms: u64,
}

/// A confirmed account's own actions this recent are replayed after its likes were
/// enumerated: an index of likes maintained asynchronously (the scale-out reverse index) may
/// lag the log by that much without the discount missing a change.
pub const REPLAY_MS: u64 = 30_000;

/// The consumer's state.
#[derive(Debug, Default)]
pub struct Integrity {
    detector: Detector,
    flags: HashMap<u64, Flag>,
    /// The verdict applied last per account (memberships follow it).
    applied: HashMap<u64, (Verdict, u64)>,
    /// The newest verdict time seen: the next round reads verdicts from a little before it.
    pub decisions_seen_ms: u64,
    discounts: Discounts,
}

impl Integrity {
    /// Fold one log event in (likes only; other events change nothing).
    pub fn apply(&mut self, o: &IntegrityOptions, e: &Event) {
        let created = match e.kind {
            EventKind::LikeCreated => true,
            EventKind::LikeRemoved => false,
            _ => return,
        };
        self.detector.record(o, e.actor.0, Action { target: e.target, ts_ms: e.ts_ms, created });
        self.discounts.on_like(e.actor.0, e.target, created);
    }

    /// Run detection at `now_ms`; returns how many accounts were newly flagged. An account
    /// already flagged keeps its flag (its evidence, and its reason when a stronger pattern
    /// shows, brought up to date), unless it was cleared
    /// since: then it is flagged anew.
    pub fn scan(&mut self, o: &IntegrityOptions, now_ms: u64) -> usize {
        let mut new = 0;
        for f in self.detector.scan(o, now_ms) {
            let cleared_since = match (self.flags.get(&f.user), self.applied.get(&f.user)) {
                (None, _) => true,
                (Some(old), Some((Verdict::Clear, at))) => *at >= old.flagged_at_ms,
                _ => false,
            };
            if cleared_since {
                self.flags.insert(f.user, f);
                new += 1;
            } else if let Some(old) = self.flags.get_mut(&f.user)
                && f.reason.rank() >= old.reason.rank()
            {
                // Seen again: the evidence grows (a ring of new accounts that grows into a
                // lockstep ring says so), and the flag keeps its time.
                old.reason = f.reason;
                old.evidence = f.evidence;
            }
        }
        if self.flags.len() > o.max_flags {
            let mut old: Vec<(u64, u64)> = self
                .flags
                .values()
                .filter(|f| !self.discounts.is_confirmed(f.user))
                .map(|f| (f.flagged_at_ms, f.user))
                .collect();
            old.sort_unstable();
            for (_, u) in old.into_iter().take(self.flags.len() - o.max_flags) {
                self.flags.remove(&u);
                self.applied.remove(&u);
            }
        }
        new
    }

    /// Whether `d` is news: a verdict this state has not applied yet.
    pub fn is_new(&self, d: &Decision) -> bool {
        self.applied.get(&d.user.0) != Some(&(d.verdict, d.at_ms))
    }

    /// Apply a verdict. A confirm takes the account's current likes (`liked`, read from the
    /// like rows after the events folded so far), then replays its recent actions.
    pub fn decide(&mut self, d: &Decision, liked: Vec<Target>, now_ms: u64) {
        self.decisions_seen_ms = self.decisions_seen_ms.max(d.at_ms);
        if !self.is_new(d) {
            return;
        }
        let user = d.user.0;
        match d.verdict {
            Verdict::Confirm => {
                self.discounts.confirm(user, liked);
                for a in self.detector.recent_actions(user, now_ms.saturating_sub(REPLAY_MS)) {
                    self.discounts.on_like(user, a.target, a.created);
                }
            }
            Verdict::Clear => self.discounts.clear(user),
        }
        self.applied.insert(user, (d.verdict, d.at_ms));
    }

    /// Whether `user` is confirmed.
    pub fn is_confirmed(&self, user: u64) -> bool {
        self.discounts.is_confirmed(user)
    }

    /// The flags.
    pub fn flags(&self) -> impl Iterator<Item = &Flag> {
        self.flags.values()
    }

    /// Accounts flagged.
    pub fn flag_count(&self) -> usize {
        self.flags.len()
    }

    /// The discounts.
    pub fn discounts(&self) -> &Discounts {
        &self.discounts
    }

    /// Accounts whose windows are in memory.
    pub fn tracked(&self) -> usize {
        self.detector.len()
    }
}

#[cfg(test)]
mod tests;
