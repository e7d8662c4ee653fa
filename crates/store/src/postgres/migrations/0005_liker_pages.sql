-- "Liked by" as pages instead of an index entry per like (as the embedded engine does).
-- Measured on this machine with the write path's own statements (pgbench, 430-like batches on
-- one post, 2 clients): the likers-by-time index was a quarter of the PostgreSQL CPU of a
-- like; one page row per (target, 16 ms window) written by the like insert's statement took
-- 8.2-9.8 us of PostgreSQL CPU per like against 11.0-11.3 with the index.
--
-- A page holds likers of one target whose liked_at falls in one window (liked_at / 16), in
-- (liked_at, user_id) order; a window may hold several pages (one per transaction). Every
-- liker of window w is newer than every liker of window w - 1, so a newest-first keyset scan
-- reads windows in descending order and sorts within one. An unlike finds its entry from the
-- like row's liked_at (its window) and rewrites that page; an emptied page is deleted.
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
-- Existing likes become pages (one per target and window), then the index goes.
INSERT INTO liker_pages (kind, target, win, page, users, times)
SELECT kind, target, liked_at / 16, nextval('liker_page_seq'),
       array_agg(user_id ORDER BY liked_at, user_id), array_agg(liked_at ORDER BY liked_at, user_id)
FROM likes GROUP BY kind, target, liked_at / 16;
DROP INDEX likes_by_time;
