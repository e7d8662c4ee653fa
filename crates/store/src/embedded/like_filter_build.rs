//! Filling the like filter (`like_filter.rs`) with the keys stored at open, beside the
//! running store.

use super::state::Inner;
use std::ops::Bound;
use std::sync::Weak;
use std::time::Instant;

/// Keys the build reads per hold of the store.
const CHUNK: usize = 1 << 14;

/// Insert every stored `user_likes` key, on a thread of its own, then let the filter answer.
///
/// The scan reads the live keyspace in chunks, holding the store only for one chunk at a
/// time, so dropping the store (and reopening its directory) is never held up for long. It
/// needs no snapshot: a row stored when the build starts is either still there when its
/// chunk is read, or was removed (and, if stored again, inserted by the write path).
/// Gives up, leaving every answer "maybe", if the store is dropped meanwhile or a read fails.
pub(super) fn spawn_build(inner: Weak<Inner>) {
    let spawned = std::thread::Builder::new().name("likewise-likefilter".into()).spawn(move || {
        let started = Instant::now();
        let mut after: Option<Vec<u8>> = None;
        let mut n = 0u64;
        loop {
            let Some(s) = inner.upgrade() else { return };
            let range = match &after {
                None => s.user_likes.range::<&[u8], _>(..),
                Some(k) => s.user_likes.range::<&[u8], _>((Bound::Excluded(&k[..]), Bound::Unbounded)),
            };
            let (mut read, mut last) = (0, None);
            for guard in range.take(CHUNK) {
                let key = match guard.key() {
                    Ok(k) => k,
                    Err(e) => {
                        tracing::warn!(error = %e, "building the like filter failed; every like reads the store");
                        return;
                    }
                };
                read += 1;
                if let Ok(k) = <[u8; 17]>::try_from(&key[..]) {
                    s.like_filter.insert(&k);
                }
                last = Some(key);
            }
            n += read as u64;
            after = last.map(|k| k.to_vec());
            if read < CHUNK {
                s.like_filter.mark_ready();
                let secs = started.elapsed().as_secs_f64();
                metrics::gauge!("likewise_store_like_filter_build_seconds").set(secs);
                tracing::info!(keys = n, seconds = secs, bytes = s.like_filter.bytes(), "like filter built");
                return;
            }
        }
    });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "could not start the like filter build; every like reads the store");
    }
}
