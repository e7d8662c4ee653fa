-- Why the review queue holds a comment, and the author's appeal of it. Both on the comment's
-- shard (its ID's low bits), like `mod_queue` and `report_counts`.
--
-- Which layer holds the comment (likewise_core::comment::appeal::HeldBy codes); no row when
-- it is not held (approved, or reported while still visible).
CREATE TABLE comment_holds (
    comment_id bigint PRIMARY KEY,
    held_by    smallint NOT NULL
);
-- One appeal per comment, ever: the primary key refuses a second one.
CREATE TABLE appeals (
    comment_id  bigint PRIMARY KEY,
    message     text NOT NULL,
    appealed_at timestamptz NOT NULL DEFAULT now()
);
