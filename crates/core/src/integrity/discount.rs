//! Discounting confirmed accounts' likes, exactly.
//!
//! For each confirmed account the consumer keeps the set of targets it likes (its
//! memberships), and per target the number of memberships on it: the discount subtracted from
//! the displayed like count. A confirm inserts the account's current likes (enumerated from
//! the like rows); from then on each of its like events in log order sets the membership of
//! its target to "liked" or "not liked" (last writer wins); a clear removes every membership.
//! Each real membership change moves the target's discount by exactly one, so the discounts
//! converge to the confirmed accounts' like rows whatever the order between the enumeration
//! and the events that raced it (`tests::memberships_converge_to_the_rows_in_any_interleaving`).

use crate::like::Target;
use std::collections::{HashMap, HashSet};

/// Memberships of confirmed accounts and the per-target discounts they add up to.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Discounts {
    members: HashMap<u64, HashSet<Target>>,
    counts: HashMap<Target, u32>,
}

impl Discounts {
    /// Whether `user` is confirmed (its likes are tracked).
    pub fn is_confirmed(&self, user: u64) -> bool {
        self.members.contains_key(&user)
    }

    /// Confirm `user` (idempotent) and add `liked` to its memberships.
    pub fn confirm(&mut self, user: u64, liked: impl IntoIterator<Item = Target>) {
        self.members.entry(user).or_default();
        for t in liked {
            self.set(user, t, true);
        }
    }

    /// Clear `user`: every membership goes, and the discounts it added.
    pub fn clear(&mut self, user: u64) {
        for t in self.members.remove(&user).unwrap_or_default() {
            self.dec(t);
        }
    }

    /// A like (`liked`) or unlike by a confirmed `user` of `target`; others change nothing.
    pub fn on_like(&mut self, user: u64, target: Target, liked: bool) {
        if self.members.contains_key(&user) {
            self.set(user, target, liked);
        }
    }

    fn set(&mut self, user: u64, target: Target, liked: bool) {
        let Some(set) = self.members.get_mut(&user) else { return };
        if liked {
            if set.insert(target) {
                *self.counts.entry(target).or_default() += 1;
            }
        } else if set.remove(&target) {
            self.dec(target);
        }
    }

    fn dec(&mut self, target: Target) {
        if let Some(n) = self.counts.get_mut(&target) {
            *n -= 1;
            if *n == 0 {
                self.counts.remove(&target);
            }
        }
    }

    /// The discount of `target`.
    pub fn discount(&self, target: Target) -> u32 {
        self.counts.get(&target).copied().unwrap_or(0)
    }

    /// Every discounted target and its discount.
    pub fn counts(&self) -> &HashMap<Target, u32> {
        &self.counts
    }

    /// Confirmed accounts and their memberships.
    pub fn members(&self) -> &HashMap<u64, HashSet<Target>> {
        &self.members
    }

    /// Rebuild from memberships (the discounts follow from them).
    pub fn from_members(members: HashMap<u64, HashSet<Target>>) -> Self {
        let mut counts: HashMap<Target, u32> = HashMap::new();
        for set in members.values() {
            for t in set {
                *counts.entry(*t).or_default() += 1;
            }
        }
        Discounts { members, counts }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn a_clear_gives_back_exactly_what_a_confirm_took() {
        let mut d = Discounts::default();
        d.confirm(1, [Target::post(10), Target::post(11)]);
        d.confirm(2, [Target::post(10), Target::comment(10)]);
        d.confirm(2, [Target::post(10)]);
        assert_eq!((d.discount(Target::post(10)), d.discount(Target::comment(10))), (2, 1));
        d.on_like(3, Target::post(10), true);
        assert_eq!(d.discount(Target::post(10)), 2, "unconfirmed accounts change nothing");
        d.clear(1);
        d.clear(2);
        assert!(d.counts().is_empty());
        assert_eq!(Discounts::from_members(d.members().clone()), d);
    }

    proptest! {
        /// One confirmed account toggles likes on a few targets; the enumeration of its likes
        /// is taken at any point of that history (it reflects the rows at that point), and the
        /// consumer folds in the events from any earlier point on (events it folded before the
        /// confirm were ignored; it may see some again, replayed). The discounts end equal to
        /// the rows.
        #[test]
        fn memberships_converge_to_the_rows_in_any_interleaving(
            toggles in proptest::collection::vec((0u64..6, any::<bool>()), 0..40),
            enum_at in 0usize..41,
            fold_from in 0usize..41,
        ) {
            let enum_at = enum_at.min(toggles.len());
            let fold_from = fold_from.min(enum_at);
            let mut rows: BTreeMap<u64, bool> = BTreeMap::new();
            let mut events = Vec::new();
            for (i, (t, like)) in toggles.iter().enumerate() {
                if i == enum_at {
                    break;
                }
                // Only real changes are logged.
                if rows.get(t).copied().unwrap_or(false) != *like {
                    rows.insert(*t, *like);
                    events.push((*t, *like));
                }
            }
            let snapshot: Vec<Target> = rows.iter().filter(|(_, l)| **l).map(|(t, _)| Target::post(*t)).collect();
            let mut d = Discounts::default();
            d.confirm(7, snapshot);
            let from = fold_from.min(events.len());
            for (t, like) in &events[from..] {
                d.on_like(7, Target::post(*t), *like);
            }
            for (t, like) in &toggles[enum_at..] {
                if rows.get(t).copied().unwrap_or(false) != *like {
                    rows.insert(*t, *like);
                    d.on_like(7, Target::post(*t), *like);
                }
            }
            for t in 0..6u64 {
                prop_assert_eq!(d.discount(Target::post(t)), u32::from(rows.get(&t).copied().unwrap_or(false)));
            }
            d.clear(7);
            prop_assert!(d.counts().is_empty());
        }
    }
}
