//! "Has this viewer liked each of these posts?" without a storage read per post.
//!
//! Per viewer we keep:
//! - `recent`: the outcome of the viewer's own recent like/unlike writes, updated
//!   synchronously before the HTTP response (read-your-writes), ordered by commit order so a
//!   late acknowledgement never overwrites a newer state;
//! - a Bloom filter of every post the viewer has liked, built once from the user-keyed index
//!   in the background: a "no" from it is definite (most answers), a "maybe" is checked.
//!
//! Whatever neither answers goes to storage in ONE batched lookup for the whole page.
//! Unlikes cannot be removed from a Bloom filter; they stay "maybe" and cost a lookup.

use super::{SHARDS, shard_of};
use fastbloom::BloomFilter;
use likewise_core::StoreResult;
use likewise_core::ids::{PostId, UserId};
use likewise_core::like::TargetKind;
use likewise_core::ports::LikeReader;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::sync::Arc;

/// Most own writes remembered per viewer.
const RECENT_CAP: usize = 1024;

enum Filter {
    /// Not built yet.
    Absent,
    /// Being built: writes made meanwhile are queued and added when it is installed.
    Building(Vec<u64>),
    /// Built, with room for `room` more inserts before its false-positive rate degrades
    /// (then it is dropped and rebuilt on the next read).
    Ready(BloomFilter, usize),
    /// The viewer has too many likes for a filter to pay off.
    TooMany,
}

struct Entry {
    recent: HashMap<u64, (bool, u64)>,
    filter: Filter,
}

/// The per-viewer liked-set cache.
pub struct ViewerLikes {
    likes: Arc<dyn LikeReader>,
    per_shard: usize,
    bloom_max: usize,
    hasher: RandomState,
    shards: Vec<Mutex<HashMap<UserId, Arc<Mutex<Entry>>>>>,
    counters: super::LookupCounters,
    /// False: no in-process state; every lookup goes to the (shared) store.
    local: bool,
}

enum Answer {
    Yes,
    No,
    Ask,
}

impl ViewerLikes {
    /// A cache for about `capacity` viewers.
    pub fn new(likes: Arc<dyn LikeReader>, capacity: usize, bloom_max: usize, local: bool) -> Self {
        ViewerLikes {
            likes,
            per_shard: capacity.div_ceil(SHARDS).max(1),
            bloom_max,
            hasher: RandomState::new(),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            counters: super::LookupCounters::new("viewer_likes"),
            local,
        }
    }

    /// Entries, capacity and estimated bytes (for `/metrics`).
    pub fn usage(&self) -> super::Usage {
        super::sharded_usage("viewer_likes", &self.shards, self.per_shard, |e| {
            let e = e.lock();
            let filter = match &e.filter {
                Filter::Ready(b, _) => b.num_bits() / 8,
                Filter::Building(v) => v.capacity() * 8,
                Filter::Absent | Filter::TooMany => 0,
            };
            16 + std::mem::size_of::<Mutex<Entry>>()
                + super::table_bytes(e.recent.capacity(), std::mem::size_of::<(u64, (bool, u64))>())
                + filter
        })
    }

    fn entry(&self, user: UserId) -> Arc<Mutex<Entry>> {
        let mut shard = self.shards[shard_of(&self.hasher, &user)].lock();
        if let Some(e) = shard.get(&user) {
            return e.clone();
        }
        if shard.len() >= self.per_shard {
            super::evict_some(&mut shard);
        }
        shard
            .entry(user)
            .or_insert_with(|| Arc::new(Mutex::new(Entry { recent: HashMap::new(), filter: Filter::Absent })))
            .clone()
    }

    /// Record the viewer's own committed write (called before the response is sent).
    ///
    /// Only viewers who have read recently have an entry; for anyone else the next read goes
    /// to storage, which already holds the durable write, so nothing is lost by skipping.
    pub fn record(&self, user: UserId, post: PostId, liked: bool, order: u64) {
        if !self.local {
            return;
        }
        let Some(entry) = self.shards[shard_of(&self.hasher, &user)].lock().get(&user).cloned() else {
            return;
        };
        let mut e = entry.lock();
        match e.recent.get(&post.0) {
            Some((_, o)) if *o > order => return,
            _ => {}
        }
        e.recent.insert(post.0, (liked, order));
        if liked {
            match &mut e.filter {
                Filter::Ready(b, room) => {
                    b.insert(&post.0);
                    *room = room.saturating_sub(1);
                    if *room == 0 {
                        e.filter = Filter::Absent;
                    }
                }
                Filter::Building(pending) => pending.push(post.0),
                Filter::Absent | Filter::TooMany => {}
            }
        }
        if e.recent.len() > RECENT_CAP {
            // Keep the newer half: storage (and the filter) still know the older ones.
            let mut orders: Vec<u64> = e.recent.values().map(|(_, o)| *o).collect();
            orders.sort_unstable();
            let cut = orders[orders.len() / 2];
            e.recent.retain(|_, (_, o)| *o >= cut);
        }
    }

    /// For each post, has `user` liked it? One storage call at most.
    pub async fn liked(self: &Arc<Self>, user: UserId, posts: &[PostId]) -> StoreResult<Vec<bool>> {
        if !self.local {
            let ids: Vec<u64> = posts.iter().map(|p| p.0).collect();
            return self.likes.liked_among(user, TargetKind::Post, &ids).await;
        }
        let entry = self.entry(user);
        let mut answers = Vec::with_capacity(posts.len());
        let mut build = false;
        {
            let mut e = entry.lock();
            for p in posts {
                let a = match e.recent.get(&p.0) {
                    Some((true, _)) => Answer::Yes,
                    Some((false, _)) => Answer::No,
                    None => match &e.filter {
                        Filter::Ready(b, _) if !b.contains(&p.0) => Answer::No,
                        _ => Answer::Ask,
                    },
                };
                answers.push(a);
            }
            if matches!(e.filter, Filter::Absent) {
                e.filter = Filter::Building(Vec::new());
                build = true;
            }
        }
        if build {
            let this = self.clone();
            let entry = entry.clone();
            tokio::spawn(async move { this.build_filter(user, entry).await });
        }
        let ask: Vec<u64> =
            posts.iter().zip(&answers).filter(|(_, a)| matches!(a, Answer::Ask)).map(|(p, _)| p.0).collect();
        let looked_up = if ask.is_empty() {
            Vec::new()
        } else {
            self.likes.liked_among(user, TargetKind::Post, &ask).await?
        };
        let hits = answers.iter().filter(|a| !matches!(a, Answer::Ask)).count();
        self.counters.hit.increment(hits as u64);
        self.counters.miss.increment(ask.len() as u64);
        let mut looked = looked_up.into_iter();
        Ok(answers
            .into_iter()
            .map(|a| match a {
                Answer::Yes => true,
                Answer::No => false,
                Answer::Ask => looked.next().unwrap_or(false),
            })
            .collect())
    }

    async fn build_filter(&self, user: UserId, entry: Arc<Mutex<Entry>>) {
        // Scan up to bloom_max + 1 IDs: more than bloom_max means "too many".
        let ids = match self.likes.liked_ids(user, TargetKind::Post, self.bloom_max + 1).await {
            Ok(ids) => ids,
            Err(err) => {
                tracing::warn!(error = %err, user = user.0, "building liked-set filter failed");
                entry.lock().filter = Filter::Absent;
                return;
            }
        };
        let mut e = entry.lock();
        let pending = match std::mem::replace(&mut e.filter, Filter::Absent) {
            Filter::Building(p) => p,
            other => {
                e.filter = other;
                return;
            }
        };
        if ids.len() > self.bloom_max {
            e.filter = Filter::TooMany;
            return;
        }
        let expected = (ids.len() * 2).max(256);
        let mut bloom = BloomFilter::with_false_pos(0.01).expected_items(expected);
        for id in ids.iter().chain(pending.iter()) {
            bloom.insert(id);
        }
        e.filter = Filter::Ready(bloom, expected.saturating_sub(ids.len() + pending.len()).max(1));
    }

    /// Whether the viewer's filter is built (tests and metrics).
    pub fn filter_ready(&self, user: UserId) -> bool {
        matches!(self.entry(user).lock().filter, Filter::Ready(..))
    }
}
