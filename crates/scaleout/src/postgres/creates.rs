//! Comment creates of a shard's write transaction, written together: a run of consecutive
//! creates in a batch (keyed or not) costs a constant number of statements, however many it
//! holds, as a round of likes does (`write.rs`).
//!
//! A create changes no row but its own (`likewise_core::comment::transition`): it reads its
//! parent and inserts itself. So the creates of a run are independent of each other (a
//! client cannot name, as a parent, a comment whose ID the same batch draws) and are planned
//! together: their parents read and locked `FOR SHARE` in one statement (in ID order, so two
//! transactions lock shared parents in one order), their IDs drawn in one, their rows, holds,
//! review-queue entries and fingerprints inserted in one each.
//!
//! Keys (`idempotency.rs`): a run's first create under a key this transaction claimed creates
//! and stores its record; a create under a stored key (stored before, or by an earlier create
//! of this transaction) is a repeat and writes nothing. A second create under one key in the
//! run waits for the first one's result, in a later round: almost always a repeat of it; only
//! when the first made nothing (its parent went away) does it claim the key again and try.

use super::comments::{COMMENT_COLS, LateFingerprint, comment_row, write_row};
use super::i;
use super::idempotency::{KeyId, KeyState, claim, free_keys, key_id, store_records};
use super::placement::Placement;
use super::tx::TxError;
use deadpool_postgres::Transaction;
use likewise_core::StoreError;
use likewise_core::comment::appeal::HeldBy;
use likewise_core::comment::idempotency::{KeyRecord, Keyed};
use likewise_core::comment::transition::{Before, RowWrite, review, transition};
use likewise_core::event::Event;
use likewise_core::write::{CommentOp, CommentOutcome, CommentRecord};
use std::collections::{HashMap, HashSet};

/// One create of a run: its place in the shard's part of the batch, what it creates, and
/// its key.
pub(super) struct Create<'a> {
    pub(super) at: usize,
    pub(super) record: &'a CommentRecord,
    pub(super) held_by: Option<HeldBy>,
    pub(super) keyed: Option<&'a Keyed>,
}

/// What a create came to: its place, its outcome, its events.
pub(super) type Created = (usize, CommentOutcome, Vec<Event>);

/// Apply a run of consecutive creates. `keys` holds the batch's keys as this transaction
/// sees them (claimed or read before the first run: `idempotency::claim_batch_keys`) and is
/// kept up to date. The outcomes come back in the run's order.
pub(super) async fn apply_creates(
    tx: &Transaction<'_>,
    shard: usize,
    ids: &Placement,
    run: Vec<Create<'_>>,
    keys: &mut HashMap<KeyId, KeyState>,
    now: u64,
    late: &mut Vec<LateFingerprint>,
) -> Result<Vec<Created>, TxError> {
    let mut out: Vec<Created> = Vec::with_capacity(run.len());
    let mut pending = run;
    while !pending.is_empty() {
        let (mut round, mut later, mut unclaimed) = (Vec::new(), Vec::new(), Vec::new());
        let mut seen: HashSet<KeyId> = HashSet::new();
        for c in pending {
            let Some(k) = c.keyed else {
                round.push(c);
                continue;
            };
            let id = key_id(k);
            if !seen.insert(id.clone()) {
                later.push(c);
                continue;
            }
            match keys.get(&id) {
                Some(KeyState::Stored(r)) => {
                    out.push((c.at, CommentOutcome::Replayed(Box::new(r.clone())), Vec::new()))
                }
                Some(KeyState::Mine) => round.push(c),
                Some(KeyState::Free) | None => unclaimed.push((c, id)),
            }
        }
        if !unclaimed.is_empty() {
            let wanted = unclaimed.iter().map(|(c, id)| (id.clone(), i(c.record.post.0))).collect();
            keys.extend(claim(tx, wanted, now).await?);
            for (c, id) in unclaimed {
                match keys.get(&id) {
                    Some(KeyState::Stored(r)) => {
                        out.push((c.at, CommentOutcome::Replayed(Box::new(r.clone())), Vec::new()))
                    }
                    _ => round.push(c),
                }
            }
        }
        // In arrival order: IDs are drawn in it.
        round.sort_by_key(|c| c.at);
        let made = create_all(tx, shard, ids, &round, now, late).await?;
        let (mut stored, mut freed) = (Vec::new(), Vec::new());
        for (c, (outcome, events)) in round.iter().zip(made) {
            if let Some(k) = c.keyed {
                let id = key_id(k);
                match &outcome {
                    CommentOutcome::Done(Some(created)) => {
                        let r = KeyRecord {
                            fingerprint: k.fingerprint,
                            created_ms: now,
                            comment: created.clone(),
                        };
                        stored.push((id.clone(), r.encode()));
                        keys.insert(id, KeyState::Stored(r));
                    }
                    // Nothing was created: the key stays free for a retry.
                    _ => {
                        freed.push(id.clone());
                        keys.insert(id, KeyState::Free);
                    }
                }
            }
            out.push((c.at, outcome, events));
        }
        store_records(tx, &stored).await?;
        free_keys(tx, &freed).await?;
        pending = later;
    }
    out.sort_by_key(|(at, _, _)| *at);
    Ok(out)
}

/// Plan and write `creates` (none under a key that is not this transaction's to use).
async fn create_all(
    tx: &Transaction<'_>,
    shard: usize,
    ids: &Placement,
    creates: &[Create<'_>],
    now: u64,
    late: &mut Vec<LateFingerprint>,
) -> Result<Vec<(CommentOutcome, Vec<Event>)>, TxError> {
    if creates.is_empty() {
        return Ok(Vec::new());
    }
    // Row locks serialize a reply with its parent's delete across API nodes (`comments.rs`).
    let mut wanted: Vec<i64> = creates.iter().filter_map(|c| c.record.parent.map(|p| i(p.0))).collect();
    wanted.sort_unstable();
    wanted.dedup();
    let mut parents: HashMap<u64, CommentRecord> = HashMap::new();
    if !wanted.is_empty() {
        let q = format!("SELECT {COMMENT_COLS} FROM comments WHERE id = ANY($1) ORDER BY id FOR SHARE");
        let select = tx.prepare_cached(&q).await?;
        for r in tx.query(&select, &[&wanted]).await? {
            let p = comment_row(&r)?;
            parents.insert(p.id.0, p);
        }
    }
    let draw =
        tx.prepare_cached("SELECT nextval('comment_id_seq') FROM generate_series(1, $1::integer)").await?;
    let mut seqs: Vec<i64> =
        tx.query(&draw, &[&(creates.len() as i32)]).await?.iter().map(|r| r.get(0)).collect();
    seqs.sort_unstable();
    if seqs.len() != creates.len() {
        return Err(TxError::Fail(StoreError::Engine("comment IDs drawn short".into())));
    }
    let mut rows = Rows::default();
    let mut out = Vec::with_capacity(creates.len());
    for (c, seq) in creates.iter().zip(seqs) {
        let op = CommentOp::Create(c.record.clone(), c.held_by);
        let parent = c.record.parent.and_then(|p| parents.get(&p.0)).cloned();
        let id = ids.comment_id(c.record.post, shard, seq as u64, now);
        let plan = transition(&op, Before::New(id, parent), now);
        let review = review(&op, &plan);
        for w in plan.writes {
            match w {
                RowWrite::Insert(r) => rows.comments.push(r),
                // A create plans only its own insert; anything else is written as it comes.
                other => write_row(tx, &other).await?,
            }
        }
        if let CommentOutcome::Done(Some(r)) = &plan.outcome {
            let ord = super::moderation::ord(r.id.0);
            if let Some(h) = review.held_by {
                rows.holds.push((i(r.id.0), i16::from(h.code())));
            }
            if review.queued == Some(true) {
                rows.queued.push(ord);
            }
            // The fingerprint lives on its author's shard (`comments::moderation_rows`).
            if ids.shard_of_user(r.author) == shard {
                rows.fingerprints.push((i(r.author.0), ord, i(r.simhash)));
            } else {
                late.push(LateFingerprint { user: r.author, comment: r.id, simhash: r.simhash });
            }
        }
        out.push((plan.outcome, plan.events));
    }
    rows.write(tx).await?;
    Ok(out)
}

/// The rows a round of creates inserts, one statement per table.
#[derive(Default)]
struct Rows {
    comments: Vec<CommentRecord>,
    /// (comment, held by)
    holds: Vec<(i64, i16)>,
    /// Review-queue entries (comment ords).
    queued: Vec<i64>,
    /// (user, comment ord, simhash)
    fingerprints: Vec<(i64, i64, i64)>,
}

impl Rows {
    async fn write(&self, tx: &Transaction<'_>) -> Result<(), TxError> {
        if !self.comments.is_empty() {
            let c = &self.comments;
            let insert = tx
                .prepare_cached(
                    "INSERT INTO comments (id, post_id, author, post_author, parent, reply_to_user, status, body, simhash)
                     SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[],
                                          $6::bigint[], $7::smallint[], $8::text[], $9::bigint[])",
                )
                .await?;
            let ids: Vec<i64> = c.iter().map(|r| i(r.id.0)).collect();
            let posts: Vec<i64> = c.iter().map(|r| i(r.post.0)).collect();
            let authors: Vec<i64> = c.iter().map(|r| i(r.author.0)).collect();
            let post_authors: Vec<i64> = c.iter().map(|r| i(r.post_author.0)).collect();
            let parents: Vec<Option<i64>> = c.iter().map(|r| r.parent.map(|p| i(p.0))).collect();
            let reply_to: Vec<Option<i64>> = c.iter().map(|r| r.reply_to_user.map(|u| i(u.0))).collect();
            let statuses: Vec<i16> = c.iter().map(|r| i16::from(r.status.code())).collect();
            let bodies: Vec<&str> = c.iter().map(|r| r.text.as_str()).collect();
            let simhashes: Vec<i64> = c.iter().map(|r| i(r.simhash)).collect();
            tx.execute(
                &insert,
                &[&ids, &posts, &authors, &post_authors, &parents, &reply_to, &statuses, &bodies, &simhashes],
            )
            .await?;
        }
        if !self.holds.is_empty() {
            let insert = tx
                .prepare_cached(
                    "INSERT INTO comment_holds (comment_id, held_by)
                     SELECT * FROM unnest($1::bigint[], $2::smallint[])
                     ON CONFLICT (comment_id) DO UPDATE SET held_by = EXCLUDED.held_by",
                )
                .await?;
            let (ids, by): (Vec<i64>, Vec<i16>) = self.holds.iter().copied().unzip();
            tx.execute(&insert, &[&ids, &by]).await?;
        }
        if !self.queued.is_empty() {
            let insert = tx
                .prepare_cached(
                    "INSERT INTO mod_queue (comment_ord) SELECT * FROM unnest($1::bigint[]) ON CONFLICT DO NOTHING",
                )
                .await?;
            tx.execute(&insert, &[&self.queued]).await?;
        }
        if !self.fingerprints.is_empty() {
            let insert = tx
                .prepare_cached(
                    "INSERT INTO fingerprints (user_id, comment_ord, simhash)
                     SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[])
                     ON CONFLICT (user_id, comment_ord) DO UPDATE SET simhash = EXCLUDED.simhash",
                )
                .await?;
            let users: Vec<i64> = self.fingerprints.iter().map(|f| f.0).collect();
            let ords: Vec<i64> = self.fingerprints.iter().map(|f| f.1).collect();
            let hashes: Vec<i64> = self.fingerprints.iter().map(|f| f.2).collect();
            tx.execute(&insert, &[&users, &ords, &hashes]).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::postgres::testing::{StatementCounter, TestShards};
    use crate::postgres::{PgOptions, PgStore};
    use likewise_core::comment::appeal::HeldBy;
    use likewise_core::comment::idempotency::{IdempotencyKey, Keyed, fingerprint};
    use likewise_core::comment::status::CommentStatus;
    use likewise_core::ids::{CommentId, PostId, UserId};
    use likewise_core::ports::CommentReader;
    use likewise_core::write::{CommentOutcome, CommentRecord, WriteOp, WriteOutcome};
    use std::collections::HashMap;
    use std::sync::Arc;
    use tokio::sync::Barrier;

    const POST: PostId = PostId(9);

    fn keyed(author: u64, key: &str, parent: Option<CommentId>, held: bool) -> WriteOp {
        let text = format!("{key} from {author}");
        let r = CommentRecord {
            id: CommentId(0),
            post: POST,
            author: UserId(author),
            post_author: UserId(7),
            parent,
            reply_to_user: None,
            status: if held { CommentStatus::HiddenByFilter } else { CommentStatus::Visible },
            text: text.clone(),
            simhash: author,
        };
        let k = Keyed {
            caller: UserId(author),
            key: IdempotencyKey::parse(key.as_bytes()).expect("key"),
            fingerprint: fingerprint(POST, parent, &text),
        };
        WriteOp::KeyedComment(r, held.then_some(HeldBy::Classifier), k)
    }

    fn comment(o: &WriteOutcome) -> CommentOutcome {
        match o {
            WriteOutcome::Comment(c) => c.clone(),
            other => panic!("not a comment outcome: {other:?}"),
        }
    }

    /// The comment an outcome names: created, or answered from its key.
    fn named(o: &WriteOutcome) -> (bool, CommentId) {
        match comment(o) {
            CommentOutcome::Done(Some(r)) => (true, r.id),
            CommentOutcome::Replayed(k) => (false, k.comment.id),
            other => panic!("a keyed create answered {other:?}"),
        }
    }

    /// A batch of keyed creates costs the same statements with 4 creates as with 64: new
    /// keys, repeats of stored keys, and replies (some held for review) alike. Written one
    /// create at a time, 64 creates cost about 16 times what 4 do.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_of_keyed_creates_costs_the_same_statements_whatever_its_size() {
        let t = TestShards::create(1).await;
        let counter = StatementCounter::start(&t.urls[0]).await;
        let s = PgStore::connect(&PgOptions {
            shards: vec![counter.url.clone()],
            pool_size: 2,
            ..PgOptions::default()
        })
        .expect("connect");
        s.load_placement().await.expect("placement");
        let cost = |ops: Vec<WriteOp>| {
            let (s, counter) = (&s, &counter);
            async move {
                // Every measured batch wakes the relay (at most once per ANNOUNCE_EVERY, one
                // statement more): batches closer together would differ by it.
                tokio::time::sleep(crate::postgres::outbox_wakeups::ANNOUNCE_EVERY).await;
                let before = counter.get();
                let out = s.apply_async(&ops).await.expect("apply");
                (counter.get() - before, out)
            }
        };
        let (_, warm) = cost((0..3).map(|u| keyed(u, "warm", None, u == 1)).collect()).await;
        let parent = named(&warm[0]).1;
        let mut costs: HashMap<&str, Vec<u64>> = HashMap::new();
        for n in [4u64, 64] {
            let new: Vec<WriteOp> =
                (0..n).map(|u| keyed(1_000 + u, &format!("new-{n}"), None, false)).collect();
            let (c, out) = cost(new.clone()).await;
            assert!(out.iter().all(|o| named(o).0), "{out:?}");
            costs.entry("new keys").or_default().push(c);
            let (c, out) = cost(new).await;
            assert!(out.iter().all(|o| !named(o).0), "{out:?}");
            costs.entry("repeats").or_default().push(c);
            let replies: Vec<WriteOp> =
                (0..n).map(|u| keyed(2_000 + u, &format!("reply-{n}"), Some(parent), u % 2 == 0)).collect();
            let (c, out) = cost(replies).await;
            assert!(out.iter().all(|o| named(o).0), "{out:?}");
            costs.entry("replies, half held").or_default().push(c);
        }
        eprintln!("statements per batch of 4 and of 64 creates: {costs:?}");
        for (kind, c) in &costs {
            assert_eq!(
                c[0], c[1],
                "{kind}: a batch of 64 costs more statements than a batch of 4: {costs:?}"
            );
        }
        assert_eq!(s.top_level(POST, true, None, 1_000).await.expect("page").len(), 3 + 4 + 64);
    }

    /// Two API nodes write batches of the same keyed creates at once (released by a barrier;
    /// one in key order, the other reversed and with repeats in it), many times over: each
    /// key makes one comment, and every create under it, on either node, names that comment.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn keyed_creates_racing_on_two_nodes_make_one_comment_per_key() {
        const KEYS: u64 = 30;
        let t = TestShards::create(2).await;
        let (a, b) = (Arc::new(t.store().await), Arc::new(t.store().await));
        for trial in 0..20u64 {
            let key = format!("race-{trial}");
            let ops: Vec<WriteOp> = (0..KEYS).map(|u| keyed(100 + u, &key, None, u % 7 == 0)).collect();
            let mut other: Vec<WriteOp> = ops.iter().rev().cloned().collect();
            other.extend(ops.iter().step_by(5).cloned());
            let barrier = Arc::new(Barrier::new(2));
            let run = |node: Arc<PgStore>, ops: Vec<WriteOp>| {
                let barrier = barrier.clone();
                tokio::spawn(async move {
                    barrier.wait().await;
                    let out = node.apply_async(&ops).await.expect("apply");
                    ops.into_iter().zip(out).collect::<Vec<_>>()
                })
            };
            let (x, y) = (run(a.clone(), ops), run(b.clone(), other));
            let (x, y) = (x.await.expect("join"), y.await.expect("join"));
            let mut per_key: HashMap<u64, (usize, Vec<CommentId>)> = HashMap::new();
            for (op, o) in x.iter().chain(&y) {
                let WriteOp::KeyedComment(r, _, _) = op else { unreachable!() };
                let (created, id) = named(o);
                let e = per_key.entry(r.author.0).or_default();
                e.0 += usize::from(created);
                e.1.push(id);
            }
            assert_eq!(per_key.len(), KEYS as usize);
            for (user, (created, ids)) in &per_key {
                assert_eq!(*created, 1, "trial {trial}, user {user}: created {created} times");
                assert!(ids.iter().all(|id| *id == ids[0]), "trial {trial}, user {user}: {ids:?}");
            }
            let stored = a.top_level(POST, true, None, 10_000).await.expect("page");
            assert_eq!(stored.len() as u64, KEYS * (trial + 1), "trial {trial}");
        }
    }
}
