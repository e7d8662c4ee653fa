//! Unique viewers per post and UTC hour: a HyperLogLog sketch of each (post, hour) that had
//! views, kept beside the per-post sketch (`likewise_service::views`) for the analytics
//! export.
//!
//! Precision 14 (16,384 registers, about 0.8% standard error), like the per-post sketch. Most
//! post-hours have few viewers, so a sketch is stored SPARSE (only its non-zero registers, 3
//! bytes each) while that is smaller than the dense form, and DENSE (one byte per register)
//! beyond: a post-hour with 10 viewers takes 31 bytes, a viral one at most 16 KiB + 1. Sketches
//! of the same post-hour from several flushes or nodes merge by the register-wise maximum
//! ([`merge`]), which is their union: merging is idempotent, so a retried save changes nothing.
//!
//! The hash is this module's own (a fixed 64-bit mix of the viewer ID), so stored sketches
//! never depend on a library's hash changing between releases.

use std::collections::HashMap;

/// One hour in milliseconds: hours are `[h, h + HOUR_MS)` with `h` a multiple of this (UTC).
pub const HOUR_MS: u64 = 3_600_000;
/// Register index bits.
pub const PRECISION: u32 = 14;
/// Registers in a sketch (2^14).
pub const REGISTERS: usize = 1 << PRECISION;

const SPARSE: u8 = 1;
const DENSE: u8 = 2;
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

/// The register a viewer lands in and the rank it offers there (1 + leading zeros of the
/// remaining hash bits).
fn observe(viewer: u64) -> (u16, u8) {
    // splitmix64's finaliser over the seeded ID: every input bit moves every output bit.
    let mut z = viewer ^ SEED;
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    let index = (z >> (64 - PRECISION)) as u16;
    // The low 50 bits, with a guard bit so the rank is at most 51.
    let rest = (z << PRECISION) | (1 << (PRECISION - 1));
    (index, rest.leading_zeros() as u8 + 1)
}

/// An in-memory sketch of one post-hour: only the registers viewers reached.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HourSketch {
    registers: HashMap<u16, u8>,
}

impl HourSketch {
    /// Count a view by `viewer` (the same viewer twice changes nothing).
    pub fn insert(&mut self, viewer: u64) {
        let (i, r) = observe(viewer);
        let slot = self.registers.entry(i).or_insert(0);
        *slot = (*slot).max(r);
    }

    /// Fold another sketch in (union).
    pub fn merge_from(&mut self, other: &HourSketch) {
        for (&i, &r) in &other.registers {
            let slot = self.registers.entry(i).or_insert(0);
            *slot = (*slot).max(r);
        }
    }

    /// The stored form: sparse while smaller, else dense.
    pub fn encode(&self) -> Vec<u8> {
        let mut regs: Vec<(u16, u8)> = self.registers.iter().map(|(i, r)| (*i, *r)).collect();
        regs.sort_unstable();
        encode_sorted(&regs)
    }

    /// Read a stored form back.
    pub fn decode(bytes: &[u8]) -> Result<HourSketch, SketchError> {
        let mut registers = HashMap::new();
        for_each_register(bytes, |i, r| {
            registers.insert(i, r);
        })?;
        Ok(HourSketch { registers })
    }

    /// Estimated distinct viewers.
    pub fn estimate(&self) -> u64 {
        estimate_registers(self.registers.len(), self.registers.values().copied())
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
    fn small_sketches_are_sparse_and_large_ones_dense_and_both_round_trip() {
        let small = sketch(0..10);
        let enc = small.encode();
        assert_eq!(enc[0], SPARSE);
        assert_eq!(enc.len(), 1 + 3 * 10);
        assert_eq!(HourSketch::decode(&enc).expect("decode"), small);
        let big = sketch(0..50_000);
        let enc = big.encode();
        assert_eq!(enc[0], DENSE);
        assert_eq!(enc.len(), 1 + REGISTERS);
        assert_eq!(HourSketch::decode(&enc).expect("decode"), big);
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
        assert!(HourSketch::decode(&[]).is_err());
    }
}
