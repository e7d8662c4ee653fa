//! Key layouts of the embedded engine. All integers are big-endian so byte order is numeric
//! order and prefix scans walk one partition (one post's likers, one user's likes).
//!
//! | keyspace        | key                                   | value            |
//! |-----------------|---------------------------------------|------------------|
//! | `user_likes`    | user(8) kind(1) target(8)             | v1 ts(8)         |
//! | `liker_pages`   | kind(1) target(8) ts_max(8) page(8)   | v2 w(1) (ts_max-ts(1) user(w))* |
//! | `events`        | first seq(8)                          | events v2, packed|
//! | `counters`      | kind(1) target(8) field(1)            | v1 i64           |
//! | `offsets`       | consumer name                         | v1 u64           |
//! | `posts`         | post(8)                               | PostMeta v1      |
//! | `users`         | user(8)                               | UserProfile v1   |
//! | `follows`       | follower(8) followee(8)               | (empty)          |
//! | `followers`     | followee(8) follower(8)               | (empty)          |
//! | `settings`      | user(8)                               | ViewerSettings v1|

use likewise_core::counter::CounterKey;
use likewise_core::ids::UserId;
use likewise_core::like::{Target, TargetKind};
use likewise_core::{StoreError, StoreResult};

/// Format version byte of the small value records of this module.
pub const V1: u8 = 1;

/// Prefix of all `liker_pages` keys of one target.
pub fn target_prefix(t: Target) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = t.kind.code();
    k[1..9].copy_from_slice(&t.id.to_be_bytes());
    k
}

/// `user_likes` key.
pub fn user_like_key(user: UserId, kind: TargetKind, id: u64) -> [u8; 17] {
    let mut k = [0u8; 17];
    k[0..8].copy_from_slice(&user.0.to_be_bytes());
    k[8] = kind.code();
    k[9..17].copy_from_slice(&id.to_be_bytes());
    k
}

/// Prefix of one user's likes of one kind.
pub fn user_kind_prefix(user: UserId, kind: TargetKind) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0..8].copy_from_slice(&user.0.to_be_bytes());
    k[8] = kind.code();
    k
}

/// Key of the per-like likers rows of earlier versions (`likers` keyspace), which the
/// embedded store converts into pages when it opens one (`embedded/liker_pages.rs`). Only
/// tests write that format now, to check the conversion.
#[cfg(test)]
pub fn liker_key(t: Target, ts_ms: u64, user: UserId) -> [u8; 25] {
    let mut k = [0u8; 25];
    k[0..9].copy_from_slice(&target_prefix(t));
    k[9..17].copy_from_slice(&ts_ms.to_be_bytes());
    k[17..25].copy_from_slice(&user.0.to_be_bytes());
    k
}

/// `counters` key.
pub fn counter_key(c: CounterKey) -> [u8; 10] {
    let mut k = [0u8; 10];
    k[0..9].copy_from_slice(&target_prefix(c.target));
    k[9] = c.field.code();
    k
}

/// Two 8-byte IDs back to back (`follows`, `followers`).
pub fn pair_key(a: u64, b: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[0..8].copy_from_slice(&a.to_be_bytes());
    k[8..16].copy_from_slice(&b.to_be_bytes());
    k
}

/// Read a big-endian u64 at `at`.
pub fn be_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

/// A versioned 8-byte number value (timestamps, counters, offsets).
pub fn num_value(v: u64) -> [u8; 9] {
    let mut b = [0u8; 9];
    b[0] = V1;
    b[1..9].copy_from_slice(&v.to_be_bytes());
    b
}

/// Parse a [`num_value`].
pub fn parse_num(keyspace: &'static str, b: &[u8]) -> StoreResult<u64> {
    if b.len() != 9 || b[0] != V1 {
        return Err(StoreError::Corrupt {
            keyspace,
            detail: format!("bad number record of {} bytes", b.len()),
        });
    }
    Ok(be_u64(b, 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn liker_keys_sort_by_target_first() {
        let a = liker_key(Target::post(1), u64::MAX, UserId(u64::MAX));
        let b = liker_key(Target::post(2), 0, UserId(0));
        assert!(a < b);
        assert!(a.starts_with(&target_prefix(Target::post(1))));
        assert!(!a.starts_with(&target_prefix(Target::comment(1))));
    }

    #[test]
    fn liker_keys_sort_by_time() {
        let t = Target::post(9);
        assert!(liker_key(t, 5, UserId(100)) < liker_key(t, 6, UserId(1)));
    }

    #[test]
    fn numbers_round_trip_and_reject_garbage() {
        assert_eq!(parse_num("x", &num_value(77)).ok(), Some(77));
        assert!(parse_num("x", &[1, 2, 3]).is_err());
    }
}
