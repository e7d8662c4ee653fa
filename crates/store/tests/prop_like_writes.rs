//! The embedded engine's like write path against a model: random likes and unlikes of a few
//! posts and comments by a few users, in random batches (several ops on one key per batch
//! included), through `WriteEngine::apply`.
//!
//! Checked after every batch: each op's outcome is the model's transition in arrival order.
//! The store is reopened between two batches (so later ops meet likes known only from disk),
//! and always waits for its like filter, the path that answers first likes without a read.
//! At the end: the reverse index, the likers lists, the recounts and the event log all agree
//! with the model's final state, and the events' deltas per target sum to its like count.

use likewise_core::ids::UserId;
use likewise_core::like::{LikeAction, LikeOp, LikeOutcome, Target, TargetKind};
use likewise_core::ports::{CounterStore, EventLog, LikeReader, WriteEngine};
use likewise_core::write::{WriteOp, WriteOutcome};
use likewise_store::embedded::{EmbeddedOptions, EmbeddedStore};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};

const TARGETS: [Target; 3] = [
    Target { kind: TargetKind::Post, id: 1 },
    Target { kind: TargetKind::Post, id: 2 },
    Target { kind: TargetKind::Comment, id: 3 },
];

fn ops() -> impl Strategy<Value = Vec<Vec<(usize, u64, bool)>>> {
    // (target index, user, like?) per op; 1-6 batches of 1-30 ops; users 0..8 so keys repeat.
    prop::collection::vec(prop::collection::vec((0usize..3, 0u64..8, any::<bool>()), 1..30), 1..6)
}

/// Open the store and wait for its like filter, so the write path answers first likes from
/// the filter (the path under test) rather than from reads.
fn open(dir: &std::path::Path) -> EmbeddedStore {
    let store = EmbeddedStore::open(dir, &EmbeddedOptions::default()).expect("open");
    assert!(store.wait_like_filter(std::time::Duration::from_secs(10)), "the like filter was not built");
    store
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn the_write_path_agrees_with_a_model(batches in ops(), reopen_after in 0usize..6) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(check(batches, reopen_after))?;
    }
}

/// `reopen_after`: the store is closed and opened again after that batch (when there is
/// one), so later batches meet likes known only from disk (the like filter rebuilt at open).
async fn check(batches: Vec<Vec<(usize, u64, bool)>>, reopen_after: usize) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = open(dir.path());
    // (target index, user) -> the time of the like that holds, if liked.
    let mut model: HashMap<(usize, u64), Option<u64>> = HashMap::new();
    let mut changes = 0usize;
    let mut ts = 1_000u64;
    for (n, batch) in batches.iter().enumerate() {
        if n == reopen_after + 1 {
            store.persist().expect("persist");
            drop(store);
            store = open(dir.path());
        }
        let write_ops: Vec<WriteOp> = batch
            .iter()
            .map(|&(t, user, like)| {
                ts += 1;
                WriteOp::Like(LikeOp {
                    target: TARGETS[t],
                    user: UserId(user),
                    action: if like { LikeAction::Like } else { LikeAction::Unlike },
                    target_author: UserId(99),
                    post: if t == 2 { 1 } else { TARGETS[t].id },
                    ts_ms: ts,
                    trace: None,
                })
            })
            .collect();
        let outcomes = store.apply(&write_ops).expect("apply");
        prop_assert_eq!(outcomes.len(), batch.len());
        for ((&(t, user, like), op), got) in batch.iter().zip(&write_ops).zip(outcomes) {
            let state = model.entry((t, user)).or_insert(None);
            let changed = state.is_some() != like;
            if changed {
                let WriteOp::Like(l) = op else { unreachable!() };
                *state = like.then_some(l.ts_ms);
                changes += 1;
            }
            let WriteOutcome::Like(LikeOutcome { liked, changed: got_changed, event_seq }) = got else {
                return Err(TestCaseError::fail("a like answered with a comment outcome"));
            };
            prop_assert_eq!((liked, got_changed), (like, changed), "target {} user {}", t, user);
            prop_assert_eq!(event_seq.is_some(), changed);
        }
    }
    let events = store.read_after(0, 1_000_000).await.expect("events");
    prop_assert_eq!(events.len(), changes, "one event per real transition");
    prop_assert!(events.windows(2).all(|w| w[0].seq + 1 == w[1].seq), "event sequences are contiguous");
    for (t, target) in TARGETS.iter().enumerate() {
        let want: BTreeMap<u64, u64> = model
            .iter()
            .filter(|((mt, _), s)| *mt == t && s.is_some())
            .map(|((_, u), s)| (*u, s.unwrap_or(0)))
            .collect();
        let delta: i64 = events.iter().filter(|e| e.target == *target).map(|e| e.delta()).sum();
        prop_assert_eq!(delta, want.len() as i64, "deltas of target {}", t);
        let likers = store.likers(*target, None, 100).await.expect("likers");
        let got: BTreeMap<u64, u64> = likers.iter().map(|l| (l.user.0, l.liked_at_ms)).collect();
        prop_assert_eq!(&got, &want, "likers of target {}", t);
        prop_assert!(
            likers.windows(2).all(|w| (w[0].liked_at_ms, w[0].user.0) > (w[1].liked_at_ms, w[1].user.0))
        );
        let recount = store.recount_likes("none", *target).await.expect("recount");
        prop_assert_eq!(recount.rows, want.len() as i64);
        for user in 0..8u64 {
            let liked = store.liked_among(UserId(user), target.kind, &[target.id]).await.expect("liked");
            prop_assert_eq!(liked, vec![want.contains_key(&user)], "user {} target {}", user, t);
        }
    }
    for user in 0..8u64 {
        let posts: BTreeSet<u64> =
            store.liked_ids(UserId(user), TargetKind::Post, 100).await.expect("ids").into_iter().collect();
        let want: BTreeSet<u64> = (0..2)
            .filter(|t| matches!(model.get(&(*t, user)), Some(Some(_))))
            .map(|t| TARGETS[t].id)
            .collect();
        prop_assert_eq!(posts, want, "posts liked by user {}", user);
    }
    Ok(())
}
