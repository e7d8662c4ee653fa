-- "Liked by" for hot targets as pages instead of an index entry per like (as the embedded
-- engine does). Measured on this machine with the write path's own statements (pgbench,
-- 430-like batches on one post, 2 clients): the likers-by-time index was a quarter of the
-- PostgreSQL CPU of a like; one page row per (target, 16 ms window) written by the like
-- insert's statement took 8.2-9.8 us of PostgreSQL CPU per like against 11.0-11.3 with the
-- index.
--
-- A page only pays when it holds several likes: a like of a cold target (alone in its
-- window in its transaction) would cost a heap row and a key instead of one index entry
-- (~100 bytes more). So the writer pages a (target, window) group of a transaction only
-- from 4 likes up and marks those rows `paged`; every other like stays in the partial index
-- below, as before. Rows written by an older build are unpaged (the default).
--
-- A page holds likers of one target whose liked_at falls in one window (liked_at / 16), in
-- (liked_at, user_id) order; a window may hold several pages (one per transaction). Every
-- liker of window w is newer than every liker of window w - 1, so a newest-first keyset scan
-- reads windows in descending order and sorts within one, then merges the unpaged likes of
-- the same span. An unlike of a paged like finds its entry from the like row's liked_at (its
-- window) and rewrites that page; an emptied page is deleted.
--
-- On a large existing shard the partial index is a full build (every existing row is
-- unpaged). It can be built beforehand without blocking writes:
--   CREATE INDEX CONCURRENTLY likes_unpaged_by_time ON likes
--       (kind, target, liked_at DESC, user_id DESC) WHERE NOT paged;
-- after `ALTER TABLE likes ADD COLUMN paged boolean NOT NULL DEFAULT false`; this migration
-- then finds both in place.
ALTER TABLE likes ADD COLUMN IF NOT EXISTS paged boolean NOT NULL DEFAULT false;
CREATE INDEX IF NOT EXISTS likes_unpaged_by_time ON likes (kind, target, liked_at DESC, user_id DESC)
    WHERE NOT paged;
DROP INDEX likes_by_time;
CREATE SEQUENCE liker_page_seq;
CREATE TABLE liker_pages (
    kind   smallint NOT NULL,
    target bigint   NOT NULL,
    win    bigint   NOT NULL,            -- liked_at / 16 of every entry
    page   bigint   NOT NULL,            -- liker_page_seq: unique, orders pages of a window
    users  bigint[] NOT NULL,
    times  bigint[] NOT NULL,            -- liked_at of users[i]
    PRIMARY KEY (kind, target, win, page)
);
DO $$
BEGIN
    ALTER TABLE liker_pages ALTER COLUMN users SET COMPRESSION lz4, ALTER COLUMN times SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'lz4 is not supported by this server; liker pages stay pglz-compressed';
END
$$;
