-- Comments, partitioned by post (the shard of post_id) and clustered by their
-- time-sortable ID. The low 6 bits of an ID name the shard it was created on, so a comment
-- is found from its ID alone.
CREATE TABLE comments (
    id            bigint   PRIMARY KEY,
    post_id       bigint   NOT NULL,
    author        bigint   NOT NULL,
    post_author   bigint   NOT NULL,
    parent        bigint,                -- top-level parent of a reply
    reply_to_user bigint,
    status        smallint NOT NULL,     -- CommentStatus::code
    body          text     NOT NULL,
    simhash       bigint   NOT NULL
);
CREATE INDEX comments_top_level ON comments (post_id, id) WHERE parent IS NULL;
CREATE INDEX comments_replies ON comments (parent, id) WHERE parent IS NOT NULL;

-- The low bits of comment IDs (unique per shard across every API node).
CREATE SEQUENCE comment_id_seq;
