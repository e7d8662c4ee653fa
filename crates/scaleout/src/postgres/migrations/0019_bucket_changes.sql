-- The catch-up of a bucket move (reshard/): while the move copies a bucket's rows without a
-- fence, the source keeps taking its writes and logs the key of every row they change
-- (bucket_fences.logging); under the fence only those rows are copied again.
ALTER TABLE bucket_fences ADD COLUMN logging boolean NOT NULL DEFAULT false;

CREATE TABLE bucket_changes (
    tbl    text    NOT NULL,
    bucket integer NOT NULL,
    key    jsonb   NOT NULL,
    PRIMARY KEY (tbl, bucket, key)
);
