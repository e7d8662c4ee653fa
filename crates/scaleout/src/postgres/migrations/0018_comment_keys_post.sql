-- A comment create's Idempotency-Key names the post it was used on, so that a bucket move
-- takes the key along with the comment (reshard/tables.rs). Keys stored before this have no
-- post; they stay where they are until the retention deletes them.
ALTER TABLE comment_keys ADD COLUMN post_id bigint;
