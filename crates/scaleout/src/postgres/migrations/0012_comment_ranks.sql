-- The rank index of the "top" comment order (likewise_core::ports::RankIndex), on the post's
-- shard: one row per top-level comment, kept from events. Listed rows (visible comments and
-- placeholders) are read best first (score descending, then the higher comment ID) for
-- everyone; unlisted ones (held, hidden) only by author, for those allowed to see them.
CREATE TABLE comment_ranks (
    post_id        bigint           NOT NULL,
    comment_id     bigint           NOT NULL,
    author_id      bigint           NOT NULL,
    score          double precision NOT NULL,
    author_replied boolean          NOT NULL DEFAULT false,
    author_liked   boolean          NOT NULL DEFAULT false,
    factor         double precision NOT NULL DEFAULT 1,
    listed         boolean          NOT NULL,
    PRIMARY KEY (post_id, comment_id)
);
CREATE INDEX comment_ranks_order ON comment_ranks (post_id, score DESC, comment_id DESC) WHERE listed;
CREATE INDEX comment_ranks_held ON comment_ranks (post_id, author_id) WHERE NOT listed;
