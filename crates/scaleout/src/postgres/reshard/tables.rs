//! The tables a bucket's rows live in, and how SQL tells a row's bucket (migration 16's
//! `lw_bucket`, `lw_comment_bucket`, `lw_item_bucket`). `r` names the row.
//!
//! Not moved, because they are not placed by bucket: `outbox` (a shard's own events, drained
//! before a move), `consumer_offsets` and `consumer_snapshots` (per shard),
//! `counter_slots` (per named shard), `integrity_decisions` (shard 0), the catalog tables.
//! `comment_keys` rows stored before migration 18 name no post: they stay on their shard
//! until the retention deletes them (a create retried under such a key after its post's
//! bucket moved makes a second comment).

/// A bucketed table: its name, the SQL expression of a row's bucket, and from when on the
/// source refuses writes of a moving bucket's rows.
pub(crate) struct Table {
    pub name: &'static str,
    pub bucket: &'static str,
    pub fence: Fence,
}

/// When a moving bucket's rows stop taking writes on the source.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fence {
    /// From the fence on: the rows of what users write.
    Moving,
    /// Only once the bucket has moved: the rows the source's aggregator derives from the
    /// source's events. The move waits for it to apply the last of them (the drain) under
    /// the fence of every other table, so it must still write them then; afterwards a
    /// worker that has not read the switched catalog yet is refused instead of leaving rows
    /// behind on the source.
    Moved,
}

const fn t(name: &'static str, bucket: &'static str) -> Table {
    Table { name, bucket, fence: Fence::Moving }
}

const fn derived(name: &'static str, bucket: &'static str) -> Table {
    Table { name, bucket, fence: Fence::Moved }
}

/// A target's bucket: a post's, or a comment's (`TargetKind` codes 1 and 2).
const TARGET: &str = "CASE r.kind WHEN 1 THEN lw_bucket(r.target) ELSE lw_comment_bucket(r.target) END";

/// Every bucketed table. Comments come first: the legacy rows of the tables after them find
/// their bucket through their comment, which must still be there when they are deleted.
pub(crate) const TABLES: &[Table] = &[
    // Post-keyed.
    // A post like stores no post_id (migration 26): its target is its post.
    t("likes", "lw_bucket(coalesce(r.post_id, r.target))"),
    t("liker_pages", TARGET),
    t("reports", "lw_comment_bucket(r.comment_id)"),
    t("report_counts", "lw_comment_bucket(r.comment_id)"),
    t("comment_holds", "lw_comment_bucket(r.comment_id)"),
    t("appeals", "lw_comment_bucket(r.comment_id)"),
    t("mod_queue", "lw_comment_bucket(r.comment_ord # (-9223372036854775808)::bigint)"),
    t("posts", "lw_bucket(r.post_id)"),
    t("pins", "lw_bucket(r.post_id)"),
    t("views", "lw_bucket(r.post_id)"),
    t("hourly_views", "lw_bucket(r.post_id)"),
    // A key stored with its comment, in the same transaction: fenced alike.
    t("comment_keys", "lw_bucket(r.post_id)"),
    // The derived tables after every user-written table that needs no comment to tell its
    // bucket: the catch-up copies those while the source's aggregator drains, and these
    // once it has.
    derived("counters", TARGET),
    // Derived too: the aggregator scores comments from their events. An API node's own
    // re-scoring after a comment write, made while the bucket is copied, can be left behind
    // on the source; the bucket's next event scores the comment again on its new shard.
    derived("comment_ranks", "lw_bucket(r.post_id)"),
    // Written with `comment_ranks`, in its transactions.
    derived("comment_rank_versions", "lw_bucket(r.post_id)"),
    derived("comment_rank_history", "lw_bucket(r.post_id)"),
    // Comments after the rows that look their bucket up through them.
    t("comments", "lw_bucket(r.post_id)"),
    // User-keyed.
    t("user_likes", "lw_bucket(r.user_id)"),
    t("users", "lw_bucket(r.user_id)"),
    t("settings", "lw_bucket(r.user_id)"),
    t("follows", "lw_bucket(r.follower)"),
    t("blocks", "lw_bucket(r.owner)"),
    t("restricts", "lw_bucket(r.owner)"),
    t("hidden_words", "lw_bucket(r.owner)"),
    t("fingerprints", "lw_bucket(r.user_id)"),
    // Written by the aggregators of the posts' shards after their rank index transactions;
    // a write refused by a moving bucket's fence fails the batch, which is applied again.
    t("held_marks", "lw_bucket(r.author_id)"),
    t("notif_actors", "lw_item_bucket(r.item)"),
    t("notif_items", "lw_bucket(r.recipient)"),
];

/// Sequences whose values end up in rows (IDs, page numbers): a bucket's new shard must not
/// hand out a value its copied rows already hold.
/// The outbox's too: its sequence orders own-likes records (`outbox::position`), so a key's
/// changes on the new shard must draw larger ones than its changes on the old.
pub(crate) const SEQUENCES: &[&str] =
    &["comment_id_seq", "notif_item_seq", "liker_page_seq", "outbox_seq_seq"];
