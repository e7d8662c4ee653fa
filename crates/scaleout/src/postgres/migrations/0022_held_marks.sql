-- Which posts a user has unlisted rank entries on (held or hidden top-level comments), on the
-- user's shard: a feed page reads it once per viewer, and only a viewer with marks on the
-- page's posts reads their entries from the posts' shards. Written after each rank index
-- transaction on the post's shard (likewise_core::ports::RankIndex::held_by_author): a mark
-- is set for an unlisted entry and deleted when the entry is listed or removed, unless a
-- later version of the post set it again. A mark left behind is harmless (the entries are
-- read before use); an entry without its mark is not shown to its author, so marks are
-- written by every batch that leaves an entry unlisted, replays included.
CREATE TABLE held_marks (
    author_id  bigint NOT NULL,
    post_id    bigint NOT NULL,
    comment_id bigint NOT NULL,
    -- The post's rank index version that last set the mark.
    version    bigint NOT NULL,
    PRIMARY KEY (author_id, post_id, comment_id)
);
