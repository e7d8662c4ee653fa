//! The ports: small traits a storage engine implements. The service holds them as
//! `Arc<dyn Port>`; the engine is picked in one place (`likewise-app`'s `engines.rs`). Every
//! engine passes the same conformance suite (`likewise_engine::conformance`).
//!
//! - this module: the storage ports every engine serves (writes, likes, the event log,
//!   counters, comments, upstream data, moderation, integrity verdicts, views,
//!   notifications);
//! - [`cluster`]: what a scaled-out deployment adds: leases, the outbox and the stream it is
//!   relayed to, the reverse-index writer's target, and the bus between nodes.

pub mod cluster;

use crate::StoreResult;
use crate::comment::appeal::{HeldBy, QueueNote};
use crate::comment::idempotency::{IdempotencyKey, KeyRecord};
use crate::comment::pins::PinChange;
use crate::comment::record::CommentRecord;
use crate::counter::{CounterKey, Counts};
use crate::event::Event;
use crate::ids::CommentId;
use crate::ids::{PostId, UserId};
use crate::integrity::Decision;
use crate::like::{Target, TargetKind};
use crate::model::{PostMeta, UserProfile, ViewerSettings};
use crate::notify::NotifItem;
use crate::write::{WriteOp, WriteOutcome};
use async_trait::async_trait;

/// The write side, driven by the group committer on its own thread.
///
/// `apply` resolves a batch of operations in order (an op sees the state left by earlier ops
/// of the same batch), writes rows, index rows and one event per real change as ONE atomic
/// batch, and makes it visible. `sync` makes everything applied so far durable. The
/// committer acknowledges a request only after a `sync` that began after its `apply`.
pub trait WriteEngine: Send + Sync {
    /// Apply a batch atomically; outcomes are in the order of `ops`.
    fn apply(&self, ops: &[WriteOp]) -> StoreResult<Vec<WriteOutcome>>;
    /// Apply a batch, one result per operation, in the order of `ops`. An engine whose batch
    /// spans several servers (PostgreSQL shards) commits it in parts, and an operation of a
    /// part that committed must hear its outcome even when another part failed: an error
    /// for a stored write would make a client retry it. By default, `apply`'s result for all.
    fn apply_each(&self, ops: &[WriteOp]) -> Vec<StoreResult<WriteOutcome>> {
        match self.apply(ops) {
            Ok(outcomes) => outcomes.into_iter().map(Ok).collect(),
            Err(e) => ops.iter().map(|_| Err(e.duplicate())).collect(),
        }
    }
    /// Whether `e`, an operation's result from `apply_each`, means the engine wrote nothing of
    /// it and it is to run again in a later batch: its data is moving between servers for a
    /// moment (a PostgreSQL bucket move's fence). The committer holds such an operation
    /// back, with its place before later operations on the same key, and answers the rest
    /// of the batch at once. By default, never.
    fn retry_later(&self, _e: &crate::StoreError) -> bool {
        false
    }
    /// Make all applied batches durable (one fsync for many batches).
    fn sync(&self) -> StoreResult<()>;
    /// The engine's name in traces (`embedded`, `postgres`).
    fn name(&self) -> &'static str {
        "engine"
    }
}

/// One liker of a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liker {
    /// Who liked.
    pub user: UserId,
    /// When, milliseconds since the Unix epoch.
    pub liked_at_ms: u64,
}

/// Reads of the like rows and their user-keyed reverse index.
#[async_trait]
pub trait LikeReader: Send + Sync {
    /// For each target ID, has `user` liked it? One batched lookup on the user-keyed index.
    async fn liked_among(&self, user: UserId, kind: TargetKind, ids: &[u64]) -> StoreResult<Vec<bool>>;
    /// Up to `limit` target IDs of `kind` that `user` has liked (for per-user filters).
    async fn liked_ids(&self, user: UserId, kind: TargetKind, limit: usize) -> StoreResult<Vec<u64>>;
    /// Likers of a target, newest first, strictly after the `after` position of a previous page.
    async fn likers(&self, target: Target, after: Option<Liker>, limit: usize) -> StoreResult<Vec<Liker>>;
    /// The `limit` newest likers of each target, in order: what the count cache shows beside
    /// a count ("liked by ..."). An engine whose reads are remote answers a whole feed page
    /// in one round trip per shard; the default asks [`LikeReader::likers`] per target.
    async fn recent_likers_many(&self, targets: &[Target], limit: usize) -> StoreResult<Vec<Vec<Liker>>> {
        let mut out = Vec::with_capacity(targets.len());
        for t in targets {
            out.push(self.likers(*t, None, limit).await?);
        }
        Ok(out)
    }
}

/// The append-only event log (the transactional outbox).
#[async_trait]
pub trait EventLog: Send + Sync {
    /// Up to `max` events with `seq > after`, in order.
    async fn read_after(&self, after: u64, max: usize) -> StoreResult<Vec<Event>>;
    /// The highest sequence written so far (0 when empty).
    async fn head(&self) -> StoreResult<u64>;
    /// The highest sequence known to be durable, when the log serves events before they are
    /// (the embedded engine makes a batch visible before its fsync): a consumer whose effects
    /// leave the process (the export) reads no further, or a crash could take back an event
    /// it published and give its sequence to another. `None`: every event served is durable.
    /// Consumers that write into the same store need not wait: their writes come after the
    /// events' in the same journal, so a crash that loses an event loses their effects too.
    async fn durable_head(&self) -> StoreResult<Option<u64>> {
        Ok(None)
    }
    /// Drop events with `seq <= upto` (every consumer is past them and retention allows).
    async fn truncate(&self, upto: u64) -> StoreResult<u64>;
    /// The reader committed its effects up to `upto`: a log that delivers to one consumer
    /// (a stream consumer) may acknowledge and forget those events. Until then it must serve
    /// them again to `read_after` (a failed commit is retried from the same position).
    async fn committed(&self, _upto: u64) -> StoreResult<()> {
        Ok(())
    }
    /// Let go, now, of what this reader holds on its engine (a stream consumer), before a
    /// short-lived command's runtime ends; the default holds nothing. Reads after it fail.
    async fn close(&self) -> StoreResult<()> {
        Ok(())
    }
    /// Can this log be read directly from its start (`read_after(0, ..)`)? Not where the
    /// events are only reachable through a stream consumer (a sharded PostgreSQL store).
    fn readable(&self) -> bool {
        true
    }
}

/// A consistent recount of one target, taken from a single snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recount {
    /// Like rows that exist for the target.
    pub rows: i64,
    /// The stored like counter.
    pub counter: i64,
    /// The sum of like deltas for the target in events the consumer has not applied yet.
    pub pending: i64,
}

impl Recount {
    /// The repair to apply with the consumer's next batch so the counter equals the rows
    /// once the pending events are applied.
    pub fn drift(&self) -> i64 {
        self.rows - self.counter - self.pending
    }
}

/// The durable state of a consumer that keeps more than an offset (trending windows): one
/// body per name, saved together with the consumer's offset.
#[async_trait]
pub trait SnapshotStore: Send + Sync {
    /// The last body saved under `name` and the log position it covers.
    async fn load_snapshot(&self, name: &str) -> StoreResult<Option<(u64, Vec<u8>)>>;
    /// Save `body`, which covers the log up to `upto`, and move the consumer offset `name` to
    /// `upto`, in one atomic write (so log truncation never passes what the body lacks).
    async fn save_snapshot(&self, name: &str, upto: u64, body: &[u8]) -> StoreResult<()>;

    /// The snapshots of `names` ([`SnapshotStore::load_snapshot`] of each), in their order,
    /// read together.
    async fn load_snapshots(&self, names: &[String]) -> StoreResult<Vec<Option<(u64, Vec<u8>)>>> {
        let mut out = Vec::with_capacity(names.len());
        for n in names {
            out.push(self.load_snapshot(n).await?);
        }
        Ok(out)
    }

    /// Take a new writer fence for snapshot `name` (one partition of a consumer): from now
    /// on [`SnapshotStore::save_snapshots`] refuses the saves that carry an older one. Called
    /// by a writer before it loads the snapshot it resumes from, so a predecessor's save
    /// still in flight either lands before that load or not at all.
    async fn fence_snapshot(&self, name: &str) -> StoreResult<u64>;

    /// Save every snapshot of `saves`, each with its offset, in one atomic write, unless one
    /// carries a fence that is no longer its name's latest: then nothing is written and the
    /// error is `StoreError::Superseded` naming (comma-separated) those fenced off. The
    /// names keep their offsets in one place (one offset shard).
    async fn save_snapshots(&self, saves: &[SnapshotSave]) -> StoreResult<()>;
}

/// One snapshot of a fenced batch ([`SnapshotStore::save_snapshots`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotSave {
    /// The snapshot's (and its offset's) name.
    pub name: String,
    /// The writer fence it was taken under ([`SnapshotStore::fence_snapshot`]).
    pub fence: u64,
    /// The log position the body covers.
    pub upto: u64,
    /// The body.
    pub body: Vec<u8>,
}

/// Moderators' verdicts on accounts the integrity consumer flagged: the latest per account
/// (`POST /v1/moderation/integrity/{user_id}`, any API node), read by the consumer in the
/// order they were given.
#[async_trait]
pub trait IntegrityStore: Send + Sync {
    /// Store `d` as its account's verdict, replacing any earlier one (durable on return).
    async fn put_decision(&self, d: Decision) -> StoreResult<()>;
    /// The verdict of each account, in order (`None`: never decided).
    async fn decisions(&self, users: &[UserId]) -> StoreResult<Vec<Option<Decision>>>;
    /// Up to `limit` verdicts in `(at_ms, user)` order, strictly after `after` (a keyset page).
    async fn decisions_after(&self, after: (u64, UserId), limit: usize) -> StoreResult<Vec<Decision>>;
}

/// Stored `Idempotency-Key`s of comment creates (written by the write path with their
/// comment, see `WriteOp::KeyedComment`).
#[async_trait]
pub trait IdempotencyStore: Send + Sync {
    /// The key `caller` stored, if it is still kept. `post` is the post the request names:
    /// an engine that keeps keys beside their comments (one shard per post) looks there.
    async fn find_key(
        &self,
        caller: UserId,
        key: &IdempotencyKey,
        post: PostId,
    ) -> StoreResult<Option<KeyRecord>>;
    /// Remove keys stored before `created_before_ms`; returns how many were removed.
    async fn purge_keys(&self, created_before_ms: u64) -> StoreResult<u64>;
    /// How many keys are kept.
    async fn key_count(&self) -> StoreResult<u64>;
}

/// Derived counters and consumer offsets.
#[async_trait]
pub trait CounterStore: Send + Sync {
    /// The counters of each target, in order (zeroes for unknown targets).
    async fn counts(&self, targets: &[Target]) -> StoreResult<Vec<Counts>>;
    /// Apply summed deltas and move `consumer`'s offset from `from` to `upto` in ONE atomic
    /// write, so a crash can never apply a delta twice or drop one. Returns each counter's
    /// new value.
    ///
    /// A compare-and-set: when the stored offset is not `from` (0 when none is stored),
    /// nothing is written and the call fails. Then another process took this consumer over
    /// (a standby after a partition), or an earlier attempt whose answer was lost (a commit
    /// acknowledged by the server but not heard) already moved it: the caller re-reads
    /// [`CounterStore::offset`] and goes on from there, never applying a window twice.
    async fn apply_deltas(
        &self,
        consumer: &str,
        from: u64,
        upto: u64,
        deltas: &[(CounterKey, i64)],
    ) -> StoreResult<Vec<(CounterKey, i64)>>;
    /// The last log position `consumer` has applied (0 when none).
    async fn offset(&self, consumer: &str) -> StoreResult<u64>;
    /// Recount a target's likes from its rows, in one snapshot with the counter and the
    /// events `consumer` has not applied yet (see [`Recount::drift`]).
    async fn recount_likes(&self, consumer: &str, target: Target) -> StoreResult<Recount>;
    /// Recount a post's counted comments the same way: visible top-level comments, and
    /// visible replies under a parent that opens its thread
    /// ([`crate::comment::thread::counted`]).
    async fn recount_comments(&self, consumer: &str, post: PostId) -> StoreResult<Recount>;
    /// Recount the `reply_count` of each top-level comment of `post` with replies the same
    /// way, in one snapshot: its visible replies while it opens its thread, none otherwise.
    /// One entry per such comment, in ID order.
    async fn recount_replies(&self, consumer: &str, post: PostId) -> StoreResult<Vec<(CommentId, Recount)>>;
    /// Every post that has a like counter, for `reconcile --all` (ascending, after `after`).
    async fn counted_posts(&self, after: Option<PostId>, limit: usize) -> StoreResult<Vec<PostId>>;
    /// Each post's like count as it will be once `consumer` (the counter aggregator; an
    /// engine with one aggregator per shard reads `<consumer>@<shard>`, see
    /// [`cluster::shard_consumer`]) has applied every event written so far: the stored
    /// counter plus the like deltas of the events it has not applied yet, in one snapshot.
    /// What a post's author sees (docs/architecture.md, "The read path"): it includes every acknowledged like,
    /// at the cost of reading the unapplied events, so it is not for everyone's feed.
    async fn fresh_post_likes(&self, consumer: &str, posts: &[PostId]) -> StoreResult<Vec<i64>>;
    /// The counters of each target and, for posts, their `n` newest likers (newest first)
    /// where this store keeps them: a shared cache the aggregator keeps them in
    /// ([`CounterStore::likers_committed`]) answers a count cache's refresh in one read.
    /// `None`: not kept here; the caller asks [`LikeReader::recent_likers_many`]. The
    /// default keeps none.
    async fn counts_and_likers(
        &self,
        targets: &[Target],
        n: usize,
    ) -> StoreResult<Vec<(Counts, Option<Vec<UserId>>)>> {
        let _ = n;
        Ok(self.counts(targets).await?.into_iter().map(|c| (c, None)).collect())
    }
    /// The aggregator committed `events` (their counters are stored): a store that keeps
    /// posts' `n` newest likers ([`CounterStore::counts_and_likers`]) updates them. It never
    /// fails the commit: what it cannot write it forgets, and readers reload it. The default
    /// keeps none.
    async fn likers_committed(&self, events: &[Event], n: usize) {
        let _ = (events, n);
    }
}

/// Upstream data: posts, users, follows, settings.
#[async_trait]
pub trait MetaStore: Send + Sync {
    /// Create or replace a post's metadata.
    async fn put_post(&self, id: PostId, meta: PostMeta) -> StoreResult<()>;
    /// Metadata of each post, in order.
    async fn posts(&self, ids: &[PostId]) -> StoreResult<Vec<Option<PostMeta>>>;
    /// Create or replace a user's profile.
    async fn put_user(&self, id: UserId, profile: UserProfile) -> StoreResult<()>;
    /// Profiles of each user, in order.
    async fn users(&self, ids: &[UserId]) -> StoreResult<Vec<Option<UserProfile>>>;
    /// Make `follower` follow (or stop following) `followee`.
    async fn set_follow(&self, follower: UserId, followee: UserId, follows: bool) -> StoreResult<()>;
    /// Up to `limit` users `follower` follows.
    async fn followees(&self, follower: UserId, limit: usize) -> StoreResult<Vec<UserId>>;
    /// Store a viewer's settings.
    async fn put_settings(&self, user: UserId, settings: ViewerSettings) -> StoreResult<()>;
    /// A viewer's settings (defaults when never set).
    async fn settings(&self, user: UserId) -> StoreResult<ViewerSettings>;
    /// Cheap liveness probe of the storage.
    async fn ping(&self) -> StoreResult<()>;
}

/// Reads of comments.
#[async_trait]
pub trait CommentReader: Send + Sync {
    /// Each comment, in order (`None` when it does not exist).
    async fn comments(&self, ids: &[CommentId]) -> StoreResult<Vec<Option<CommentRecord>>>;
    /// Top-level comments of a post by ID, newest or oldest first, strictly after `after`
    /// (a keyset page: the cost does not depend on the depth). All statuses.
    async fn top_level(
        &self,
        post: PostId,
        newest_first: bool,
        after: Option<CommentId>,
        limit: usize,
    ) -> StoreResult<Vec<CommentRecord>>;
    /// Replies under a top-level comment, oldest first, strictly after `after`. All statuses.
    async fn replies(
        &self,
        parent: CommentId,
        after: Option<CommentId>,
        limit: usize,
    ) -> StoreResult<Vec<CommentRecord>>;
    /// `author`'s held replies (pending, hidden by a filter or restricted: held back from
    /// others, shown to their author as ordinary ones) on any of `posts`, at most `limit`, in
    /// no particular order. Read through an index by author kept in the write that changes
    /// the comment, so an author with none on the posts asked about costs one lookup per
    /// shard: a feed page asks it for every viewer.
    async fn held_replies_by(
        &self,
        author: UserId,
        posts: &[PostId],
        limit: usize,
    ) -> StoreResult<Vec<CommentRecord>>;
    /// Whether `author` has any held reply at all (on any post). `true` when not known
    /// cheaply: the default, which makes callers read [`CommentReader::held_replies_by`].
    async fn any_held_replies_by(&self, author: UserId) -> StoreResult<bool> {
        let _ = author;
        Ok(true)
    }
    /// How many replies in status visible are stored under each of `parents` (top-level
    /// comments), in order; 0 for one without replies or missing. Under a parent held back
    /// from others the shared counters leave these out (`likewise_core::comment::thread`),
    /// yet the parent's author sees them: this counts them for that author alone. Read from
    /// the primaries, for a viewer's own held comments (few), in one lookup per shard.
    async fn visible_reply_counts(&self, parents: &[CommentId]) -> StoreResult<Vec<i64>>;
}

/// Why a comment was reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportReason {
    /// Spam.
    Spam,
    /// Bullying or harassment.
    Bullying,
    /// Anything else.
    Other,
}

impl ReportReason {
    /// Stable one-byte code.
    pub fn code(self) -> u8 {
        match self {
            ReportReason::Spam => 1,
            ReportReason::Bullying => 2,
            ReportReason::Other => 3,
        }
    }
}

/// Moderation state: blocks, restricts, hidden words, pins, reports, the review queue and the
/// recent text fingerprints used for near-duplicate detection.
#[async_trait]
pub trait ModerationStore: Send + Sync {
    /// `owner` blocks (or unblocks) `other`.
    async fn set_block(&self, owner: UserId, other: UserId, on: bool) -> StoreResult<()>;
    /// Has `owner` blocked `other`?
    async fn is_blocked(&self, owner: UserId, other: UserId) -> StoreResult<bool>;
    /// Up to `limit` users `owner` has blocked (ascending IDs).
    async fn blocked_users(&self, owner: UserId, limit: usize) -> StoreResult<Vec<UserId>>;
    /// `owner` restricts (or stops restricting) `other`.
    async fn set_restrict(&self, owner: UserId, other: UserId, on: bool) -> StoreResult<()>;
    /// Has `owner` restricted `other`?
    async fn is_restricted(&self, owner: UserId, other: UserId) -> StoreResult<bool>;
    /// Replace `owner`'s hidden-words list.
    async fn put_hidden_words(&self, owner: UserId, words: &[String]) -> StoreResult<()>;
    /// `owner`'s hidden-words list (empty when never set).
    async fn hidden_words(&self, owner: UserId) -> StoreResult<Vec<String>>;
    /// Replace a post's pinned comments (in pin order).
    async fn set_pins(&self, post: PostId, pins: &[CommentId]) -> StoreResult<()>;
    /// A post's pinned comments, in pin order.
    async fn pins(&self, post: PostId) -> StoreResult<Vec<CommentId>>;
    /// The pinned comments of each post, in `posts` order: one batched read (a feed page's
    /// previews need every post's pins).
    async fn pins_of(&self, posts: &[PostId]) -> StoreResult<Vec<Vec<CommentId>>>;
    /// Pin (or unpin) one comment: the post's pins are read, changed by
    /// [`crate::comment::pins::change_pins`] and written as one atomic step, so concurrent
    /// changes of one post's pins apply one after the other. Returns what the rule decided.
    async fn change_pin(&self, post: PostId, comment: CommentId, pin: bool) -> StoreResult<PinChange>;
    /// Record a report (one per reporter and comment): whether it counted, the comment's
    /// distinct reports, and how many of them came after its last approval
    /// ([`crate::comment::report`]).
    async fn add_report(
        &self,
        comment: CommentId,
        reporter: UserId,
        reason: ReportReason,
    ) -> StoreResult<crate::comment::report::ReportOutcome>;
    /// Distinct reports of each comment, in order.
    async fn report_counts(&self, comments: &[CommentId]) -> StoreResult<Vec<u32>>;
    /// Put a comment in (or take it out of) the review queue.
    async fn set_queued(&self, comment: CommentId, queued: bool) -> StoreResult<()>;
    /// Queued comments, oldest first, strictly after `after`.
    async fn queue(&self, after: Option<CommentId>, limit: usize) -> StoreResult<Vec<CommentId>>;
    /// Record which layer holds a comment. `None` clears it: approved, and in the same atomic
    /// write every report so far counts as reviewed (hiding it again takes new reporters).
    async fn set_held_by(&self, comment: CommentId, held_by: Option<HeldBy>) -> StoreResult<()>;
    /// Record the author's appeal of a comment, once: `false` (and nothing written) when the
    /// comment was already appealed. Two concurrent appeals: exactly one gets `true`.
    async fn add_appeal(&self, comment: CommentId, message: &str) -> StoreResult<bool>;
    /// Why each comment is held and its appeal, in order (defaults for unknown comments).
    async fn queue_notes(&self, comments: &[CommentId]) -> StoreResult<Vec<QueueNote>>;
    /// Remember the SimHash of a comment `user` wrote.
    async fn add_fingerprint(&self, user: UserId, comment: CommentId, simhash: u64) -> StoreResult<()>;
    /// `user`'s most recent fingerprints (newest first), at most `limit`, none older than
    /// `since_comment` (comment IDs are time-sortable, so this is a time bound).
    async fn fingerprints(
        &self,
        user: UserId,
        since_comment: CommentId,
        limit: usize,
    ) -> StoreResult<Vec<(CommentId, u64)>>;
}

/// A top-level comment's place in its post's "top" order (`comment::rank`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RankEntry {
    /// The post.
    pub post: PostId,
    /// The comment.
    pub comment: CommentId,
    /// Its author.
    pub author: UserId,
    /// Its base score (higher first; equal scores: higher ID first).
    pub score: f64,
    /// The post's author has replied to it (a ranking signal only events reveal, kept here).
    pub author_replied: bool,
    /// The post's author likes it.
    pub author_liked: bool,
    /// Its `comment::rank::weight_factor`: with the flags, what scoring a new like count needs.
    pub factor: f64,
    /// In everyone's order (visible, or the placeholder of a deleted comment with replies);
    /// `false`: held or hidden, shown only to those who may see it (its author, the post's
    /// author, moderators), so it takes no place in the order others walk.
    pub listed: bool,
}

/// A change of the rank index.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RankChange {
    /// Insert or move an entry.
    Put(RankEntry),
    /// Take a comment out (held, hidden, deleted without visible replies).
    Remove {
        /// Its post.
        post: PostId,
        /// The comment.
        comment: CommentId,
    },
}

/// Every post's ranked top-level comments, best first: the index behind `order=top`,
/// maintained from events by the aggregator (never rebuilt by scanning a post's comments).
#[async_trait]
pub trait RankIndex: Send + Sync {
    /// Apply changes in order, as one atomic write.
    async fn change_ranks(&self, changes: &[RankChange]) -> StoreResult<()>;
    /// The stored entries of these comments (on `post`'s shard), in order.
    async fn ranks_of(&self, post: PostId, comments: &[CommentId]) -> StoreResult<Vec<Option<RankEntry>>>;
    /// Up to `limit` unlisted entries of a post: `author`'s, or everyone's with `None`.
    async fn held_ranks(
        &self,
        post: PostId,
        author: Option<UserId>,
        limit: usize,
    ) -> StoreResult<Vec<RankEntry>>;
    /// `author`'s unlisted entries (their held or hidden comments) on any of `posts`, at most
    /// `limit`. Read through an index kept by author with the entries, so an author with no
    /// unlisted entry anywhere costs one lookup, however many posts are asked about: a feed
    /// page asks it for every viewer.
    async fn held_by_author(
        &self,
        author: UserId,
        posts: &[PostId],
        limit: usize,
    ) -> StoreResult<Vec<RankEntry>>;
    /// Whether `author` may have an unlisted entry on any post (a mark may outlive its
    /// entry: `true` is a maybe). `true` when not known cheaply: the default.
    async fn any_held_by(&self, author: UserId) -> StoreResult<bool> {
        let _ = author;
        Ok(true)
    }
    /// Up to `limit` of a post's listed entries best first, strictly after `after` (a score and
    /// ID of an earlier page).
    async fn ranked(
        &self,
        post: PostId,
        after: Option<(f64, CommentId)>,
        limit: usize,
    ) -> StoreResult<Vec<RankEntry>>;
    /// The post's index version: it names the state of the post's entries once every change
    /// read so far is applied (0 before the first). Changes of a post are serialised and each
    /// one that moves an entry (its score, listed state or presence) takes a higher version,
    /// so reading the version, then [`RankIndex::ranked_at`] with it at any later time, on
    /// any node, sees the entries as they were when the version was read.
    async fn rank_version(&self, post: PostId) -> StoreResult<u64>;
    /// As [`RankIndex::ranked`], over the post's entries as they were at `version`: a comment
    /// whose entry moved since is placed by its score then (and left out if it was unlisted
    /// or had no entry then), so a walk over several calls sees one order however scores
    /// change meanwhile. The flags and factor of an entry are today's. Moves older than
    /// [`RANK_HISTORY_MS`] are forgotten: past that an entry reads as it is now.
    async fn ranked_at(
        &self,
        post: PostId,
        version: u64,
        after: Option<(f64, CommentId)>,
        limit: usize,
    ) -> StoreResult<Vec<RankEntry>>;
    /// As [`RankIndex::held_ranks`], over the post's entries as they were at `version`
    /// (see [`RankIndex::ranked_at`]).
    async fn held_ranks_at(
        &self,
        post: PostId,
        version: u64,
        author: Option<UserId>,
        limit: usize,
    ) -> StoreResult<Vec<RankEntry>>;
}

/// How long the rank index remembers where its entries were before they moved (for
/// [`RankIndex::ranked_at`]): a top-comments walk older than this sees later moves.
pub const RANK_HISTORY_MS: u64 = 15 * 60 * 1000;

/// Unique-viewer sketches (HyperLogLog registers) per post.
#[async_trait]
pub trait ViewStore: Send + Sync {
    /// The stored registers of a post's sketch, if any.
    async fn load_views(&self, post: PostId) -> StoreResult<Option<Vec<u8>>>;
    /// Store sketches (one atomic, durable write).
    async fn save_views(&self, sketches: &[(PostId, Vec<u8>)]) -> StoreResult<()>;
    /// Merge per-(post, hour) sketches (`crate::hourly_views` stored forms) into the stored
    /// ones: a post-hour already stored keeps the union of both. One atomic, durable write.
    async fn merge_hourly_views(&self, sketches: &[HourlyViews]) -> StoreResult<()>;
    /// Up to `limit` stored post-hour sketches with `from_ms <= hour_ms < until_ms`, ordered
    /// by (hour, post), strictly after `after` (the (hour, post) of the previous page's last).
    async fn hourly_views(
        &self,
        from_ms: u64,
        until_ms: u64,
        after: Option<(u64, PostId)>,
        limit: usize,
    ) -> StoreResult<Vec<HourlyViews>>;
}

/// The unique-viewer sketch of one post in one UTC hour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HourlyViews {
    /// The post viewed.
    pub post: PostId,
    /// The hour's start, milliseconds since the Unix epoch (a multiple of an hour).
    pub hour_ms: u64,
    /// The sketch, in the stored form of `crate::hourly_views`.
    pub sketch: Vec<u8>,
}

/// Notification inboxes.
#[async_trait]
pub trait NotificationStore: Send + Sync {
    /// Take `consumer`'s writer fence: a token larger than any taken before. From then on
    /// only [`NotificationStore::apply_notifications`] with this token succeeds; one with an
    /// older token (a process that lost its lease while a write was in flight) is refused
    /// with [`crate::StoreError::Superseded`] and changes nothing.
    async fn fence_notifications(&self, consumer: &str) -> StoreResult<u64>;
    /// Apply inbox changes and move `consumer`'s offset to `offset` in one atomic write,
    /// provided `fence` is still the consumer's newest fence (else `Superseded`).
    /// Returns every item touched, after the changes (an item whose last actor left has
    /// `actor_count` 0 and is gone from storage).
    async fn apply_notifications(
        &self,
        consumer: &str,
        fence: u64,
        offset: u64,
        changes: &[crate::notify::Change],
    ) -> StoreResult<Vec<NotifItem>> {
        let commit = crate::notify::NotifCommit { consumer: consumer.to_string(), fence, offset };
        self.commit_notifications(std::slice::from_ref(&commit), changes).await
    }
    /// [`NotificationStore::apply_notifications`] for several consumers at once (the
    /// partitions one notifier holds): the changes and every consumer's offset in one atomic
    /// write, provided each fence is still its consumer's newest. Otherwise nothing is
    /// written and the answer is `Superseded` naming every consumer fenced off, separated by
    /// commas. Each consumer's offset and fence live on its own offset shard; all of the
    /// commits' consumers must share one.
    async fn commit_notifications(
        &self,
        commits: &[crate::notify::NotifCommit],
        changes: &[crate::notify::Change],
    ) -> StoreResult<Vec<NotifItem>>;
    /// For each user, is it among the item's actors?
    async fn notif_members(&self, item: u64, users: &[UserId]) -> StoreResult<Vec<bool>>;
    /// [`NotificationStore::notif_members`] of several items at once (a page of an inbox),
    /// in order: an engine whose reads are remote answers in one round trip per shard. The
    /// default asks per item.
    async fn notif_members_many(&self, asks: &[(u64, Vec<UserId>)]) -> StoreResult<Vec<Vec<bool>>> {
        let mut out = Vec::with_capacity(asks.len());
        for (item, users) in asks {
            out.push(self.notif_members(*item, users).await?);
        }
        Ok(out)
    }
    /// A recipient's items, most recently updated first, strictly after `(updated_ms, id)`.
    async fn inbox(
        &self,
        recipient: UserId,
        after: Option<(u64, u64)>,
        limit: usize,
    ) -> StoreResult<Vec<NotifItem>>;
    /// Remove up to `limit` items of storage shard `shard` (always 0 on the embedded engine:
    /// any other shard holds nothing there) last updated before `before_ms`, the oldest
    /// first, each with all its actors, in one short write serialized with
    /// [`NotificationStore::apply_notifications`]; returns how many went (fewer than `limit`
    /// once none older remain). Newer items and their actors are untouched, so every inbox
    /// page reads as if the pruned items had never been.
    async fn prune_notifications(&self, shard: usize, before_ms: u64, limit: usize) -> StoreResult<u64>;
}

/// A record of each viewer's own recent like/unlike writes that every API node reads, written
/// before the response (read-your-writes across nodes while the reverse index catches up).
/// Scale-out deployments keep it in Redis; the embedded deployment needs none (its in-process
/// cache sees every write).
///
/// Two API nodes can commit one user's like and unlike in one order and record them in the
/// other, so each record carries the `position` of the commit that made the change (the
/// event's position in its shard's log, [`crate::like::LikeOutcome::event_seq`]): a record
/// never replaces one from a later commit. Only changes are recorded; an operation that
/// changed nothing has no commit of its own to order it.
#[async_trait]
pub trait OwnLikes: Send + Sync {
    /// `user` now likes (or no longer likes) `target`, as of the change at `position`.
    async fn record(&self, user: UserId, target: Target, liked: bool, position: u64) -> StoreResult<()>;
}

/// What a shared cache knows of whether a user has comments held back from others (held,
/// hidden or restricted, shown to them as ordinary ones), so that a feed page skips the
/// reads of its viewer's own held comments for the many who have none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeldMark {
    /// Nothing of theirs is held.
    Nothing,
    /// Something of theirs may be held: read.
    Some,
    /// Not known. A mark set with this version ([`HeldMarks::set`]) stands only if nothing
    /// of theirs changed ([`HeldMarks::changed`]) since it was read.
    Unknown(String),
}

/// Per-user marks of [`HeldMark`], shared by every API node (Redis when scaled out).
#[async_trait]
pub trait HeldMarks: Send + Sync {
    /// What is known of `user`.
    async fn get(&self, user: UserId) -> StoreResult<HeldMark>;
    /// Mark `user` as having something held (`any`) or nothing, unless their version is no
    /// longer `version` (a change landed since it was read: then nothing is written).
    async fn set(&self, user: UserId, version: &str, any: bool) -> StoreResult<()>;
    /// Something of these users' may have been held or released (call once the change is
    /// readable): what is known of them is forgotten. Never fails: what cannot be written
    /// now is retried.
    async fn changed(&self, users: &[UserId]);
}

/// A rate limiter shared by every API node (GCRA in Redis when scaled out), so a user's
/// allowance does not multiply with the number of nodes.
#[async_trait]
pub trait SharedRateLimiter: Send + Sync {
    /// Count one action under `key`, allowing bursts of `burst` and `per_minute` sustained.
    /// `None`: allowed; `Some(ms)`: refused, retry after `ms` milliseconds.
    async fn check(&self, key: &str, burst: u32, per_minute: u32) -> StoreResult<Option<u64>>;
}
