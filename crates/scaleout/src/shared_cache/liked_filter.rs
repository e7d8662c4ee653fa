//! A viewer's liked set as a Bloom filter in Redis, shared by every API node: the negative
//! cache of "has this viewer liked these posts?".
//!
//! Most posts on a feed page are not liked by its viewer. Without a filter, every page whose
//! posts have no own-likes record costs a `liked_among` read of the reverse index on the
//! viewer's shard. With one, a "no" from the filter is final and only "maybe" (a like, or a
//! 1% false positive) is read.
//!
//! - **Built where a read is needed anyway.** A page that must ask the reverse index and
//!   finds no fresh filter reads the viewer's whole liked set (`liked_ids`, at most
//!   `liked_filter_max + 1` IDs) instead, answers the page from it, and stores the filter
//!   (`<prefix>:lf:<kind>:<user>`), so the first page costs the one read it cost before and
//!   the pages after it, on any node, none. A viewer with more likes than the cap is stored
//!   as "too many" and read per page, as before.
//! - **Why it is never wrong.** The filter is the reverse index as of its build time T, and
//!   the reverse index trails the commits by the stream's lag. A read at time R trusts it
//!   only while R - T <= `width / 2` (`width`: the own-likes bucket width, 10 min by
//!   default). Every change committed after T - lag has an own-likes record, which a read
//!   consults first and which lives at least `width - skew` after its commit; so nothing the
//!   filter misses goes unanswered while the stream lags by less than `width / 2 - skew`
//!   (about 5 min by default). An unlike after T is answered by its record, and a post the
//!   filter holds that was unliked before T is a "maybe" the reverse index answers.
//! - **When records go missing.** A records server that restarts empty breaks "every change
//!   has a record". Its shard keeps the time since which it has kept records (`likes.rs`,
//!   `since_key`, lost with them): a filter is trusted, and built, only from two skews after
//!   that time, when the reverse index holds every commit whose record the restart lost.
//! - **Format**, versioned so that a node of another build treats a filter it cannot read as
//!   absent: version (1 byte), kind (1: filter, 2: too many), hash count (1), 5 bytes unused,
//!   build time (ms, 8 bytes, little endian), then the filter's 64-bit words (little endian).
//!   Positions come from a fixed hash of the ID, so every node reads every node's filter.

use fastbloom::BloomFilter;
use likewise_core::ids::UserId;
use likewise_core::like::TargetKind;

const VERSION: u8 = 1;
const FILTER: u8 = 1;
const TOO_MANY: u8 = 2;
const HEADER: usize = 16;

/// The false-positive rate a filter is sized for.
const FALSE_POSITIVES: f64 = 0.01;

/// A stored filter, decoded.
pub(super) enum Shared {
    /// The liked set as of `built_at`.
    Filter { bloom: BloomFilter, built_at: u64 },
    /// More likes than the cap as of `built_at`: read the reverse index.
    TooMany { built_at: u64 },
}

impl Shared {
    /// Still trusted at `now` (see the module docs).
    pub(super) fn fresh(&self, now: u64, trust_ms: u64) -> bool {
        let (Shared::Filter { built_at, .. } | Shared::TooMany { built_at }) = self;
        now >= *built_at && now - *built_at <= trust_ms
    }

    /// When it was built (ms, by the building node's clock).
    pub(super) fn built_at(&self) -> u64 {
        let (Shared::Filter { built_at, .. } | Shared::TooMany { built_at }) = self;
        *built_at
    }

    /// Whether `id` may be in the set ("no" is final).
    pub(super) fn may_contain(&self, id: u64) -> bool {
        match self {
            Shared::Filter { bloom, .. } => bloom.contains_hash(position_hash(id)),
            Shared::TooMany { .. } => true,
        }
    }
}

/// The key of a viewer's filter of targets of `kind`.
pub(super) fn key(prefix: &str, user: UserId, kind: TargetKind) -> String {
    format!("{prefix}:lf:{}:{}", kind.code(), user.0)
}

/// A fixed mix of the ID (splitmix64's finaliser): the same positions on every node.
fn position_hash(id: u64) -> u64 {
    let mut z = id.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn header(kind: u8, hashes: u8, built_at: u64) -> Vec<u8> {
    let mut out = vec![VERSION, kind, hashes, 0, 0, 0, 0, 0];
    out.extend_from_slice(&built_at.to_le_bytes());
    out
}

/// The stored form of the set `ids`, built at `built_at`.
pub(super) fn encode_filter(ids: &[u64], built_at: u64) -> Vec<u8> {
    let mut bloom = BloomFilter::with_false_pos(FALSE_POSITIVES).expected_items(ids.len().max(64));
    for id in ids {
        bloom.insert_hash(position_hash(*id));
    }
    let mut out = header(FILTER, bloom.num_hashes() as u8, built_at);
    out.reserve(bloom.as_slice().len() * 8);
    for w in bloom.as_slice() {
        out.extend_from_slice(&w.to_le_bytes());
    }
    out
}

/// The stored form of "more likes than the cap".
pub(super) fn encode_too_many(built_at: u64) -> Vec<u8> {
    header(TOO_MANY, 0, built_at)
}

/// Decode a stored filter; `None` for anything this build cannot read.
pub(super) fn decode(bytes: &[u8]) -> Option<Shared> {
    if bytes.len() < HEADER || bytes[0] != VERSION {
        return None;
    }
    let built_at = u64::from_le_bytes(bytes[8..16].try_into().ok()?);
    match bytes[1] {
        TOO_MANY => Some(Shared::TooMany { built_at }),
        FILTER => {
            let body = &bytes[HEADER..];
            if body.is_empty() || !body.len().is_multiple_of(8) || bytes[2] == 0 {
                return None;
            }
            let words: Vec<u64> =
                body.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
            Some(Shared::Filter { bloom: BloomFilter::from_vec(words).hashes(u32::from(bytes[2])), built_at })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_round_trips_and_says_no_to_most_of_what_it_lacks() {
        let liked: Vec<u64> = (0..1_000u64).map(|i| i * 7_919 + 13).collect();
        let f = decode(&encode_filter(&liked, 42)).expect("decodes");
        assert!(f.fresh(42, 0) && f.fresh(1_042, 1_000) && !f.fresh(1_043, 1_000) && !f.fresh(41, 1_000));
        assert!(liked.iter().all(|id| f.may_contain(*id)), "no false negative");
        let false_pos = (1..=100_000u64).map(|i| i * 7_919 + 14).filter(|id| f.may_contain(*id)).count();
        assert!(false_pos < 2_500, "{false_pos} false positives in 100,000");
        let many = decode(&encode_too_many(7)).expect("decodes");
        assert!(many.may_contain(1) && many.fresh(7, 0));
    }

    #[test]
    fn what_this_build_cannot_read_is_absent() {
        let mut other = encode_filter(&[1, 2, 3], 5);
        other[0] = 2;
        assert!(decode(&other).is_none(), "another version");
        assert!(decode(&[]).is_none() && decode(&encode_filter(&[1], 5)[..20]).is_none(), "truncated");
    }
}
