//! Comments on the embedded engine.
//!
//! | keyspace        | key              | value          | why                                   |
//! |-----------------|------------------|----------------|---------------------------------------|
//! | `comments`      | post(8) id(8)    | record v1      | partitioned by post, clustered by ID  |
//! | `top_comments`  | post(8) id(8)    | (empty)        | keyset pages of top-level comments    |
//! | `replies`       | parent(8) id(8)  | post(8)        | replies under their top-level parent  |
//! | `comment_posts` | id(8)            | post(8)        | find a comment's post from its ID     |
//! | `held_replies`  | author(8) post(8) id(8) | parent(8) | an author's held replies ([`CommentStatus::is_held`]) |
//!
//! `held_replies` is written with the record in the same batch (`flush`), so it lists exactly
//! the replies held at the last commit; its one-byte key [`HELD_REPLIES_INDEXED`] says that a
//! store written before it existed has been indexed (`index_held_replies`, at open).
//!
//! Comment changes go through the same batch as likes (see `write.rs`). What an operation
//! does is planned by `likewise_core::comment::transition` from the rows read here; each
//! touched comment is then written once per batch with its final state, and the plan's
//! events (one per real change and per reply whose thread opened or closed, each delta
//! saying how the counts move) join the batch's events.

use super::batch::Batch;
use super::error::engine_err;
use super::state::{EmbeddedStore, Inner};
use crate::keys::{V1, be_u64, pair_key};
use async_trait::async_trait;
use fjall::Keyspace;
use likewise_core::comment::appeal::HeldBy;
use likewise_core::comment::status::CommentStatus;
use likewise_core::comment::transition::{
    Before, Review, RowWrite, Thread, VisibleReply, create_parent, review, thread_reads, transition,
};
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::ports::CommentReader;
use likewise_core::write::{CommentOp, CommentOutcome, CommentRecord};
use likewise_core::{StoreError, StoreResult};
use std::collections::HashMap;

/// The highest comment ID stored (seeds the ID generator).
pub(super) fn highest_id(comment_posts: &Keyspace) -> StoreResult<Option<CommentId>> {
    match comment_posts.last_key_value() {
        Some(g) => Ok(Some(CommentId(be_u64(&g.key().map_err(engine_err)?, 0)))),
        None => Ok(None),
    }
}

struct Touched {
    before: Option<CommentRecord>,
    now: Option<CommentRecord>,
}

/// Comments touched by the current batch, in first-touch order.
#[derive(Default)]
pub(super) struct CommentOverlay {
    touched: HashMap<u64, Touched, foldhash::fast::RandomState>,
    order: Vec<u64>,
    moderation: ModerationRows,
}

fn decode(id: CommentId, v: &[u8]) -> StoreResult<CommentRecord> {
    CommentRecord::decode(id, v)
        .map_err(|e| StoreError::Corrupt { keyspace: "comments", detail: e.to_string() })
}

impl EmbeddedStore {
    fn load_comment(&self, id: CommentId) -> StoreResult<Option<CommentRecord>> {
        load(&self.inner.comment_posts, &self.inner.comments, id)
    }
}

fn load(comment_posts: &Keyspace, comments: &Keyspace, id: CommentId) -> StoreResult<Option<CommentRecord>> {
    let Some(post) = comment_posts.get(id.0.to_be_bytes()).map_err(engine_err)? else {
        return Ok(None);
    };
    if post.len() != 8 {
        return Err(StoreError::Corrupt { keyspace: "comment_posts", detail: "bad value".into() });
    }
    match comments.get(pair_key(be_u64(&post, 0), id.0)).map_err(engine_err)? {
        Some(v) => decode(id, &v).map(Some),
        None => Ok(None),
    }
}

/// The moderation rows of the comments a batch touched, each written once, with its final
/// state, when the batch is flushed: new comments' text fingerprints (their authors'), and the
/// [`review`] state (why a comment is held, its review-queue entry). In the batch that writes
/// the comments, so a crash never leaves a held comment out of the queue or without its
/// reason, and a status and its queue entry change together. (The moderation module writes
/// these rows too, outside the write lock; a new comment's ID is known to nobody else yet.)
#[derive(Default)]
struct ModerationRows {
    fingerprints: Vec<(u64, u64, u64)>,
    holds: HashMap<u64, HeldBy, foldhash::fast::RandomState>,
    queue: HashMap<u64, bool, foldhash::fast::RandomState>,
}

impl ModerationRows {
    fn add(&mut self, op: &CommentOp, r: &CommentRecord, review: Review) {
        if let CommentOp::Create(..) = op {
            self.fingerprints.push((r.author.0, r.id.0, r.simhash));
        }
        if let Some(h) = review.held_by {
            self.holds.insert(r.id.0, h);
        }
        if let Some(q) = review.queued {
            self.queue.insert(r.id.0, q);
        }
    }

    fn flush(&self, b: &mut Batch<'_>) {
        let s = b.s;
        for (user, id, simhash) in &self.fingerprints {
            b.batch.insert(&s.fingerprints, pair_key(*user, *id), simhash.to_be_bytes());
        }
        for (id, h) in &self.holds {
            b.batch.insert(&s.holds, id.to_be_bytes(), [V1, h.code()]);
        }
        for (id, queued) in &self.queue {
            if *queued {
                b.batch.insert(&s.mod_queue, id.to_be_bytes(), []);
            } else {
                b.batch.remove(&s.mod_queue, id.to_be_bytes());
            }
        }
    }
}

impl CommentOverlay {
    /// Apply one comment operation: read what it involves, let
    /// [`likewise_core::comment::transition`] plan it, write the plan into the overlay and
    /// its events into the batch.
    pub(super) fn apply(
        &mut self,
        b: &mut Batch<'_>,
        op: &CommentOp,
        now_ms: u64,
    ) -> StoreResult<CommentOutcome> {
        // The batch runs under the write lock, so what is read here (the overlay over the
        // stored rows) is what the operation applies to: a reply and its parent's delete
        // always see each other.
        let before = match op.id() {
            None => {
                let parent = match create_parent(op) {
                    Some(p) => self.current(b.s, p)?,
                    None => None,
                };
                Before::New(b.s.id_gen.lock().next(now_ms), parent)
            }
            Some(id) => match self.current(b.s, id)? {
                None => Before::Missing,
                Some(c) => {
                    let thread = self.thread(b.s, op, &c)?;
                    Before::Stored(c, thread)
                }
            },
        };
        let plan = transition(op, before, now_ms);
        let review = review(op, &plan);
        for w in plan.writes {
            self.write(w);
        }
        for e in plan.events {
            b.event(e);
        }
        if let CommentOutcome::Done(Some(r)) = &plan.outcome {
            self.moderation.add(op, r, review);
        }
        Ok(plan.outcome)
    }

    /// The comment as this batch left it, or as stored (then remembered as touched).
    fn current(&mut self, s: &Inner, id: CommentId) -> StoreResult<Option<CommentRecord>> {
        if let Some(t) = self.touched.get(&id.0) {
            return Ok(t.now.clone());
        }
        let before = load(&s.comment_posts, &s.comments, id)?;
        self.order.push(id.0);
        self.touched.insert(id.0, Touched { before: before.clone(), now: before.clone() });
        Ok(before)
    }

    /// The facts of `c`'s thread that planning `op` needs ([`thread_reads`]), as this batch
    /// left them.
    fn thread(&mut self, s: &Inner, op: &CommentOp, c: &CommentRecord) -> StoreResult<Thread> {
        let want = thread_reads(op, c);
        let mut thread = Thread::default();
        if want.has_replies {
            thread.has_replies = self.has_replies(s, c.id, None)?;
        }
        if let Some(p) = c.parent {
            if want.parent {
                thread.parent = self.current(s, p)?;
            }
            if want.siblings {
                thread.has_siblings = self.has_replies(s, p, Some(c.id))?;
            }
        }
        if want.visible_replies {
            thread.visible_replies = self.visible_replies(s, c.id)?;
        }
        Ok(thread)
    }

    /// The replies in status visible under `id` once this batch's earlier changes are
    /// counted in, in ID order.
    fn visible_replies(&self, s: &Inner, id: CommentId) -> StoreResult<Vec<VisibleReply>> {
        let mut all: Vec<CommentRecord> = Vec::new();
        for g in s.replies.prefix(id.0.to_be_bytes()) {
            let reply = CommentId(be_u64(&g.key().map_err(engine_err)?, 8));
            match self.touched.get(&reply.0) {
                Some(t) => all.extend(t.now.clone()),
                None => all.extend(load(&s.comment_posts, &s.comments, reply)?),
            }
        }
        let created = self.touched.values().filter(|t| t.before.is_none());
        all.extend(created.filter_map(|t| t.now.clone()).filter(|r| r.parent == Some(id)));
        all.sort_unstable_by_key(|r| r.id);
        Ok(all
            .into_iter()
            .filter(|r| r.status == CommentStatus::Visible)
            .map(|r| VisibleReply { id: r.id, author: r.author, mention: r.reply_to_user })
            .collect())
    }

    /// Are replies (other than `except`) stored under `id` once this batch's earlier changes
    /// are counted in: the stored ones it did not remove, and the ones it created?
    fn has_replies(&self, s: &Inner, id: CommentId, except: Option<CommentId>) -> StoreResult<bool> {
        let other = |reply: u64| except.is_none_or(|e| e.0 != reply);
        for g in s.replies.prefix(id.0.to_be_bytes()) {
            let reply = be_u64(&g.key().map_err(engine_err)?, 8);
            if other(reply) && self.touched.get(&reply).is_none_or(|t| t.now.is_some()) {
                return Ok(true);
            }
        }
        Ok(self.touched.iter().any(|(reply, t)| {
            other(*reply) && t.before.is_none() && t.now.as_ref().is_some_and(|r| r.parent == Some(id))
        }))
    }

    /// Record a planned row write as the comment's state after this operation.
    fn write(&mut self, w: RowWrite) {
        match w {
            RowWrite::Insert(r) => {
                self.order.push(r.id.0);
                self.touched.insert(r.id.0, Touched { before: None, now: Some(r) });
            }
            RowWrite::Update(r) => self.set(r.id, Some(r)),
            RowWrite::Remove(r) => self.set(r.id, None),
        }
    }

    fn set(&mut self, id: CommentId, now: Option<CommentRecord>) {
        if let Some(t) = self.touched.get_mut(&id.0) {
            t.now = now;
        }
    }

    /// Write each touched comment once with its final state, with its index rows.
    pub(super) fn flush(&self, b: &mut Batch<'_>) {
        self.moderation.flush(b);
        let s = b.s;
        for id in &self.order {
            let t = &self.touched[id];
            if t.before == t.now {
                continue;
            }
            // An author's held replies: the key's fields never change, only membership does.
            match (t.before.as_ref().filter(|r| held_reply(r)), t.now.as_ref().filter(|r| held_reply(r))) {
                (Some(r), None) => b.batch.remove(&s.held_replies, held_reply_key(r)),
                (None, Some(r)) => {
                    b.batch.insert(&s.held_replies, held_reply_key(r), held_reply_parent(r));
                }
                _ => {}
            }
            match (&t.before, &t.now) {
                (_, Some(r)) => {
                    b.batch.insert(&s.comments, pair_key(r.post.0, *id), r.encode());
                    if t.before.is_none() {
                        b.batch.insert(&s.comment_posts, id.to_be_bytes(), r.post.0.to_be_bytes());
                        match r.parent {
                            None => b.batch.insert(&s.top_comments, pair_key(r.post.0, *id), []),
                            Some(p) => b.batch.insert(&s.replies, pair_key(p.0, *id), r.post.0.to_be_bytes()),
                        }
                    }
                }
                (Some(r), None) => {
                    b.batch.remove(&s.comments, pair_key(r.post.0, *id));
                    b.batch.remove(&s.comment_posts, id.to_be_bytes());
                    match r.parent {
                        None => b.batch.remove(&s.top_comments, pair_key(r.post.0, *id)),
                        Some(p) => b.batch.remove(&s.replies, pair_key(p.0, *id)),
                    }
                }
                (None, None) => {}
            }
        }
    }
}

/// The key of `held_replies` that marks a store as indexed (every other key is 24 bytes).
const HELD_REPLIES_INDEXED: [u8; 1] = [0];

/// Is `r` a reply held back from others (an entry of `held_replies`)?
fn held_reply(r: &CommentRecord) -> bool {
    r.parent.is_some() && r.status.is_held()
}

fn held_reply_key(r: &CommentRecord) -> [u8; 24] {
    let mut k = [0u8; 24];
    k[..8].copy_from_slice(&r.author.0.to_be_bytes());
    k[8..16].copy_from_slice(&r.post.0.to_be_bytes());
    k[16..].copy_from_slice(&r.id.0.to_be_bytes());
    k
}

fn held_reply_parent(r: &CommentRecord) -> [u8; 8] {
    r.parent.map_or(0, |p| p.0).to_be_bytes()
}

/// Fill `held_replies` in a store written before it existed (at open, before any writer
/// runs): every held comment has a hold row (`holds`, the reason the review queue shows), so
/// those are the only records to read. One batch with the marker: a crash part way leaves
/// the store unindexed, to be indexed at the next open.
pub(super) fn index_held_replies(s: &Inner) -> StoreResult<()> {
    if s.held_replies.get(HELD_REPLIES_INDEXED).map_err(engine_err)?.is_some() {
        return Ok(());
    }
    let mut batch = s.db.batch();
    let mut n = 0usize;
    for kv in s.holds.iter() {
        let k = kv.key().map_err(engine_err)?;
        if k.len() != 8 {
            return Err(StoreError::Corrupt {
                keyspace: "holds",
                detail: format!("a key of {} bytes", k.len()),
            });
        }
        if let Some(r) = load(&s.comment_posts, &s.comments, CommentId(be_u64(&k, 0)))?
            && held_reply(&r)
        {
            batch.insert(&s.held_replies, held_reply_key(&r), held_reply_parent(&r));
            n += 1;
        }
    }
    batch.insert(&s.held_replies, HELD_REPLIES_INDEXED, []);
    batch.commit().map_err(engine_err)?;
    if n > 0 {
        tracing::info!(replies = n, "indexed the held replies by author");
    }
    Ok(())
}

#[async_trait]
impl CommentReader for EmbeddedStore {
    async fn comments(&self, ids: &[CommentId]) -> StoreResult<Vec<Option<CommentRecord>>> {
        ids.iter().map(|id| self.load_comment(*id)).collect()
    }

    async fn top_level(
        &self,
        post: PostId,
        newest_first: bool,
        after: Option<CommentId>,
        limit: usize,
    ) -> StoreResult<Vec<CommentRecord>> {
        let s = &*self.inner;
        let lo = pair_key(post.0, 0);
        let hi = pair_key(post.0, u64::MAX);
        let ids: Vec<u64> = if newest_first {
            let end = after.map_or(hi, |a| pair_key(post.0, a.0.saturating_sub(1)));
            collect_ids(s.top_comments.range(lo..=end).rev().take(limit))?
        } else {
            let start = after.map_or(lo, |a| pair_key(post.0, a.0.saturating_add(1)));
            collect_ids(s.top_comments.range(start..=hi).take(limit))?
        };
        ids.into_iter()
            .filter_map(|id| match s.comments.get(pair_key(post.0, id)) {
                Ok(Some(v)) => Some(decode(CommentId(id), &v)),
                Ok(None) => None,
                Err(e) => Some(Err(engine_err(e))),
            })
            .collect()
    }

    async fn replies(
        &self,
        parent: CommentId,
        after: Option<CommentId>,
        limit: usize,
    ) -> StoreResult<Vec<CommentRecord>> {
        let s = &*self.inner;
        let start = pair_key(parent.0, after.map_or(0, |a| a.0.saturating_add(1)));
        let mut out = Vec::new();
        for g in s.replies.range(start..=pair_key(parent.0, u64::MAX)).take(limit) {
            let (k, v) = g.into_inner().map_err(engine_err)?;
            let id = be_u64(&k, 8);
            if v.len() != 8 {
                return Err(StoreError::Corrupt { keyspace: "replies", detail: "bad value".into() });
            }
            if let Some(r) = s.comments.get(pair_key(be_u64(&v, 0), id)).map_err(engine_err)? {
                out.push(decode(CommentId(id), &r)?);
            }
        }
        Ok(out)
    }

    async fn held_replies_by(
        &self,
        author: UserId,
        posts: &[PostId],
        limit: usize,
    ) -> StoreResult<Vec<CommentRecord>> {
        let s = &*self.inner;
        let mut out = Vec::new();
        // The usual answer: no held reply by this author anywhere, one seek.
        if limit == 0 || s.held_replies.prefix(author.0.to_be_bytes()).next().is_none() {
            return Ok(out);
        }
        for post in posts {
            for g in s.held_replies.prefix(pair_key(author.0, post.0)) {
                if out.len() >= limit {
                    return Ok(out);
                }
                let k = g.key().map_err(engine_err)?;
                if k.len() != 24 {
                    let detail = format!("a key of {} bytes", k.len());
                    return Err(StoreError::Corrupt { keyspace: "held_replies", detail });
                }
                // A record the index lists may be changed meanwhile: the caller decides by it.
                if let Some(r) = s.comments.get(pair_key(post.0, be_u64(&k, 16))).map_err(engine_err)? {
                    out.push(decode(CommentId(be_u64(&k, 16)), &r)?);
                }
            }
        }
        Ok(out)
    }

    async fn visible_reply_counts(&self, parents: &[CommentId]) -> StoreResult<Vec<i64>> {
        let s = &*self.inner;
        let mut out = Vec::with_capacity(parents.len());
        for parent in parents {
            let mut n = 0;
            for g in s.replies.prefix(parent.0.to_be_bytes()) {
                let (k, v) = g.into_inner().map_err(engine_err)?;
                if k.len() != 16 || v.len() != 8 {
                    return Err(StoreError::Corrupt { keyspace: "replies", detail: "bad entry".into() });
                }
                let id = be_u64(&k, 8);
                if let Some(r) = s.comments.get(pair_key(be_u64(&v, 0), id)).map_err(engine_err)?
                    && decode(CommentId(id), &r)?.status == CommentStatus::Visible
                {
                    n += 1;
                }
            }
            out.push(n);
        }
        Ok(out)
    }
}

fn collect_ids(iter: impl Iterator<Item = fjall::Guard>) -> StoreResult<Vec<u64>> {
    iter.map(|g| g.key().map(|k| be_u64(&k, 8)).map_err(engine_err)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embedded::EmbeddedOptions;
    use likewise_core::ports::WriteEngine;
    use likewise_core::write::{WriteOp, WriteOutcome};

    fn create(store: &EmbeddedStore, parent: Option<CommentId>, held: Option<HeldBy>) -> CommentId {
        let status = if held.is_some() { CommentStatus::HiddenByFilter } else { CommentStatus::Visible };
        let rec = CommentRecord {
            id: CommentId(0),
            post: PostId(3),
            author: UserId(5),
            post_author: UserId(7),
            parent,
            reply_to_user: None,
            status,
            text: "a reply".into(),
            simhash: 1,
        };
        match store.apply(&[WriteOp::Comment(CommentOp::Create(rec, held))]).expect("apply").pop() {
            Some(WriteOutcome::Comment(CommentOutcome::Done(Some(r)))) => r.id,
            other => panic!("create answered {other:?}"),
        }
    }

    /// A store written before `held_replies` existed (no entries, no marker) has its held
    /// replies indexed at the next open, from the hold rows.
    #[tokio::test]
    async fn held_replies_of_a_store_written_before_the_index_are_indexed_at_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = EmbeddedOptions::default();
        let held = {
            let store = EmbeddedStore::open(dir.path(), &opts).expect("open");
            let top = create(&store, None, None);
            let held = create(&store, Some(top), Some(HeldBy::HiddenWords));
            let listed = store.held_replies_by(UserId(5), &[PostId(3)], 10).await.expect("held");
            assert_eq!(listed.iter().map(|r| r.id).collect::<Vec<_>>(), [held]);
            // As an older store left it: no index, no marker.
            let s = &*store.inner;
            let keys: Vec<Vec<u8>> =
                s.held_replies.iter().map(|kv| kv.key().expect("key").to_vec()).collect();
            let mut batch = s.db.batch();
            for k in keys {
                batch.remove(&s.held_replies, k);
            }
            batch.commit().expect("commit");
            assert!(store.held_replies_by(UserId(5), &[PostId(3)], 10).await.expect("held").is_empty());
            store.sync().expect("sync");
            held
        };
        let store = EmbeddedStore::open(dir.path(), &opts).expect("reopen");
        let listed = store.held_replies_by(UserId(5), &[PostId(3)], 10).await.expect("held");
        assert_eq!(listed.iter().map(|r| r.id).collect::<Vec<_>>(), [held], "indexed at open");
        assert!(store.inner.held_replies.get(HELD_REPLIES_INDEXED).expect("marker").is_some());
    }
}
