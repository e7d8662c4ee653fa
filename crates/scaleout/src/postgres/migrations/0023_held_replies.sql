-- An author's held replies (pending 2, hidden by a filter 3, restricted 4: held back from
-- others, shown to their author as ordinary ones) by post, on the post's shard: the author's
-- post views and comment lists count them for the author alone
-- (likewise_core::ports::CommentReader::held_replies_by). A partial index, so a reply enters
-- and leaves it in the transaction that changes its status, and an author with none costs one
-- index probe.
CREATE INDEX comments_held_replies ON comments (author, post_id)
    WHERE parent IS NOT NULL AND status IN (2, 3, 4);
