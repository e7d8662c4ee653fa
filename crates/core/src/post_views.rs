//! The stored form of a post's unique-viewer sketch (`ViewStore::load_views`), and how two
//! stored forms merge (what a store does when several nodes save the same post).
//!
//! - **Registers**: the [`REGISTERS`] one-byte HyperLogLog registers (precision 14), as the
//!   service's sketch holds them. The only form before the exact phase; still read.
//! - **Exact**: [`EXACT`], then the viewers' 64-bit hashes ([`crate::exact_viewers`]), while
//!   the post has at most [`crate::exact_viewers::EXACT_MAX`] distinct viewers. Its length
//!   (1 + 8n) is odd, so it is never mistaken for the registers.
//! - **Floored**: [`FLOORED`], the floor as 8 big-endian bytes, then the registers: a sketch
//!   past the exact bound, with the most distinct viewers it was known to hold
//!   ([`crate::exact_viewers`]), below which its count never reads.
//!
//! A hash lands in the register of its top 14 bits with rank 1 + its trailing zeros (the
//! mapping of the `hyperloglockless` sketch the service counts with), so an exact set turns
//! into the very registers its viewers would have set.

use crate::exact_viewers::{self, Exact};
use std::collections::BTreeSet;

/// Register index bits.
pub const PRECISION: u32 = 14;
/// Registers in the dense form (2^14).
pub const REGISTERS: usize = 1 << PRECISION;
/// Tag of the exact form.
pub const EXACT: u8 = 0xE5;
/// Tag of the floored registers form.
pub const FLOORED: u8 = 0xE6;
/// Largest register value a 64-bit hash can give (and a stored register may hold).
const MAX_RANK: u8 = 65;

/// A stored sketch, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    /// The hashes of every distinct viewer.
    Exact(BTreeSet<u64>),
    /// Registers, and the distinct viewers they are known to hold at least (0: not known).
    Registers(Vec<u8>, u64),
}

/// The register a viewer hash lands in and the rank it offers there.
pub fn register_of(hash: u64) -> (usize, u8) {
    ((hash >> (64 - PRECISION)) as usize, 1 + hash.trailing_zeros() as u8)
}

/// Read a stored sketch; `None` when it is neither form.
pub fn decode(bytes: &[u8]) -> Option<Stored> {
    let registers = |r: &[u8]| r.len() == REGISTERS && r.iter().all(|r| *r <= MAX_RANK);
    if registers(bytes) {
        return Some(Stored::Registers(bytes.to_vec(), 0));
    }
    match bytes.split_first() {
        Some((&EXACT, body)) => exact_viewers::decode(body).ok().map(Stored::Exact),
        Some((&FLOORED, body)) if body.len() == 8 + REGISTERS && registers(&body[8..]) => {
            let floor = u64::from_be_bytes(body[..8].try_into().expect("8 bytes"));
            Some(Stored::Registers(body[8..].to_vec(), floor))
        }
        _ => None,
    }
}

/// The stored form of a sketch: exact while its set is known, else `registers` (floored when
/// the set left a floor).
pub fn encode(exact: &Exact, registers: &[u8]) -> Vec<u8> {
    match exact.hashes() {
        Some(set) => exact_viewers::encode(EXACT, set),
        None => floored(registers.to_vec(), exact.floor()),
    }
}

/// The registers form of `registers` known to hold at least `floor` viewers.
fn floored(registers: Vec<u8>, floor: u64) -> Vec<u8> {
    if floor == 0 {
        return registers;
    }
    let mut out = Vec::with_capacity(1 + 8 + registers.len());
    out.push(FLOORED);
    out.extend_from_slice(&floor.to_be_bytes());
    out.extend_from_slice(&registers);
    out
}

/// The registers `hashes` set, on top of `registers`.
pub fn insert_all(registers: &mut [u8], hashes: &BTreeSet<u64>) {
    for h in hashes {
        let (i, r) = register_of(*h);
        registers[i] = registers[i].max(r);
    }
}

/// The union of two stored sketches, stored form: sets merge while the union stays within
/// the exact bound, else everything becomes registers. An unreadable `old` is replaced by
/// `new` (nothing sound to merge with), as is anything merged with an unreadable `new`.
pub fn merge(old: &[u8], new: Vec<u8>) -> Vec<u8> {
    let (Some(a), Some(b)) = (decode(old), decode(&new)) else { return new };
    match (a, b) {
        (Stored::Exact(mut a), Stored::Exact(b)) => {
            a.extend(b);
            if a.len() <= exact_viewers::EXACT_MAX {
                return exact_viewers::encode(EXACT, &a);
            }
            let mut regs = vec![0u8; REGISTERS];
            insert_all(&mut regs, &a);
            floored(regs, a.len() as u64)
        }
        (Stored::Exact(set), Stored::Registers(mut regs, floor))
        | (Stored::Registers(mut regs, floor), Stored::Exact(set)) => {
            insert_all(&mut regs, &set);
            floored(regs, floor.max(set.len() as u64))
        }
        (Stored::Registers(a, fa), Stored::Registers(b, fb)) => {
            floored(a.iter().zip(b).map(|(x, y)| (*x).max(y)).collect(), fa.max(fb))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(r: std::ops::Range<u64>) -> BTreeSet<u64> {
        r.map(|x| x.wrapping_mul(0x9e37_79b9_7f4a_7c15)).collect()
    }

    fn registers(hashes: &BTreeSet<u64>) -> Vec<u8> {
        let mut regs = vec![0u8; REGISTERS];
        insert_all(&mut regs, hashes);
        regs
    }

    #[test]
    fn both_forms_decode_and_nothing_else_does() {
        let s = set(0..10);
        let exact = encode(&Exact::of(s.clone()), &[]);
        assert_eq!(exact.len(), 1 + 80);
        assert_eq!(decode(&exact), Some(Stored::Exact(s.clone())));
        let regs = registers(&s);
        assert_eq!(encode(&Exact::lost(), &regs), regs);
        assert_eq!(decode(&regs), Some(Stored::Registers(regs.clone(), 0)), "an old register-only value");
        let past = encode(&Exact::lost_at(1025), &regs);
        assert_eq!((past.len(), past[0]), (1 + 8 + REGISTERS, FLOORED));
        assert_eq!(decode(&past), Some(Stored::Registers(regs.clone(), 1025)));
        assert_eq!(decode(&past[..past.len() - 1]), None, "a floored form cut short");
        assert_eq!(decode(&[EXACT, 1, 2]), None);
        assert_eq!(decode(&[1, 2, 3]), None);
        assert_eq!(decode(&vec![66; REGISTERS]), None);
    }

    #[test]
    fn merges_are_unions_exact_while_small() {
        let (a, b) = (set(0..15), set(10..30));
        let merged = merge(&encode(&Exact::of(a.clone()), &[]), encode(&Exact::of(b.clone()), &[]));
        assert_eq!(decode(&merged), Some(Stored::Exact(set(0..30))));
        // An exact set with registers: registers, the set's viewers included.
        // An exact set with registers: registers, the set's viewers included, at least as many
        // as the set held.
        let merged = merge(&registers(&a), encode(&Exact::of(b.clone()), &[]));
        assert_eq!(decode(&merged), Some(Stored::Registers(registers(&set(0..30)), 20)));
        let merged = merge(&encode(&Exact::of(b), &[]), registers(&a));
        assert_eq!(decode(&merged), Some(Stored::Registers(registers(&set(0..30)), 20)));
        // Two sets whose union is past the bound: registers of the union, floored at its size.
        let big = exact_viewers::EXACT_MAX as u64;
        let merged = merge(&encode(&Exact::of(set(0..big)), &[]), encode(&Exact::of(set(10..big + 10)), &[]));
        assert_eq!(decode(&merged), Some(Stored::Registers(registers(&set(0..big + 10)), big + 10)));
        // Floored registers keep the larger floor.
        let merged = merge(&merged, encode(&Exact::lost_at(2_000), &registers(&set(0..5))));
        assert_eq!(decode(&merged), Some(Stored::Registers(registers(&set(0..big + 10)), 2_000)));
        // Registers with registers: the register-wise maximum; merging again changes nothing.
        let merged = merge(&registers(&set(0..5_000)), registers(&set(3_000..9_000)));
        assert_eq!(merged, registers(&set(0..9_000)));
        assert_eq!(merge(&merged, registers(&set(3_000..9_000))), merged);
        // Something unreadable is replaced.
        assert_eq!(merge(&[1, 2], vec![7]), vec![7]);
    }
}
