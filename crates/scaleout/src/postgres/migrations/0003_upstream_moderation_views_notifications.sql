-- Upstream data, moderation state, view sketches and notification inboxes.
-- Every shard holds every table; a row lives on the shard of its key:
--   post-keyed (posts, pins, views): the shard of post_id;
--   comment-keyed (reports, report_counts, mod_queue): the shard in the comment ID's low bits;
--   user-keyed (users, follows, settings, blocks, restricts, hidden_words, fingerprints,
--   notif_items, notif_actors): the shard of the owning user (an inbox item and its actors
--   live on the recipient's shard).
--
-- IDs are u64 stored bit-for-bit in bigint, except the `*_ord` columns, which hold the u64
-- with its top bit flipped (v XOR 2^63): bigint order on them is the u64 order, so keyset
-- pages and ranges stay correct for IDs >= 2^63 (they are only ever compared or sorted).

-- Upstream records, in their versioned binary form (likewise_core::model encode/decode).
CREATE TABLE posts (
    post_id bigint PRIMARY KEY,
    meta    bytea  NOT NULL               -- PostMeta::encode
);
CREATE TABLE users (
    user_id bigint PRIMARY KEY,
    profile bytea  NOT NULL               -- UserProfile::encode
);
CREATE TABLE settings (
    user_id  bigint PRIMARY KEY,
    settings bytea  NOT NULL              -- ViewerSettings::encode
);
-- Keyed by follower: "whom do I follow" is one index range, ascending followee.
CREATE TABLE follows (
    follower     bigint NOT NULL,
    followee_ord bigint NOT NULL,
    PRIMARY KEY (follower, followee_ord)
);

-- Directed flags, keyed by owner.
CREATE TABLE blocks (
    owner     bigint NOT NULL,
    other_ord bigint NOT NULL,            -- ascending listing
    PRIMARY KEY (owner, other_ord)
);
CREATE TABLE restricts (
    owner bigint NOT NULL,
    other bigint NOT NULL,
    PRIMARY KEY (owner, other)
);
-- One small list per owner; no row when empty.
CREATE TABLE hidden_words (
    owner bigint PRIMARY KEY,
    words text[] NOT NULL
);
-- A post's pinned comments, the array order being the pin order; no row when empty.
CREATE TABLE pins (
    post_id  bigint   PRIMARY KEY,
    comments bigint[] NOT NULL
);

-- One report per (comment, reporter): the first reason stands.
CREATE TABLE reports (
    comment_id bigint   NOT NULL,
    reporter   bigint   NOT NULL,
    reason     smallint NOT NULL,         -- ReportReason::code
    PRIMARY KEY (comment_id, reporter)
);
-- Distinct reports per comment, moved in the same statement as the report row, so it
-- always equals the number of `reports` rows and reads are O(1).
CREATE TABLE report_counts (
    comment_id bigint PRIMARY KEY,
    reports    bigint NOT NULL
);
-- The review queue: comment IDs are time-sortable, so ID order is FIFO.
CREATE TABLE mod_queue (
    comment_ord bigint PRIMARY KEY
);
-- SimHashes of a user's recent comments, newest first by a backward index scan.
CREATE TABLE fingerprints (
    user_id     bigint NOT NULL,
    comment_ord bigint NOT NULL,
    simhash     bigint NOT NULL,          -- u64 bit-for-bit
    PRIMARY KEY (user_id, comment_ord)
);

-- Unique-viewer sketches: the raw HyperLogLog registers. Several API nodes flush their own
-- sketch of a post, so a save merges (register-wise max) with what is stored.
CREATE TABLE views (
    post_id   bigint PRIMARY KEY,
    registers bytea  NOT NULL
);

-- Notification inbox items, one per (recipient, post, kind). The ID is
-- nextval(notif_item_seq) * 64 + shard, unique across shards and routable from the ID alone.
CREATE SEQUENCE notif_item_seq;
CREATE TABLE notif_items (
    id          bigint   PRIMARY KEY,
    recipient   bigint   NOT NULL,
    post_id     bigint   NOT NULL,
    kind        smallint NOT NULL,        -- NotifKind::code
    comment_id  bigint,                   -- the latest comment concerned
    actor_count bigint   NOT NULL,        -- = rows in notif_actors for the item
    recent      bigint[] NOT NULL,        -- most recent actors, newest first (at most 8)
    updated_ms  bigint   NOT NULL,
    UNIQUE (recipient, post_id, kind)
);
-- An inbox, most recently updated first (ties by ascending ID), keyset pages.
CREATE INDEX notif_inbox ON notif_items (recipient, updated_ms DESC, id);
-- The exact distinct actor set behind actor_count: makes adds and removes idempotent.
CREATE TABLE notif_actors (
    item  bigint NOT NULL,
    actor bigint NOT NULL,
    PRIMARY KEY (item, actor)
);
