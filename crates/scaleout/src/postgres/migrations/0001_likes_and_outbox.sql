-- Likes, their outbox, derived counters and consumer offsets.
-- Every shard holds every table; a row lives on the shard of its key:
--   post-keyed (likes, outbox, counters, counter_slots): the shard of post_id;
--   user-keyed (user_likes): the shard of user_id;
--   consumer_offsets: the shard whose events the consumer applies (home shard 0 for
--   consumers of the whole stream).

-- The truth: one row per (target, user). kind 1 = post, 2 = comment.
CREATE TABLE likes (
    kind     smallint NOT NULL,
    target   bigint   NOT NULL,
    user_id  bigint   NOT NULL,
    post_id  bigint   NOT NULL,
    liked_at bigint   NOT NULL,          -- ms since the Unix epoch
    PRIMARY KEY (kind, target, user_id)
);
-- "Liked by", newest first, keyset pages.
CREATE INDEX likes_by_time ON likes (kind, target, liked_at DESC, user_id DESC);

-- The user-keyed reverse index, written by a consumer of the event stream.
CREATE TABLE user_likes (
    user_id  bigint   NOT NULL,
    kind     smallint NOT NULL,
    target   bigint   NOT NULL,
    liked_at bigint   NOT NULL,
    PRIMARY KEY (user_id, kind, target)
);

-- The transactional outbox: the events of each transaction's real state transitions,
-- written in the same transaction as the changes. One row per (transaction, subject
-- partition) holds that partition's events packed in order (format v2 records back to back),
-- so a batch of 4,000 likes on a hot post costs one outbox row, one stream message and one
-- relay bookkeeping update, not 4,000. The relay publishes rows in seq order, the row as one
-- message with ID <shard>-<seq>, and records the stream sequence JetStream acknowledged;
-- unrelayed rows have stream_seq NULL.
CREATE TABLE outbox (
    seq        bigserial PRIMARY KEY,
    part       smallint NOT NULL,        -- post % 64 of every event in the row
    events     integer  NOT NULL,
    body       bytea    NOT NULL,
    created_ms bigint   NOT NULL,
    stream_seq bigint
);
CREATE INDEX outbox_unrelayed ON outbox (seq) WHERE stream_seq IS NULL;
-- Reconciliation reads the rows of a partition its aggregator has not applied yet.
CREATE INDEX outbox_by_part ON outbox (part, stream_seq);

-- Derived counters, written by the aggregator only (field 1 likes, 2 comments, 3 replies).
CREATE TABLE counters (
    kind   smallint NOT NULL,
    target bigint   NOT NULL,
    field  smallint NOT NULL,
    value  bigint   NOT NULL,
    PRIMARY KEY (kind, target, field)
);

-- Sharded counter rows for counters written directly, not by the aggregator:
-- a writer adds to one of N slots at random, a reader sums them.
CREATE TABLE counter_slots (
    name  text     NOT NULL,
    slot  smallint NOT NULL,
    value bigint   NOT NULL,
    PRIMARY KEY (name, slot)
);

-- Consumer offsets: the last stream (or outbox) position a consumer applied on this shard.
CREATE TABLE consumer_offsets (
    consumer text   PRIMARY KEY,
    upto     bigint NOT NULL
);
