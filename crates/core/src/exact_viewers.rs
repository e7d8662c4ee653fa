//! The exact phase of the unique-viewer sketches (as HyperLogLog++'s sparse mode): while a
//! sketch has seen at most [`EXACT_MAX`] distinct viewers it also keeps their 64-bit hashes,
//! and counts them exactly. HyperLogLog registers alone read small counts short whenever two
//! viewers fall into one register (with 16,384 registers, about 1% of posts with 20 viewers).
//!
//! A 64-bit hash collides between two of a thousand viewers with odds of about 3 in 10^14, so
//! the exact count is the distinct viewer count. Past the bound the set is dropped for good and
//! the registers (always kept beside it, so nothing is lost) give the estimate. Two sets merge
//! by their union, exact while it stays within the bound; a set merged with registers only
//! (an old stored value, or a sketch past the bound) is registers only.
//!
//! A lost set leaves a floor: the most distinct viewers it was known to hold (`EXACT_MAX + 1`
//! once an insert overflowed it). Counts answer at least the floor, so a post does not read
//! 1,023 viewers the moment its 1,025th arrives (the registers' estimate of 1,025 is within
//! its error, but a count that went down would be visible).

use std::collections::BTreeSet;

/// Most distinct viewers counted exactly: a stored set takes 8 bytes each, at most 8 KiB.
pub const EXACT_MAX: usize = 1024;

/// The viewer hashes of a sketch while they are few (`None` once past [`EXACT_MAX`] or merged
/// with registers only), and the floor a lost set leaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exact(Option<BTreeSet<u64>>, u64);

impl Default for Exact {
    /// An empty exact set (a sketch that has seen nobody is exact).
    fn default() -> Self {
        Exact(Some(BTreeSet::new()), 0)
    }
}

impl Exact {
    /// No exact set and no floor: the count is the registers' estimate.
    pub fn lost() -> Self {
        Exact(None, 0)
    }

    /// No exact set, known to have held at least `floor` distinct viewers.
    pub fn lost_at(floor: u64) -> Self {
        Exact(None, floor)
    }

    /// The set of `hashes` (lost, at their number, if there are more than [`EXACT_MAX`]).
    pub fn of(hashes: BTreeSet<u64>) -> Self {
        let n = hashes.len() as u64;
        if hashes.len() <= EXACT_MAX { Exact(Some(hashes), 0) } else { Exact(None, n) }
    }

    /// Count a viewer's hash.
    pub fn insert(&mut self, hash: u64) {
        if let Some(set) = &mut self.0 {
            set.insert(hash);
            if set.len() > EXACT_MAX {
                *self = Exact::lost_at(set.len() as u64);
            }
        }
    }

    /// Fold another sketch's set in (the union, or lost when either is, at the larger floor).
    pub fn merge_from(&mut self, other: &Exact) {
        match (&mut self.0, &other.0) {
            (Some(a), Some(b)) => {
                a.extend(b.iter().copied());
                if a.len() > EXACT_MAX {
                    *self = Exact::lost_at(a.len() as u64);
                }
            }
            _ => *self = Exact::lost_at(self.floor().max(other.floor())),
        }
    }

    /// The exact number of distinct viewers, while known.
    pub fn count(&self) -> Option<u64> {
        self.0.as_ref().map(|s| s.len() as u64)
    }

    /// Distinct viewers known for certain: the count while known, else the floor.
    pub fn floor(&self) -> u64 {
        self.count().unwrap_or(self.1)
    }

    /// The hashes, while known.
    pub fn hashes(&self) -> Option<&BTreeSet<u64>> {
        self.0.as_ref()
    }
}

/// The stored form of a set: `tag`, then each hash as 8 big-endian bytes, ascending.
pub fn encode(tag: u8, hashes: &BTreeSet<u64>) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + 8 * hashes.len());
    out.push(tag);
    for h in hashes {
        out.extend_from_slice(&h.to_be_bytes());
    }
    out
}

/// Read a stored set's body (after its tag): whole 8-byte hashes, strictly ascending, at most
/// [`EXACT_MAX`].
pub fn decode(body: &[u8]) -> Result<BTreeSet<u64>, &'static str> {
    if !body.len().is_multiple_of(8) {
        return Err("exact set not a multiple of 8 bytes");
    }
    if body.len() / 8 > EXACT_MAX {
        return Err("exact set past its bound");
    }
    let mut set = BTreeSet::new();
    let mut last = None;
    for c in body.chunks_exact(8) {
        let mut b = [0u8; 8];
        b.copy_from_slice(c);
        let h = u64::from_be_bytes(b);
        if last.is_some_and(|l| l >= h) {
            return Err("exact set not ascending");
        }
        last = Some(h);
        set.insert(h);
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_set_is_exact_up_to_its_bound_and_lost_past_it() {
        let mut e = Exact::default();
        assert_eq!(e.count(), Some(0));
        for h in 0..EXACT_MAX as u64 {
            e.insert(h * 7919);
            e.insert(h * 7919); // a viewer seen twice counts once
        }
        assert_eq!(e.count(), Some(EXACT_MAX as u64));
        e.insert(u64::MAX);
        assert_eq!(e.count(), None);
        assert_eq!(e.floor(), EXACT_MAX as u64 + 1, "the viewers it was known to hold");
        e.insert(1);
        assert_eq!(e.count(), None, "once lost, the set stays lost");
        assert_eq!(e.floor(), EXACT_MAX as u64 + 1);
    }

    #[test]
    fn sets_merge_by_union_within_the_bound() {
        let mut a = Exact::of((0..600).collect());
        a.merge_from(&Exact::of((300..900).collect()));
        assert_eq!(a.count(), Some(900));
        a.merge_from(&Exact::of((900..1100).collect()));
        assert_eq!(a.count(), None, "1,100 is past the bound");
        assert_eq!(a.floor(), 1100);
        let mut b = Exact::of((0..3).collect());
        b.merge_from(&Exact::lost());
        assert_eq!(b.count(), None, "merged with registers only");
        assert_eq!(b.floor(), 3, "the set's viewers stay a floor");
        b.merge_from(&a);
        assert_eq!(b.floor(), 1100, "the larger floor");
        assert_eq!(Exact::of((0..2000).collect()).count(), None);
        assert_eq!(Exact::of((0..2000).collect()).floor(), 2000);
    }

    #[test]
    fn the_stored_form_round_trips_and_rejects_malformed_bodies() {
        let set: BTreeSet<u64> = [3, 1 << 40, u64::MAX].into_iter().collect();
        let enc = encode(9, &set);
        assert_eq!(enc.len(), 1 + 24);
        assert_eq!(enc[0], 9);
        assert_eq!(decode(&enc[1..]), Ok(set));
        assert!(decode(&[0; 7]).is_err());
        assert!(decode(&[0; 16]).is_err(), "a hash repeated");
        assert!(decode(&vec![0; 8 * (EXACT_MAX + 1)]).is_err());
    }
}
