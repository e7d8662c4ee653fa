//! A viewer's liked set in Redis, shared by every API node: what answers "has this viewer
//! liked these posts?" for the posts their own recent writes do not.
//!
//! Without it, every page whose posts have no own-likes record costs a `liked_among` read of
//! the reverse index on the viewer's shard. With it, a warm viewer's page reads no
//! PostgreSQL at all: the set is exact (a hash whose fields are the liked IDs), so a post
//! in it is liked and one not in it is not, as of its build.
//!
//! - **Built where a read is needed anyway.** A page that must ask the reverse index and
//!   finds no fresh set reads the viewer's whole liked set (`liked_ids`, at most
//!   `liked_filter_max + 1` IDs) instead, answers the page from it, and stores it
//!   (`<prefix>:ls:{<kind>:<user>}`, written under a temporary name and renamed, so a reader
//!   never sees half a set), so the first page costs the one read it cost before and the
//!   pages after it, on any node, none. A viewer with more likes than the cap is stored as
//!   "too many" and read per page, as before. A page reads the header and its posts' fields
//!   in one `HMGET`, in the pipeline of its own-likes read.
//! - **Kept by the viewer's own writes.** Their likes and unlikes after the build are
//!   own-likes records, which a read consults first, on every node.
//! - **Why it is never wrong.** The set is the reverse index as of its build time T, and
//!   the reverse index trails the commits by the stream's lag. A read at time R trusts it
//!   only while R - T <= `width / 2` (`width`: the own-likes bucket width, 10 min by
//!   default). Every change committed after T - lag has an own-likes record, which a read
//!   consults first and which lives at least `width - skew` after its commit; so nothing the
//!   set misses goes unanswered while the stream lags by less than `width / 2 - skew`
//!   (about 5 min by default). After that the next page that needs it builds it again.
//! - **When records go missing.** A records server that restarts empty breaks "every change
//!   has a record". Its shard keeps the time since which it has kept records (`likes.rs`,
//!   `since_key`, lost with them): a set is trusted, and built, only from two skews after
//!   that time, when the reverse index holds every commit whose record the restart lost.
//! - **Format**, versioned so that a node of another build treats a set it cannot read as
//!   absent: field `h` is the header, version (1 byte), kind (1: set, 2: too many), 6 bytes
//!   unused, build time (ms, 8 bytes, little endian); every other field is a liked ID
//!   (decimal) with the value `1`.

use likewise_core::ids::UserId;
use likewise_core::like::TargetKind;

const VERSION: u8 = 2;
const SET: u8 = 1;
const TOO_MANY: u8 = 2;
const HEADER: usize = 16;

/// The header's field.
pub(super) const HEADER_FIELD: &str = "h";

/// A stored set's header, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shared {
    /// The liked set as of `built_at` (its fields answer).
    Set { built_at: u64 },
    /// More likes than the cap as of `built_at`: read the reverse index.
    TooMany { built_at: u64 },
}

impl Shared {
    /// Still trusted at `now` (see the module docs).
    pub(super) fn fresh(&self, now: u64, trust_ms: u64) -> bool {
        let b = self.built_at();
        now >= b && now - b <= trust_ms
    }

    /// When it was built (ms, by the building node's clock).
    pub(super) fn built_at(&self) -> u64 {
        let (Shared::Set { built_at } | Shared::TooMany { built_at }) = self;
        *built_at
    }
}

/// The key of a viewer's set of targets of `kind` (a hash tag, so its temporary name is on
/// the same server).
pub(super) fn key(prefix: &str, user: UserId, kind: TargetKind) -> String {
    format!("{prefix}:ls:{{{}:{}}}", kind.code(), user.0)
}

/// The header of a set (`too_many`: of "more likes than the cap") built at `built_at`.
pub(super) fn encode_header(too_many: bool, built_at: u64) -> Vec<u8> {
    let mut out = vec![VERSION, if too_many { TOO_MANY } else { SET }, 0, 0, 0, 0, 0, 0];
    out.extend_from_slice(&built_at.to_le_bytes());
    out
}

/// Decode a stored header; `None` for anything this build cannot read.
pub(super) fn decode(bytes: &[u8]) -> Option<Shared> {
    if bytes.len() != HEADER || bytes[0] != VERSION {
        return None;
    }
    let built_at = u64::from_le_bytes(bytes[8..16].try_into().ok()?);
    match bytes[1] {
        SET => Some(Shared::Set { built_at }),
        TOO_MANY => Some(Shared::TooMany { built_at }),
        _ => None,
    }
}

/// Commands storing `ids` (or "too many") as the set at `key`, trusted for `ttl_ms`: written
/// under a temporary name and renamed over the old one, so a reader sees the old set or the
/// new one, never a part.
pub(super) fn store(key: &str, ids: Option<&[u64]>, built_at: u64, ttl_ms: u64) -> Vec<redis::Cmd> {
    let tmp = format!("{key}:b{:016x}", rand::random::<u64>());
    let mut hset = redis::cmd("HSET");
    hset.arg(&tmp).arg(HEADER_FIELD).arg(encode_header(ids.is_none(), built_at));
    for id in ids.unwrap_or_default() {
        hset.arg(id).arg(1);
    }
    vec![
        hset,
        redis::cmd("PEXPIRE").arg(&tmp).arg(ttl_ms.max(1)).clone(),
        redis::cmd("RENAME").arg(&tmp).arg(key).clone(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_round_trips_and_ages() {
        let f = decode(&encode_header(false, 42)).expect("decodes");
        assert_eq!(f, Shared::Set { built_at: 42 });
        assert!(f.fresh(42, 0) && f.fresh(1_042, 1_000) && !f.fresh(1_043, 1_000) && !f.fresh(41, 1_000));
        let many = decode(&encode_header(true, 7)).expect("decodes");
        assert!(matches!(many, Shared::TooMany { built_at: 7 }) && many.fresh(7, 0));
    }

    #[test]
    fn what_this_build_cannot_read_is_absent() {
        let mut other = encode_header(false, 5);
        other[0] = 1;
        assert!(decode(&other).is_none(), "the Bloom filters of version 1");
        assert!(decode(&[]).is_none() && decode(&encode_header(false, 5)[..12]).is_none(), "truncated");
        let mut kind = encode_header(false, 5);
        kind[1] = 9;
        assert!(decode(&kind).is_none());
    }
}
