-- Where the rank index's entries were before they moved (likewise_core::ports::RankIndex::
-- ranked_at), so that a top-comments walk pages through one order however scores change
-- meanwhile. Every batch of rank changes of a post first takes the post's version row (the
-- row lock orders the post's writers, so versions follow commit order), then records each
-- entry it moves (score, listed state or presence) with where it was before. The first record
-- of a comment after version V is where it was at V. Records older than RANK_HISTORY_MS are
-- deleted by later batches.
CREATE TABLE comment_rank_versions (
    post_id bigint PRIMARY KEY,
    version bigint NOT NULL
);
CREATE TABLE comment_rank_history (
    post_id    bigint           NOT NULL,
    version    bigint           NOT NULL,
    comment_id bigint           NOT NULL,
    author_id  bigint           NOT NULL,
    -- false: the comment had no entry before this version.
    present    boolean          NOT NULL,
    listed     boolean          NOT NULL,
    score      double precision NOT NULL,
    at         timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (post_id, version, comment_id)
);
CREATE INDEX comment_rank_history_at ON comment_rank_history (at);
