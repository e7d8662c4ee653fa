//! Comments on PostgreSQL.
//!
//! - Reads: keyset pages on the post's shard, so page 5,000 costs what page 1 costs. The
//!   pages may come from the shard's replica (`replicas`); records by ID (`comments`) are
//!   read from the primary, since writes and moderation decide on them.
//! - Writes: the comment operations of a shard's write transaction (`write.rs`). Each reads
//!   the rows it involves (the comment locked `FOR UPDATE`), lets
//!   `likewise_core::comment::transition` plan it, and writes the plan's rows; the plan's
//!   events go into the outbox with the transaction's other events. Creates are written
//!   together, a run of them in a constant number of statements (`creates.rs`).

use super::placement::Placement;
use super::replicas::Fence;
use super::tx::TxError;
use super::{PgStore, i, pg_err};
use async_trait::async_trait;
use futures::future::try_join_all;
use likewise_core::comment::status::CommentStatus;
use likewise_core::comment::transition::{
    Before, Review, RowWrite, Thread, VisibleReply, create_parent, review, thread_reads, transition,
};
use likewise_core::event::Event;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::ports::CommentReader;
use likewise_core::write::{CommentOp, CommentOutcome, CommentRecord};
use likewise_core::{StoreError, StoreResult};
use std::collections::{BTreeMap, HashMap};
use tokio_postgres::Transaction;

/// The select list for comment rows.
pub(super) const COMMENT_COLS: &str =
    "id, post_id, author, post_author, parent, reply_to_user, status, body, simhash";

/// Decode a `comments` row selected with [`COMMENT_COLS`].
pub(super) fn comment_row(r: &tokio_postgres::Row) -> StoreResult<CommentRecord> {
    let status: i16 = r.get(6);
    Ok(CommentRecord {
        id: CommentId(r.get::<_, i64>(0) as u64),
        post: PostId(r.get::<_, i64>(1) as u64),
        author: UserId(r.get::<_, i64>(2) as u64),
        post_author: UserId(r.get::<_, i64>(3) as u64),
        parent: r.get::<_, Option<i64>>(4).map(|v| CommentId(v as u64)),
        reply_to_user: r.get::<_, Option<i64>>(5).map(|v| UserId(v as u64)),
        status: CommentStatus::from_code(status as u8).ok_or_else(|| StoreError::Corrupt {
            keyspace: "comments",
            detail: format!("status {status}"),
        })?,
        text: r.get(7),
        simhash: r.get::<_, i64>(8) as u64,
    })
}

/// A new comment's fingerprint whose user lives on another shard than the comment: written
/// there once the comment's transaction committed ([`super::PgStore::write_late_fingerprints`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct LateFingerprint {
    pub(super) user: UserId,
    pub(super) comment: CommentId,
    pub(super) simhash: u64,
}

/// Apply one comment operation inside a shard's write transaction; returns its outcome and
/// the events it made (for the outbox). A create's fingerprint that belongs on another shard
/// goes into `late`.
pub(super) async fn comment_op(
    tx: &Transaction<'_>,
    shard: usize,
    ids: &Placement,
    op: &CommentOp,
    now: u64,
    late: &mut Vec<LateFingerprint>,
) -> Result<(CommentOutcome, Vec<Event>), TxError> {
    // Row locks serialize a reply with its parent's delete across API nodes: a create holds
    // its parent FOR SHARE, a delete holds the comment (and a reply's parent) FOR UPDATE.
    // Whichever commits second then reads the first's result: READ COMMITTED re-reads a
    // locked row, and each later statement sees what committed before it.
    let before = match op.id() {
        None => {
            let parent = match create_parent(op) {
                Some(p) => load_locked(tx, p, "FOR SHARE").await?,
                None => None,
            };
            let post = match op {
                CommentOp::Create(r, _) => r.post,
                _ => return Err(TxError::Fail(StoreError::Engine("a create without a record".into()))),
            };
            Before::New(new_comment_id(tx, shard, ids, post, now).await?, parent)
        }
        Some(id) => match load_locked(tx, id, "FOR UPDATE").await? {
            None => Before::Missing,
            Some(c) => {
                let thread = thread(tx, op, &c).await?;
                Before::Stored(c, thread)
            }
        },
    };
    let plan = transition(op, before, now);
    for w in &plan.writes {
        write_row(tx, w).await?;
    }
    if let CommentOutcome::Done(Some(r)) = &plan.outcome {
        moderation_rows(tx, shard, ids, op, r, review(op, &plan), late).await?;
    }
    Ok((plan.outcome, plan.events))
}

/// The moderation rows an operation writes in the transaction that writes the comment: the
/// [`review`] state (why it is held, its review-queue entry) and a new comment's fingerprint.
/// The hold and the queue entry live on the comment's shard, which is this one: a held
/// comment is never committed without them, and a status and its queue entry change
/// together. The fingerprint lives on its author's shard (the near-duplicate check reads a
/// user's fingerprints with one query): written here when that is this shard, else handed
/// back in `late` to be written after the commit. A fingerprint only feeds the
/// near-duplicate layer of the author's next comments, so writing it after the commit (an
/// idempotent upsert, retried) never holds a comment back, never answers an error for a
/// stored one, and at worst (the process dies between the two) lets one copy more through
/// that layer; it needs no transaction across shards.
async fn moderation_rows(
    tx: &Transaction<'_>,
    shard: usize,
    ids: &Placement,
    op: &CommentOp,
    r: &CommentRecord,
    review: Review,
    late: &mut Vec<LateFingerprint>,
) -> Result<(), TxError> {
    let ord = super::moderation::ord(r.id.0);
    if let Some(h) = review.held_by {
        tx.execute(
            "INSERT INTO comment_holds (comment_id, held_by) VALUES ($1, $2)
             ON CONFLICT (comment_id) DO UPDATE SET held_by = EXCLUDED.held_by",
            &[&i(r.id.0), &i16::from(h.code())],
        )
        .await?;
    }
    match review.queued {
        Some(true) => {
            tx.execute("INSERT INTO mod_queue (comment_ord) VALUES ($1) ON CONFLICT DO NOTHING", &[&ord])
                .await?;
        }
        Some(false) => {
            tx.execute("DELETE FROM mod_queue WHERE comment_ord = $1", &[&ord]).await?;
        }
        None => {}
    }
    if !matches!(op, CommentOp::Create(..)) {
        return Ok(());
    }
    if ids.shard_of_user(r.author) == shard {
        tx.execute(
            "INSERT INTO fingerprints (user_id, comment_ord, simhash) VALUES ($1, $2, $3)
             ON CONFLICT (user_id, comment_ord) DO UPDATE SET simhash = EXCLUDED.simhash",
            &[&i(r.author.0), &ord, &i(r.simhash)],
        )
        .await?;
    } else {
        late.push(LateFingerprint { user: r.author, comment: r.id, simhash: r.simhash });
    }
    Ok(())
}

/// The facts of `c`'s thread that planning `op` needs ([`thread_reads`]).
///
/// Threads follow their parent, so the parent's row serializes them too: a reply's status
/// change holds its parent FOR SHARE (a delete, FOR UPDATE), and a parent's status change
/// holds the parent FOR UPDATE before it reads its visible replies. Either the reply's
/// change commits first and the parent's read sees it, or the reply's change waits and then
/// reads the parent as changed; both orders count each reply once.
async fn thread(tx: &Transaction<'_>, op: &CommentOp, c: &CommentRecord) -> Result<Thread, TxError> {
    let want = thread_reads(op, c);
    let mut thread = Thread::default();
    if want.has_replies {
        thread.has_replies = has_replies(tx, c.id, None).await?;
    }
    if let Some(p) = c.parent {
        if want.parent {
            let lock = if matches!(op, CommentOp::Delete { .. }) { "FOR UPDATE" } else { "FOR SHARE" };
            thread.parent = load_locked(tx, p, lock).await?;
        }
        if want.siblings {
            thread.has_siblings = has_replies(tx, p, Some(c.id)).await?;
        }
    }
    if want.visible_replies {
        thread.visible_replies = visible_replies(tx, c.id).await?;
    }
    Ok(thread)
}

/// The replies in status visible under `id`, this transaction's changes included, in ID
/// order.
async fn visible_replies(tx: &Transaction<'_>, id: CommentId) -> Result<Vec<VisibleReply>, TxError> {
    let visible = i16::from(CommentStatus::Visible.code());
    let q = "SELECT id, author, reply_to_user FROM comments WHERE parent = $1 AND status = $2 ORDER BY id";
    let rows = tx.query(q, &[&i(id.0), &visible]).await?;
    Ok(rows
        .iter()
        .map(|r| VisibleReply {
            id: CommentId(r.get::<_, i64>(0) as u64),
            author: UserId(r.get::<_, i64>(1) as u64),
            mention: r.get::<_, Option<i64>>(2).map(|u| UserId(u as u64)),
        })
        .collect())
}

/// A new comment ID: milliseconds since the comment epoch, then the shard's sequence (unique
/// across API nodes), then the post's bucket ([`Placement::comment_id`]).
async fn new_comment_id(
    tx: &Transaction<'_>,
    shard: usize,
    ids: &Placement,
    post: PostId,
    now_ms: u64,
) -> Result<CommentId, TxError> {
    let n: i64 = tx.query_one("SELECT nextval('comment_id_seq')", &[]).await?.get(0);
    Ok(ids.comment_id(post, shard, n as u64, now_ms))
}

/// A comment, locked `FOR UPDATE` or `FOR SHARE` (`lock`) to the end of the transaction.
async fn load_locked(
    tx: &Transaction<'_>,
    id: CommentId,
    lock: &'static str,
) -> Result<Option<CommentRecord>, TxError> {
    let q = format!("SELECT {COMMENT_COLS} FROM comments WHERE id = $1 {lock}");
    match tx.query_opt(&q, &[&i(id.0)]).await? {
        Some(r) => Ok(Some(comment_row(&r)?)),
        None => Ok(None),
    }
}

/// Does any reply (of any status, other than `except`) stand under `id`, this transaction's
/// changes included?
async fn has_replies(
    tx: &Transaction<'_>,
    id: CommentId,
    except: Option<CommentId>,
) -> Result<bool, TxError> {
    let q = "SELECT EXISTS (SELECT 1 FROM comments WHERE parent = $1 AND id <> $2)";
    Ok(tx.query_one(q, &[&i(id.0), &except.map_or(0, |e| i(e.0))]).await?.get(0))
}

/// Write one row of a plan.
pub(super) async fn write_row(tx: &Transaction<'_>, w: &RowWrite) -> Result<(), TxError> {
    match w {
        RowWrite::Insert(r) => {
            tx.execute(
                "INSERT INTO comments (id, post_id, author, post_author, parent, reply_to_user, status, body, simhash)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                &[
                    &i(r.id.0),
                    &i(r.post.0),
                    &i(r.author.0),
                    &i(r.post_author.0),
                    &r.parent.map(|p| i(p.0)),
                    &r.reply_to_user.map(|u| i(u.0)),
                    &i16::from(r.status.code()),
                    &r.text,
                    &i(r.simhash),
                ],
            )
            .await?
        }
        RowWrite::Update(r) => {
            tx.execute(
                "UPDATE comments SET status = $2, body = $3 WHERE id = $1",
                &[&i(r.id.0), &i16::from(r.status.code()), &r.text],
            )
            .await?
        }
        RowWrite::Remove(r) => tx.execute("DELETE FROM comments WHERE id = $1", &[&i(r.id.0)]).await?,
    };
    Ok(())
}

#[async_trait]
impl CommentReader for PgStore {
    async fn comments(&self, ids: &[CommentId]) -> StoreResult<Vec<Option<CommentRecord>>> {
        let mut found: HashMap<u64, CommentRecord> = HashMap::new();
        for (shard, idx) in self.group(ids, |id| self.shard_of_comment(*id)) {
            let c = self.conn(shard).await?;
            let want: Vec<i64> = idx.iter().map(|k| i(ids[*k].0)).collect();
            let q = format!("SELECT {} FROM comments WHERE id = ANY($1)", COMMENT_COLS);
            for r in c.query(&q, &[&want]).await.map_err(pg_err)? {
                let rec = comment_row(&r)?;
                found.insert(rec.id.0, rec);
            }
        }
        Ok(ids.iter().map(|id| found.get(&id.0).cloned()).collect())
    }

    async fn top_level(
        &self,
        post: PostId,
        newest_first: bool,
        after: Option<CommentId>,
        limit: usize,
    ) -> StoreResult<Vec<CommentRecord>> {
        let q = if newest_first {
            format!(
                "SELECT {} FROM comments WHERE post_id = $1 AND parent IS NULL AND id < $2
                 ORDER BY id DESC LIMIT $3",
                COMMENT_COLS
            )
        } else {
            format!(
                "SELECT {} FROM comments WHERE post_id = $1 AND parent IS NULL AND id > $2
                 ORDER BY id ASC LIMIT $3",
                COMMENT_COLS
            )
        };
        let bound = match (after, newest_first) {
            (Some(a), _) => i(a.0),
            (None, true) => i64::MAX,
            (None, false) => i64::MIN,
        };
        let (q, id, limit) = (&q, i(post.0), limit as i64);
        // A replica may answer, once it holds this node's last comment write on the post.
        let fence = Some(Fence::Post(post.0));
        let rows = self
            .read(self.shard_of_post(post), fence, move |c| async move {
                c.query(q, &[&id, &bound, &limit]).await.map_err(pg_err)
            })
            .await?;
        rows.iter().map(comment_row).collect()
    }

    async fn replies(
        &self,
        parent: CommentId,
        after: Option<CommentId>,
        limit: usize,
    ) -> StoreResult<Vec<CommentRecord>> {
        let q = format!(
            "SELECT {} FROM comments WHERE parent = $1 AND id > $2 ORDER BY id ASC LIMIT $3",
            COMMENT_COLS
        );
        let (q, id, bound, limit) = (&q, i(parent.0), after.map_or(i64::MIN, |a| i(a.0)), limit as i64);
        // A replica may answer, once it holds this node's last comment write in the thread.
        let fence = Some(Fence::Thread(parent.0));
        let rows = self
            .read(self.shard_of_comment(parent), fence, move |c| async move {
                c.query(q, &[&id, &bound, &limit]).await.map_err(pg_err)
            })
            .await?;
        rows.iter().map(comment_row).collect()
    }

    async fn held_replies_by(
        &self,
        author: UserId,
        posts: &[PostId],
        limit: usize,
    ) -> StoreResult<Vec<CommentRecord>> {
        if posts.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let mut by_shard: BTreeMap<usize, Vec<i64>> = BTreeMap::new();
        for p in posts {
            by_shard.entry(self.shard_of_post(*p)).or_default().push(i(p.0));
        }
        let limit = limit.min(i64::MAX as usize) as i64;
        let q = format!(
            "SELECT {COMMENT_COLS} FROM comments
             WHERE author = $1 AND post_id = ANY($2) AND parent IS NOT NULL AND status IN (2, 3, 4)
             LIMIT $3"
        );
        // From the primaries (the partial index `comments_held_replies`): the author's own
        // reply, held a moment ago, counts for them on their next read.
        let found = try_join_all(by_shard.into_iter().map(|(shard, ids)| {
            let q = &q;
            async move {
                let c = self.conn(shard).await?;
                c.query(q.as_str(), &[&i(author.0), &ids, &limit]).await.map_err(pg_err)
            }
        }))
        .await?;
        let mut out = Vec::new();
        for r in found.iter().flatten() {
            out.push(comment_row(r)?);
        }
        out.truncate(limit as usize);
        Ok(out)
    }

    async fn any_held_replies_by(&self, author: UserId) -> StoreResult<bool> {
        // Every shard (replies live on their posts'), each one probe of the partial index
        // `comments_held_replies`, from the primaries as `held_replies_by`.
        let found = try_join_all((0..self.shard_count()).map(|shard| async move {
            let c = self.conn(shard).await?;
            c.query_one(
                "SELECT EXISTS (SELECT 1 FROM comments
                     WHERE author = $1 AND parent IS NOT NULL AND status IN (2, 3, 4))",
                &[&i(author.0)],
            )
            .await
            .map(|r| r.get::<_, bool>(0))
            .map_err(pg_err)
        }))
        .await?;
        Ok(found.into_iter().any(|b| b))
    }

    async fn visible_reply_counts(&self, parents: &[CommentId]) -> StoreResult<Vec<i64>> {
        let mut by_shard: BTreeMap<usize, Vec<i64>> = BTreeMap::new();
        for p in parents {
            by_shard.entry(self.shard_of_comment(*p)).or_default().push(i(p.0));
        }
        let visible = i16::from(CommentStatus::Visible.code());
        let q =
            "SELECT parent, count(*) FROM comments WHERE parent = ANY($1) AND status = $2 GROUP BY parent";
        // From the primaries (the index `comments_replies`): a reply written a moment ago
        // counts on its author's next read, as it is listed.
        let found = try_join_all(by_shard.into_iter().map(|(shard, ids)| async move {
            let c = self.conn(shard).await?;
            c.query(q, &[&ids, &visible]).await.map_err(pg_err)
        }))
        .await?;
        let counts: HashMap<i64, i64> =
            found.iter().flatten().map(|r| (r.get::<_, i64>(0), r.get::<_, i64>(1))).collect();
        Ok(parents.iter().map(|p| counts.get(&i(p.0)).copied().unwrap_or(0)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::testing::TestShards;
    use likewise_core::write::{WriteOp, WriteOutcome};
    use std::sync::Arc;
    use tokio::sync::Barrier;

    fn create(parent: Option<CommentId>, author: u64) -> WriteOp {
        WriteOp::Comment(CommentOp::Create(
            CommentRecord {
                id: CommentId(0),
                post: PostId(9),
                author: UserId(author),
                post_author: UserId(7),
                parent,
                reply_to_user: None,
                status: CommentStatus::Visible,
                text: format!("from {author}"),
                simhash: author,
            },
            None,
        ))
    }

    fn outcome(out: Vec<WriteOutcome>) -> CommentOutcome {
        match out.into_iter().next() {
            Some(WriteOutcome::Comment(c)) => c,
            other => panic!("a comment op answered {other:?}"),
        }
    }

    /// Two API nodes: one replies to a comment while the other deletes it, released together
    /// by a barrier, many times over. Either the reply is refused or the parent stays as a
    /// placeholder above it; no reply is ever left under a removed parent.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_reply_racing_its_parents_delete_on_another_node_never_leaves_an_orphan() {
        let t = TestShards::create(1).await;
        let (a, b) = (Arc::new(t.store().await), Arc::new(t.store().await));
        let (mut refused, mut kept) = (0, 0);
        for trial in 0..60u64 {
            let parent = match outcome(a.apply_async(&[create(None, 1000 + trial)]).await.expect("parent")) {
                CommentOutcome::Done(Some(r)) => r.id,
                other => panic!("create answered {other:?}"),
            };
            let barrier = Arc::new(Barrier::new(2));
            let delete = {
                let (a, barrier) = (a.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    let op = WriteOp::Comment(CommentOp::Delete { id: parent, actor: UserId(1) });
                    a.apply_async(&[op]).await.expect("delete")
                })
            };
            let reply = {
                let b = b.clone();
                tokio::spawn(async move {
                    barrier.wait().await;
                    b.apply_async(&[create(Some(parent), 2)]).await.expect("reply")
                })
            };
            let (_, reply) = (delete.await.expect("join"), outcome(reply.await.expect("join")));
            let stored = a.comments(&[parent]).await.expect("read").pop().flatten();
            let replies = a.replies(parent, None, 10).await.expect("replies");
            match reply {
                CommentOutcome::NotFound => {
                    refused += 1;
                    assert_eq!(stored, None, "trial {trial}: a refused reply, a removed parent");
                    assert!(replies.is_empty(), "trial {trial}: orphan");
                }
                CommentOutcome::Done(Some(r)) => {
                    kept += 1;
                    assert_eq!(stored.map(|p| p.status), Some(CommentStatus::Deleted), "trial {trial}");
                    assert_eq!(replies.iter().map(|x| x.id).collect::<Vec<_>>(), vec![r.id], "trial {trial}");
                }
                other => panic!("trial {trial}: reply answered {other:?}"),
            }
        }
        eprintln!("replies refused {refused}, parents kept as placeholders {kept}");
    }

    /// Two shards: a held comment's hold and queue entry commit with it on the post's shard,
    /// and its author's fingerprint reaches the author's shard whichever shard that is (in the
    /// comment's transaction, or right after its commit), before the create returns.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_held_comments_moderation_rows_commit_with_it_across_shards() {
        use likewise_core::comment::appeal::HeldBy;
        use likewise_core::ports::ModerationStore;
        let t = TestShards::create(2).await;
        let s = t.store().await;
        let post_shard = s.shard_of_post(PostId(9));
        let same = (1..).map(UserId).find(|u| s.shard_of_user(*u) == post_shard).expect("a user");
        let other = (1..).map(UserId).find(|u| s.shard_of_user(*u) != post_shard).expect("a user");
        for author in [same, other] {
            let WriteOp::Comment(CommentOp::Create(mut r, _)) = create(None, author.0) else {
                unreachable!()
            };
            r.status = CommentStatus::HiddenByFilter;
            let op = WriteOp::Comment(CommentOp::Create(r, Some(HeldBy::Classifier)));
            let id = match outcome(s.apply_async(&[op]).await.expect("create")) {
                CommentOutcome::Done(Some(r)) => r.id,
                other => panic!("create answered {other:?}"),
            };
            assert_eq!(s.shard_of_comment(id), post_shard);
            assert!(s.queue(None, 10).await.expect("queue").contains(&id), "user {author:?}");
            let notes = s.queue_notes(&[id]).await.expect("notes");
            assert_eq!(notes[0].held_by, Some(HeldBy::Classifier));
            let prints = s.fingerprints(author, CommentId(0), 10).await.expect("fingerprints");
            assert_eq!(prints, vec![(id, author.0)], "user {author:?}");
        }
    }

    fn set(id: CommentId, status: CommentStatus) -> WriteOp {
        WriteOp::Comment(CommentOp::SetStatus {
            id,
            status,
            actor: UserId(7),
            queue: likewise_core::write::QueueChange::Keep,
        })
    }

    /// Two API nodes: one holds a parent (or approves it again) while the other creates a
    /// reply under it and changes another reply's status (in two transactions), released
    /// together by a barrier, many times over. However they interleave, the events sum to what a recount finds:
    /// the parent's row serializes them, so each reply is counted by the parent as it is.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn replies_racing_their_parents_change_on_another_node_count_exactly() {
        use likewise_core::ports::CounterStore;
        let t = TestShards::create(1).await;
        let (a, b) = (Arc::new(t.store().await), Arc::new(t.store().await));
        let created = |out: Vec<WriteOutcome>| match outcome(out) {
            CommentOutcome::Done(Some(r)) => r.id,
            other => panic!("create answered {other:?}"),
        };
        for trial in 0..40u64 {
            let parent = created(a.apply_async(&[create(None, 1000 + trial)]).await.expect("parent"));
            let reply = created(b.apply_async(&[create(Some(parent), 2)]).await.expect("reply"));
            if trial % 2 == 1 {
                a.apply_async(&[set(parent, CommentStatus::Pending)]).await.expect("hold");
            }
            let to = if trial % 2 == 1 { CommentStatus::Visible } else { CommentStatus::Pending };
            let status = if trial % 3 == 0 { CommentStatus::HiddenByFilter } else { CommentStatus::Visible };
            let barrier = Arc::new(Barrier::new(3));
            let tasks = [
                (a.clone(), set(parent, to)),
                (b.clone(), set(reply, status)),
                (b.clone(), create(Some(parent), 3)),
            ]
            .map(|(node, op)| {
                let barrier = barrier.clone();
                tokio::spawn(async move {
                    barrier.wait().await;
                    node.apply_async(&[op]).await.expect("write")
                })
            });
            for task in tasks {
                task.await.expect("join");
            }
            let post = PostId(9);
            let c = a.recount_comments("none", post).await.expect("recount");
            assert_eq!(c.drift(), 0, "trial {trial}: comment_count {c:?}");
            for (p, r) in a.recount_replies("none", post).await.expect("recount") {
                assert_eq!(r.drift(), 0, "trial {trial}: reply_count of {p:?} {r:?}");
            }
        }
    }
}
