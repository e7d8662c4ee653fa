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

-- The transactional outbox: one row per real state transition, written in the same
-- transaction as the change. The relay publishes rows in seq order and records the stream
-- sequence JetStream acknowledged; unrelayed rows have stream_seq NULL.
CREATE TABLE outbox (
    seq           bigserial PRIMARY KEY,
    post_id       bigint   NOT NULL,
    target_kind   smallint NOT NULL,
    target        bigint   NOT NULL,
    like_delta    smallint NOT NULL,     -- +1/-1 for like events, else 0
    comment_delta smallint NOT NULL,     -- visible-comment delta for comment events, else 0
    body          bytea    NOT NULL,     -- the event, format v2 (likewise_core::event)
    created_ms    bigint   NOT NULL,
    stream_seq    bigint
);
CREATE INDEX outbox_unrelayed ON outbox (seq) WHERE stream_seq IS NULL;
CREATE INDEX outbox_by_target ON outbox (target_kind, target, stream_seq);
CREATE INDEX outbox_by_post ON outbox (post_id, stream_seq) WHERE comment_delta <> 0;

-- Derived counters, written by the aggregator only (field 1 likes, 2 comments, 3 replies).
CREATE TABLE counters (
    kind   smallint NOT NULL,
    target bigint   NOT NULL,
    field  smallint NOT NULL,
    value  bigint   NOT NULL,
    PRIMARY KEY (kind, target, field)
);

-- Sharded counter rows (design 5.1) for counters written directly, not by the aggregator:
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
