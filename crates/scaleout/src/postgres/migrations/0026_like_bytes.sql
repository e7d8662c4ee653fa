-- Fewer bytes per like (docs/capacity.md: storage is most of the bill). Measured per like
-- on 1M likes in arrival order over 200k Zipf-popular posts, after VACUUM ANALYZE:
--   likes: heap 76.6 -> 60.2 B (columns without alignment padding; post_id NULL for a post
--          like, whose target is its post); primary key 53.0 B and likers index 74.7 B as
--          before (without user_id the likers index is 60.9 B, but its reads fetch every
--          row from the heap: 30% fewer first pages of a hot post's likers a second);
--   user_likes: heap 60.2 -> 52.2 B (no liked_at: nothing reads it); primary key 52.7 B.
--   Together 317 -> 293 B.
-- post_id and liked_at stay as nullable columns, so that a node of the previous build still
-- writes both tables during a rolling upgrade.
--
-- The new layouts need each table rewritten. A shard with no likes takes them here; a
-- populated one keeps its tables until `likewise migrate` rewrites them online, batch by
-- batch while writes go on (`rewrite.rs`). The statements of this build work on both.
ALTER TABLE likes ALTER COLUMN post_id DROP NOT NULL;
ALTER TABLE user_likes ALTER COLUMN liked_at DROP NOT NULL;

-- A bucket move's fence on `likes` (reshard/fence.rs) finds a row's bucket from its post_id,
-- NULL from now on for a post like: an installed fence learns the target instead, as a new
-- one is written (reshard/tables.rs).
DO $$
BEGIN
    IF to_regprocedure('lw_fence_likes()') IS NOT NULL THEN
        EXECUTE replace(pg_get_functiondef('lw_fence_likes()'::regprocedure),
                        'lw_bucket(r.post_id)', 'lw_bucket(coalesce(r.post_id, r.target))');
    END IF;
END
$$;

-- (A table with fence triggers of a bucket move keeps them: the online rewrite copies them.)
DO $$
BEGIN
    LOCK TABLE likes, user_likes IN ACCESS EXCLUSIVE MODE;
    IF NOT EXISTS (SELECT 1 FROM likes)
       AND NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'likes'::regclass AND NOT tgisinternal)
       AND EXISTS (SELECT 1 FROM pg_attribute
            WHERE attrelid = 'likes'::regclass AND attname = 'kind' AND attnum = 1) THEN
        DROP TABLE likes;
        CREATE TABLE likes (
            target   bigint   NOT NULL,
            user_id  bigint   NOT NULL,
            liked_at bigint   NOT NULL,          -- ms since the Unix epoch
            kind     smallint NOT NULL,          -- 1 = post, 2 = comment
            paged    boolean  NOT NULL DEFAULT false,
            post_id  bigint,                     -- a comment like's post; NULL for a post like
            PRIMARY KEY (kind, target, user_id)
        );
        CREATE INDEX likes_unpaged_by_time ON likes (kind, target, liked_at DESC, user_id DESC)
            WHERE NOT paged;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM user_likes)
       AND NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'user_likes'::regclass AND NOT tgisinternal)
       AND EXISTS (SELECT 1 FROM pg_attribute
            WHERE attrelid = 'user_likes'::regclass AND attname = 'kind' AND attnum = 2) THEN
        DROP TABLE user_likes;
        CREATE TABLE user_likes (
            user_id  bigint   NOT NULL,
            target   bigint   NOT NULL,
            kind     smallint NOT NULL,
            liked_at bigint,                     -- unused; written by builds before migration 26
            PRIMARY KEY (user_id, kind, target)
        );
    END IF;
END
$$;
