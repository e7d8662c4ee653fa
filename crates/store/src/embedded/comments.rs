//! Comments on the embedded engine.
//!
//! | keyspace        | key              | value          | why                                   |
//! |-----------------|------------------|----------------|---------------------------------------|
//! | `comments`      | post(8) id(8)    | record v1      | partitioned by post, clustered by ID  |
//! | `top_comments`  | post(8) id(8)    | (empty)        | keyset pages of top-level comments    |
//! | `replies`       | parent(8) id(8)  | post(8)        | replies under their top-level parent  |
//! | `comment_posts` | id(8)            | post(8)        | find a comment's post from its ID     |
//!
//! Comment changes go through the same batch as likes (see `write.rs`); each touched comment
//! is written once per batch with its final state, and every real change emits one event
//! whose delta says how the visible counts move.

use super::write::BatchState;
use super::{EmbeddedStore, engine_err};
use crate::keys::{be_u64, pair_key};
use async_trait::async_trait;
use fjall::Keyspace;
use likewise_core::event::{Event, EventKind};
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::like::Target;
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
}

fn visible(r: Option<&CommentRecord>) -> i8 {
    i8::from(r.is_some_and(|r| r.status.counts_as_visible()))
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

impl BatchState<'_> {
    fn current(&mut self, id: CommentId) -> StoreResult<Option<CommentRecord>> {
        if let Some(t) = self.comments.touched.get(&id.0) {
            return Ok(t.now.clone());
        }
        let before = load(&self.s.comment_posts, &self.s.comments, id)?;
        self.comments.order.push(id.0);
        self.comments.touched.insert(id.0, Touched { before: before.clone(), now: before.clone() });
        Ok(before)
    }

    fn set(&mut self, id: CommentId, now: Option<CommentRecord>) {
        if let Some(t) = self.comments.touched.get_mut(&id.0) {
            t.now = now;
        }
    }

    fn comment_event(&mut self, kind: EventKind, r: &CommentRecord, actor: UserId, delta: i8, ts: u64) {
        self.event(Event {
            seq: 0,
            kind,
            target: Target::comment(r.id.0),
            target_author: r.post_author,
            actor,
            ts_ms: ts,
            post: r.post.0,
            parent: r.parent.map_or(0, |p| p.0),
            delta,
        });
    }

    fn has_replies(&self, id: CommentId) -> StoreResult<bool> {
        let stored = match self.s.replies.prefix(id.0.to_be_bytes()).next() {
            Some(g) => {
                g.key().map_err(engine_err)?;
                true
            }
            None => false,
        };
        let in_batch = self
            .comments
            .touched
            .values()
            .any(|t| t.before.is_none() && t.now.as_ref().is_some_and(|r| r.parent == Some(id)));
        Ok(stored || in_batch)
    }

    /// Apply one comment operation.
    pub(super) fn comment(&mut self, op: &CommentOp, now_ms: u64) -> StoreResult<CommentOutcome> {
        match op {
            CommentOp::Create(rec) => {
                let id = self.s.id_gen.lock().next(now_ms);
                let mut r = rec.clone();
                r.id = id;
                self.comments.order.push(id.0);
                self.comments.touched.insert(id.0, Touched { before: None, now: Some(r.clone()) });
                self.comment_event(EventKind::CommentCreated, &r, r.author, visible(Some(&r)), now_ms);
                Ok(CommentOutcome::Done(Some(r)))
            }
            // The event's actor is the comment's author, whoever decided (see docs/events.md).
            CommentOp::SetStatus { id, status, actor: _ } => {
                let Some(old) = self.current(*id)? else { return Ok(CommentOutcome::NotFound) };
                if old.status == *status || old.status.is_deleted() {
                    return Ok(CommentOutcome::Done(Some(old)));
                }
                let mut r = old.clone();
                r.status = *status;
                let delta = visible(Some(&r)) - visible(Some(&old));
                self.set(*id, Some(r.clone()));
                self.comment_event(EventKind::CommentStatusChanged, &r, r.author, delta, now_ms);
                Ok(CommentOutcome::Done(Some(r)))
            }
            CommentOp::Delete { id, actor: _ } => {
                let Some(old) = self.current(*id)? else { return Ok(CommentOutcome::NotFound) };
                if old.status.is_deleted() {
                    return Ok(CommentOutcome::Done(Some(old)));
                }
                let placeholder = old.parent.is_none() && self.has_replies(*id)?;
                let now = placeholder.then(|| CommentRecord {
                    status: old.status.deleted_from(),
                    text: String::new(),
                    ..old.clone()
                });
                let delta = -visible(Some(&old));
                self.set(*id, now.clone());
                self.comment_event(EventKind::CommentDeleted, &old, old.author, delta, now_ms);
                Ok(CommentOutcome::Done(now))
            }
        }
    }

    /// Write each touched comment once with its final state, with its index rows.
    pub(super) fn flush_comments(&mut self) {
        let s = self.s;
        for id in &self.comments.order {
            let t = &self.comments.touched[id];
            if t.before == t.now {
                continue;
            }
            match (&t.before, &t.now) {
                (_, Some(r)) => {
                    self.batch.insert(&s.comments, pair_key(r.post.0, *id), r.encode());
                    if t.before.is_none() {
                        self.batch.insert(&s.comment_posts, id.to_be_bytes(), r.post.0.to_be_bytes());
                        match r.parent {
                            None => self.batch.insert(&s.top_comments, pair_key(r.post.0, *id), []),
                            Some(p) => {
                                self.batch.insert(&s.replies, pair_key(p.0, *id), r.post.0.to_be_bytes())
                            }
                        }
                    }
                }
                (Some(r), None) => {
                    self.batch.remove(&s.comments, pair_key(r.post.0, *id));
                    self.batch.remove(&s.comment_posts, id.to_be_bytes());
                    match r.parent {
                        None => self.batch.remove(&s.top_comments, pair_key(r.post.0, *id)),
                        Some(p) => self.batch.remove(&s.replies, pair_key(p.0, *id)),
                    }
                }
                (None, None) => {}
            }
        }
    }
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
}

fn collect_ids(iter: impl Iterator<Item = fjall::Guard>) -> StoreResult<Vec<u64>> {
    iter.map(|g| g.key().map(|k| be_u64(&k, 8)).map_err(engine_err)).collect()
}
