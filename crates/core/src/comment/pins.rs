//! Pinning: what pinning or unpinning one comment does to a post's pin list.
//!
//! Pure, like the other rules here: an engine reads the post's pins and applies the result in
//! one atomic step (under a lock, or in a transaction holding the row), so two concurrent
//! pins or unpins never overwrite each other and the cap always holds.

use crate::comment::rank::MAX_PINS;
use crate::ids::CommentId;

/// What a pin or unpin does to a post's pin list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PinChange {
    /// The list becomes this (in pin order).
    Changed(Vec<CommentId>),
    /// Already as asked: pinned, or not pinned.
    Unchanged,
    /// A pin refused: [`MAX_PINS`] comments are pinned already.
    Full,
}

/// Pin (`pin`) or unpin `id` on a post whose pins are `pins`: a new pin goes last; an unpin
/// keeps the others' order.
pub fn change_pins(pins: &[CommentId], id: CommentId, pin: bool) -> PinChange {
    let present = pins.contains(&id);
    match (pin, present) {
        (true, true) | (false, false) => PinChange::Unchanged,
        (true, false) if pins.len() >= MAX_PINS => PinChange::Full,
        (true, false) => PinChange::Changed(pins.iter().copied().chain([id]).collect()),
        (false, true) => PinChange::Changed(pins.iter().copied().filter(|p| *p != id).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[u64]) -> Vec<CommentId> {
        v.iter().map(|&i| CommentId(i)).collect()
    }

    #[test]
    fn a_pin_goes_last_and_an_unpin_keeps_the_others_order() {
        assert_eq!(change_pins(&ids(&[3, 1]), CommentId(2), true), PinChange::Changed(ids(&[3, 1, 2])));
        assert_eq!(change_pins(&ids(&[3, 1, 2]), CommentId(1), false), PinChange::Changed(ids(&[3, 2])));
    }

    #[test]
    fn pinning_the_pinned_or_unpinning_the_unpinned_changes_nothing() {
        assert_eq!(change_pins(&ids(&[3]), CommentId(3), true), PinChange::Unchanged);
        assert_eq!(change_pins(&ids(&[3]), CommentId(4), false), PinChange::Unchanged);
    }

    #[test]
    fn the_cap_refuses_a_fourth_pin() {
        assert_eq!(change_pins(&ids(&[1, 2, 3]), CommentId(4), true), PinChange::Full);
        assert_eq!(change_pins(&ids(&[1, 2, 3]), CommentId(3), true), PinChange::Unchanged);
    }
}
