//! Unique viewers per post and UTC hour: a HyperLogLog sketch of each (post, hour) that had
//! views, kept beside the per-post sketch (`likewise_service::views`) for the analytics
//! export.
//!
//! Precision 14 (16,384 registers, about 0.8% standard error), like the per-post sketch. Most
//! post-hours have few viewers: up to [`crate::exact_viewers::EXACT_MAX`] of them a sketch also
//! keeps their 64-bit hashes and is stored EXACT (8 bytes a viewer, counted exactly: two
//! viewers sharing a register no longer read as one). Past that it is stored SPARSE (only its
//! non-zero registers, 3 bytes each) while that is smaller than the dense form, and DENSE (one
//! byte per register) beyond: a post-hour with 10 viewers takes 81 bytes, a viral one at most
//! 16 KiB + 1. Sketches of the same post-hour from several flushes or nodes merge by their
//! union ([`merge`]: the union of the sets while it stays within the bound, and the
//! register-wise maximum): merging is idempotent, so a retried save changes nothing. SPARSE
//! and DENSE values stored before the exact form are still read (as registers only).
//!
//! The hash is this module's own (a fixed 64-bit mix of the viewer ID), so stored sketches
//! never depend on a library's hash changing between releases.

use crate::exact_viewers::{self, Exact};
use std::collections::HashMap;

/// One hour in milliseconds: hours are `[h, h + HOUR_MS)` with `h` a multiple of this (UTC).
pub const HOUR_MS: u64 = 3_600_000;
/// Register index bits.
pub const PRECISION: u32 = 14;
/// Registers in a sketch (2^14).
pub const REGISTERS: usize = 1 << PRECISION;

const SPARSE: u8 = 1;
const DENSE: u8 = 2;
const EXACT: u8 = 3;
/// Fixed seed of the viewer hash (stored sketches depend on it: never change it).
const SEED: u64 = 0x6c69_6b65_7769_7365;

/// The hour `ts_ms` falls in (its start, milliseconds since the Unix epoch).
pub fn hour_of(ts_ms: u64) -> u64 {
    ts_ms - ts_ms % HOUR_MS
}

/// A stored sketch could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unreadable hourly view sketch: {0}")]
pub struct SketchError(&'static str);

/// A viewer's 64-bit hash.
fn hash(viewer: u64) -> u64 {
    // splitmix64's finaliser over the seeded ID: every input bit moves every output bit.
    let mut z = viewer ^ SEED;
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The register a viewer hash lands in and the rank it offers there (1 + leading zeros of
/// the remaining hash bits).
fn observe(z: u64) -> (u16, u8) {
    let index = (z >> (64 - PRECISION)) as u16;
    // The low 50 bits, with a guard bit so the rank is at most 51.
    let rest = (z << PRECISION) | (1 << (PRECISION - 1));
    (index, rest.leading_zeros() as u8 + 1)
}

/// An in-memory sketch of one post-hour: the registers viewers reached, and their hashes
/// while few.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HourSketch {
    registers: HashMap<u16, u8>,
    exact: Exact,
}

impl HourSketch {
    /// Count a view by `viewer` (the same viewer twice changes nothing).
    pub fn insert(&mut self, viewer: u64) {
        self.insert_hash(hash(viewer));
    }

    fn insert_hash(&mut self, z: u64) {
        let (i, r) = observe(z);
        let slot = self.registers.entry(i).or_insert(0);
        *slot = (*slot).max(r);
        self.exact.insert(z);
        self.drop_floor();
    }

    /// The hourly stored forms keep no floor (`exact_viewers`): past the bound an hour's count
    /// is the registers' estimate, the same in memory as once stored.
    fn drop_floor(&mut self) {
        if self.exact.count().is_none() {
            self.exact = Exact::lost();
        }
    }

    /// Fold another sketch in (union).
    pub fn merge_from(&mut self, other: &HourSketch) {
        for (&i, &r) in &other.registers {
            let slot = self.registers.entry(i).or_insert(0);
            *slot = (*slot).max(r);
        }
        self.exact.merge_from(&other.exact);
        self.drop_floor();
    }

    /// The stored form: exact while the viewers are known, else sparse while smaller, else
    /// dense.
    pub fn encode(&self) -> Vec<u8> {
        if let Some(set) = self.exact.hashes() {
            return exact_viewers::encode(EXACT, set);
        }
        let mut regs: Vec<(u16, u8)> = self.registers.iter().map(|(i, r)| (*i, *r)).collect();
        regs.sort_unstable();
        encode_sorted(&regs)
    }

    /// Read a stored form back.
    pub fn decode(bytes: &[u8]) -> Result<HourSketch, SketchError> {
        if let Some((&EXACT, body)) = bytes.split_first() {
            let mut s = HourSketch::default();
            for z in exact_viewers::decode(body).map_err(SketchError)? {
                s.insert_hash(z);
            }
            return Ok(s);
        }
        let mut registers = HashMap::new();
        for_each_register(bytes, |i, r| {
            registers.insert(i, r);
        })?;
        Ok(HourSketch { registers, exact: Exact::lost() })
    }

    /// Distinct viewers: exact while they are known, else estimated.
    pub fn estimate(&self) -> u64 {
        self.exact
            .count()
            .unwrap_or_else(|| estimate_registers(self.registers.len(), self.registers.values().copied()))
    }
}

fn encode_sorted(regs: &[(u16, u8)]) -> Vec<u8> {
    if regs.len() * 3 < REGISTERS {
        let mut out = Vec::with_capacity(1 + regs.len() * 3);
        out.push(SPARSE);
        for (i, r) in regs {
            out.extend_from_slice(&i.to_be_bytes());
            out.push(*r);
        }
        out
    } else {
        let mut out = vec![0u8; 1 + REGISTERS];
        out[0] = DENSE;
        for (i, r) in regs {
            out[1 + usize::from(*i)] = *r;
        }
        out
    }
}

/// Visit the non-zero registers of a stored sketch.
fn for_each_register(bytes: &[u8], mut f: impl FnMut(u16, u8)) -> Result<(), SketchError> {
    match bytes.split_first() {
        Some((&SPARSE, body)) => {
            if body.len() % 3 != 0 {
                return Err(SketchError("sparse body not a multiple of 3 bytes"));
            }
            for c in body.chunks_exact(3) {
                let i = u16::from_be_bytes([c[0], c[1]]);
                if usize::from(i) >= REGISTERS || c[2] == 0 || c[2] > 64 {
                    return Err(SketchError("register out of range"));
                }
                f(i, c[2]);
            }
            Ok(())
        }
        Some((&DENSE, body)) => {
            if body.len() != REGISTERS {
                return Err(SketchError("dense body of the wrong length"));
            }
            for (i, &r) in body.iter().enumerate() {
                if r > 64 {
                    return Err(SketchError("register out of range"));
                }
                if r > 0 {
                    f(i as u16, r);
                }
            }
            Ok(())
        }
        _ => Err(SketchError("unknown format")),
    }
}

/// The union of two stored sketches, stored form (what a store writes back when a post-hour
/// it already holds is saved again).
pub fn merge(a: &[u8], b: &[u8]) -> Result<Vec<u8>, SketchError> {
    let mut s = HourSketch::decode(a)?;
    s.merge_from(&HourSketch::decode(b)?);
    Ok(s.encode())
}

/// Estimated distinct viewers of a stored sketch.
pub fn estimate(bytes: &[u8]) -> Result<u64, SketchError> {
    if let Some((&EXACT, body)) = bytes.split_first() {
        return Ok(exact_viewers::decode(body).map_err(SketchError)?.len() as u64);
    }
    let mut set = 0usize;
    let mut ranks = Vec::new();
    for_each_register(bytes, |_, r| {
        set += 1;
        ranks.push(r);
    })?;
    Ok(estimate_registers(set, ranks.into_iter()))
}

/// The HyperLogLog estimate from the non-zero registers (the others are zero): the harmonic
/// mean estimate, with linear counting while it is below 2.5 m and registers are empty.
fn estimate_registers(non_zero: usize, ranks: impl Iterator<Item = u8>) -> u64 {
    if non_zero == 0 {
        return 0;
    }
    let m = REGISTERS as f64;
    let zeros = REGISTERS - non_zero;
    let sum: f64 = zeros as f64 + ranks.map(|r| 2f64.powi(-i32::from(r))).sum::<f64>();
    let alpha = 0.7213 / (1.0 + 1.079 / m);
    let raw = alpha * m * m / sum;
    let e = if raw <= 2.5 * m && zeros > 0 { m * (m / zeros as f64).ln() } else { raw };
    viewers_from_estimate(e)
}

/// A sketch's estimate as a whole number of viewers: the nearest one. Every unique-viewer
/// figure (the author's insights and the analytics export) goes through this one rounding; a
/// truncation would turn an estimate of 0.9999 for one viewer into 0.
pub fn viewers_from_estimate(estimate: f64) -> u64 {
    // `as` saturates: a negative or NaN estimate gives 0.
    estimate.round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sketch(ids: impl Iterator<Item = u64>) -> HourSketch {
        let mut s = HourSketch::default();
        for id in ids {
            s.insert(id);
        }
        s
    }

    #[test]
    fn hours_are_truncated_utc_hours() {
        assert_eq!(hour_of(0), 0);
        assert_eq!(hour_of(HOUR_MS - 1), 0);
        assert_eq!(hour_of(5 * HOUR_MS + 17), 5 * HOUR_MS);
    }

    #[test]
    fn estimates_stay_within_three_percent_from_one_to_a_million() {
        for n in [1u64, 2, 10, 100, 1_000, 10_000, 100_000, 1_000_000] {
            let s = sketch(1_000..1_000 + n);
            let e = estimate(&s.encode()).expect("estimate") as f64;
            assert_eq!(e as u64, s.estimate());
            let err = (e - n as f64).abs() / n as f64;
            assert!(err < 0.03, "{n}: {e}");
        }
        assert_eq!(HourSketch::default().estimate(), 0);
    }

    #[test]
    fn small_sketches_are_exact_larger_ones_sparse_then_dense_and_all_round_trip() {
        let small = sketch(0..10);
        let enc = small.encode();
        assert_eq!(enc[0], EXACT);
        assert_eq!(enc.len(), 1 + 8 * 10);
        assert_eq!(HourSketch::decode(&enc).expect("decode"), small);
        let mid = sketch(0..2_000);
        let enc = mid.encode();
        assert_eq!(enc[0], SPARSE);
        assert_eq!(HourSketch::decode(&enc).expect("decode"), mid);
        let big = sketch(0..50_000);
        let enc = big.encode();
        assert_eq!(enc[0], DENSE);
        assert_eq!(enc.len(), 1 + REGISTERS);
        assert_eq!(HourSketch::decode(&enc).expect("decode"), big);
    }

    #[test]
    fn small_counts_are_exact_even_when_viewers_share_a_register() {
        let n = exact_viewers::EXACT_MAX as u64;
        let mut s = HourSketch::default();
        let mut shared = 0;
        for id in 1..=n {
            s.insert(id);
            assert_eq!(s.estimate(), id, "after {id} viewers");
            assert_eq!(estimate(&s.encode()).expect("estimate"), id, "stored, after {id} viewers");
            shared = id - s.registers.len() as u64;
        }
        assert!(shared > 0, "some of the viewers share a register (else this test shows nothing)");
        // Users 22 and 101 on one post-hour count as two.
        assert_eq!(sketch([22, 101].into_iter()).estimate(), 2);
        // Past the bound the registers estimate.
        s.insert(n + 1);
        assert_eq!(s.encode()[0], SPARSE);
    }

    #[test]
    fn merged_hours_stay_exact_while_small() {
        // Flushes of one post-hour, and the hours of a range, merge to the exact union.
        let a = sketch(1..=15).encode();
        let b = sketch(10..=40).encode();
        let ab = merge(&a, &b).expect("merge");
        assert_eq!(estimate(&ab).expect("estimate"), 40);
        assert_eq!(merge(&ab, &b).expect("again"), ab, "idempotent");
        let mut range = HourSketch::default();
        for h in 0..24u64 {
            range.merge_from(&HourSketch::decode(&sketch(h * 5..h * 5 + 20).encode()).expect("decode"));
        }
        assert_eq!(range.estimate(), 23 * 5 + 20);
    }

    #[test]
    fn register_only_values_stored_before_the_exact_form_still_read() {
        // A SPARSE value as stored before: 10 viewers' registers, no hashes.
        let s = sketch(0..10);
        let mut regs: Vec<(u16, u8)> = s.registers.iter().map(|(i, r)| (*i, *r)).collect();
        regs.sort_unstable();
        let old = encode_sorted(&regs);
        assert_eq!(old[0], SPARSE);
        let read = HourSketch::decode(&old).expect("decode");
        assert_eq!(read.estimate(), 10);
        assert_eq!(read.encode(), old, "still registers only");
        // Merged with an exact value, the union is registers only, holding both.
        let merged = merge(&old, &sketch(10..20).encode()).expect("merge");
        assert_eq!(merged[0], SPARSE);
        assert_eq!(estimate(&merged).expect("estimate"), 20);
    }

    #[test]
    fn merging_is_the_union_and_idempotent() {
        let a = sketch(0..3_000).encode();
        let b = sketch(2_000..5_000).encode();
        let ab = merge(&a, &b).expect("merge");
        assert_eq!(ab, sketch(0..5_000).encode());
        assert_eq!(merge(&ab, &b).expect("again"), ab);
        assert!(merge(&a, &[9, 1]).is_err());
        assert!(HourSketch::decode(&[SPARSE, 0xff, 0xff, 1]).is_err());
        assert!(HourSketch::decode(&[EXACT, 0, 1]).is_err());
        assert!(HourSketch::decode(&[]).is_err());
    }
}
