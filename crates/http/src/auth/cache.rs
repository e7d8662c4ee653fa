//! Tokens already verified, with who they name, until when, and under which generation of
//! the identity provider's key set.
//!
//! A client sends the same token with every request, and checking the signature (base64,
//! JSON, HMAC-SHA256, or an RSA/ECDSA/Ed25519 verification for tokens from the identity
//! provider) is a visible share of a request's CPU cost; a hit only hashes the token and
//! compares two numbers. Keyed by the whole token string, so only a byte-identical token can
//! hit. An entry counts only under the key-set generation it was verified with: when the
//! JWKS file changes, every entry stops counting at once, and a token signed by a removed key
//! is verified again (and refused).

use super::Caller;
use likewise_service::cache::Usage;
use std::collections::HashMap;
use std::collections::hash_map::RandomState;

/// One entry: the caller, the last second it is valid, the key-set generation.
type Entry = (Caller, u64, u64);

type Shard = parking_lot::Mutex<HashMap<Box<str>, Entry>>;

pub(super) struct VerifiedTokens {
    shards: Vec<Shard>,
    per_shard: usize,
    hasher: RandomState,
}

impl VerifiedTokens {
    /// A cache of about `capacity` tokens.
    pub(super) fn new(capacity: usize) -> Self {
        const SHARDS: usize = 16;
        VerifiedTokens {
            shards: (0..SHARDS).map(|_| parking_lot::Mutex::new(HashMap::new())).collect(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
            hasher: RandomState::new(),
        }
    }

    fn shard(&self, token: &str) -> &Shard {
        use std::hash::BuildHasher;
        &self.shards[(self.hasher.hash_one(token) as usize) % self.shards.len()]
    }

    /// The caller `token` names, if it was verified under `generation` and is still valid at
    /// `now` (seconds since the Unix epoch). An entry past its time or from another
    /// generation is dropped.
    pub(super) fn get(&self, token: &str, now: u64, generation: u64) -> Option<Caller> {
        let mut shard = self.shard(token).lock();
        match shard.get(token) {
            Some((c, until, g)) if *until >= now && *g == generation => Some(*c),
            Some(_) => {
                shard.remove(token);
                None
            }
            None => None,
        }
    }

    /// Remember that `token`, verified under `generation`, names `caller` until `until`.
    pub(super) fn put(&self, token: &str, caller: Caller, until: u64, generation: u64) {
        let mut shard = self.shard(token).lock();
        if shard.len() >= self.per_shard {
            // Crude but bounded: a full shard starts over (verifying again is always right).
            shard.clear();
        }
        shard.insert(token.into(), (caller, until, generation));
    }

    /// Entries, capacity and estimated bytes (tables plus each token's text).
    pub(super) fn usage(&self) -> Usage {
        use likewise_service::cache::table_bytes;
        let entry = std::mem::size_of::<(Box<str>, Entry)>();
        let (mut entries, mut bytes) = (0, 0);
        for s in &self.shards {
            let s = s.lock();
            entries += s.len();
            bytes += table_bytes(s.capacity(), entry) + s.keys().map(|k| k.len()).sum::<usize>();
        }
        Usage { cache: "verified_tokens", entries, capacity: self.per_shard * self.shards.len(), bytes }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use likewise_core::ids::UserId;

    #[test]
    fn an_entry_counts_only_until_its_time_and_under_its_generation() {
        let cache = VerifiedTokens::new(100);
        let c = Caller { user: UserId(3), service: false, expires_at: 100 };
        cache.put("t", c, 105, 7);
        assert_eq!(cache.get("t", 105, 7).map(|c| c.user), Some(UserId(3)));
        assert!(cache.get("t", 105, 8).is_none(), "another generation");
        assert!(cache.get("t", 105, 7).is_none(), "dropped once seen under another generation");
        cache.put("t", c, 105, 7);
        assert!(cache.get("t", 106, 7).is_none(), "past its time");
        assert!(cache.get("u", 0, 7).is_none());
    }
}
