-- How many of a comment's distinct reports its last approval weighed (0: never approved).
-- Hiding an approved comment again takes a fresh threshold of reporters beyond this number;
-- set with the approval, in the transaction that removes the comment's hold.
ALTER TABLE report_counts ADD COLUMN reviewed bigint NOT NULL DEFAULT 0;
