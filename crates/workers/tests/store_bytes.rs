//! Bytes per like of the embedded store: the capacity plan's like load (`docs/capacity/load.py
//! like`: posts by Zipf(1) popularity, likers uniform, 64 requests in flight) at a tenth of
//! its scale, the notifier drained, every memtable flushed, then each keyspace's tables
//! divided by the likes. `measure.sh embedded` measures the same over HTTP at full scale.
//!
//! `LIKEWISE_BYTES_REPORT=1` prints every keyspace's figure.

use likewise_core::ids::{PostId, UserId};
use likewise_core::like::LikeAction;
use likewise_core::model::{CommentsPolicy, PostMeta};
use likewise_engine::group_commit::GroupCommitOptions;
use likewise_service::{Engagement, ServiceOptions, now_ms};
use likewise_store::embedded::EmbeddedStore;
use likewise_workers::notifier::{Notifier, NotifierOptions};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

const POSTS: u64 = 20_000;
const AUTHORS: u64 = 5_000;
const USERS: u64 = 500_000;
const LIKES: usize = 100_000;
const IN_FLIGHT: usize = 64;

/// The load's post IDs and authors (`load.py register`).
fn post_id(rank: u64) -> u64 {
    1_000_000 + rank
}

fn author(rank: u64) -> u64 {
    10_000_000 + (rank * 7919) % AUTHORS
}

/// A small deterministic generator (xorshift64*), so every run writes the same likes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The load's (user, post) pairs: posts by Zipf(1) rank, users uniform.
fn likes() -> Vec<(u64, u64)> {
    let mut acc = 0.0;
    let cdf: Vec<f64> = (1..=POSTS)
        .map(|k| {
            acc += 1.0 / k as f64;
            acc
        })
        .collect();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    (0..LIKES)
        .map(|_| {
            let user = 1 + rng.next() % USERS;
            let x = rng.unit() * acc;
            let rank = cdf.partition_point(|c| *c < x) as u64;
            (user, post_id(rank.min(POSTS - 1)))
        })
        .collect()
}

/// Bytes per like of each keyspace after the load, and the distinct likes.
async fn measure(dir: &std::path::Path) -> (BTreeMap<String, f64>, usize) {
    let svc = Engagement::new(likewise_store::testing::open_small(dir), ServiceOptions::default());
    for rank in 0..POSTS {
        let meta = PostMeta {
            author: UserId(author(rank)),
            hide_like_count: false,
            comments: CommentsPolicy::Everyone,
        };
        svc.upstream.put_post(PostId(post_id(rank)), meta).await.expect("post");
    }
    let all = likes();
    let distinct = all.iter().collect::<HashSet<_>>().len();
    let all = Arc::new(all);
    let mut tasks = Vec::new();
    for lane in 0..IN_FLIGHT {
        let (svc, all) = (svc.clone(), all.clone());
        tasks.push(tokio::spawn(async move {
            for (user, post) in all.iter().skip(lane).step_by(IN_FLIGHT) {
                svc.likes.set_post_like(UserId(*user), PostId(*post), LikeAction::Like).await.expect("like");
            }
        }));
    }
    for t in tasks {
        t.await.expect("lane");
    }
    let mut notifier = Notifier::new(svc.clone(), &NotifierOptions::default()).await.expect("notifier");
    let later = now_ms() + 3_600_000;
    while notifier.step(later).await.expect("step") > 0 {}
    svc.stores().close().expect("close");
    drop(notifier);
    drop(svc);
    let store = EmbeddedStore::open(dir, &likewise_store::testing::small_options()).expect("reopen");
    let sizes = store.flushed_keyspace_bytes().expect("sizes");
    likewise_store::open::from_embedded(store, GroupCommitOptions::default()).close().expect("close");
    (sizes.into_iter().map(|(name, bytes)| (name, bytes as f64 / distinct as f64)).collect(), distinct)
}

fn sum(per_like: &BTreeMap<String, f64>, names: &[&str]) -> f64 {
    names.iter().map(|n| per_like.get(*n).copied().unwrap_or(0.0)).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenth_of_the_capacity_like_load_takes_at_most_60_bytes_a_like() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (per_like, distinct) = measure(dir.path()).await;
    let durable: f64 = per_like.iter().filter(|(n, _)| n.as_str() != "events").map(|(_, b)| b).sum();
    let notifications = sum(&per_like, &["notif_actors", "notif_items", "notif_keys", "notif_time"]);
    if std::env::var_os("LIKEWISE_BYTES_REPORT").is_some() {
        println!("{distinct} likes");
        for (name, b) in per_like.iter().filter(|(_, b)| **b > 0.05) {
            println!("{name:>20} {b:7.1} B");
        }
        println!("{:>20} {notifications:7.1} B", "notifications");
        println!("{:>20} {durable:7.1} B", "durable");
    }
    assert!(durable <= 60.0, "{durable:.1} B per like durable: {per_like:?}");
}
