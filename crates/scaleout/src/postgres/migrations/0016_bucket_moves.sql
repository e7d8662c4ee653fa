-- Moving buckets between shards (reshard/). On every shard:
-- * bucket_rules: this deployment's bucket count and legacy ID maxima (a copy of shard 0's
--   placement_catalog), so that SQL on any shard can tell a row's bucket;
-- * bucket_fences: buckets being handed over (moved = false) or handed over (moved = true) by
--   this shard: while the fence triggers are installed, writing a row of one fails with
--   SQLSTATE LW001 and the writer retries on the bucket's new shard;
-- * bucket_moves (used on shard 0): the journal of moves in progress, for resuming.
CREATE TABLE bucket_rules (
    only_row           boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    buckets            integer NOT NULL CHECK (buckets > 0),
    legacy_comment_max bigint  NOT NULL,
    legacy_item_max    bigint  NOT NULL
);

CREATE TABLE bucket_fences (
    bucket integer PRIMARY KEY,
    target integer NOT NULL,
    moved  boolean NOT NULL
);

CREATE TABLE bucket_moves (
    bucket     integer PRIMARY KEY,
    source     integer NOT NULL,
    target     integer NOT NULL,
    phase      text    NOT NULL CHECK (phase IN ('copying', 'switched')),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- The bucket of a post or user ID stored bit-for-bit in a bigint: the unsigned value modulo
-- the bucket count, as Placement::bucket_of computes it.
CREATE FUNCTION lw_bucket(v bigint) RETURNS integer LANGUAGE sql STABLE AS $$
    SELECT ((v::numeric + CASE WHEN v < 0 THEN 18446744073709551616 ELSE 0 END) % r.buckets)::integer
    FROM bucket_rules r
$$;

-- The bucket of a comment: in its ID, or for a legacy ID its post's.
CREATE FUNCTION lw_comment_bucket(id bigint) RETURNS integer LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN id > r.legacy_comment_max THEN (id & 4095)::integer
                ELSE (SELECT lw_bucket(c.post_id) FROM comments c WHERE c.id = $1) END
    FROM bucket_rules r
$$;

-- The bucket of a notification item: in its ID, or for a legacy ID its recipient's.
CREATE FUNCTION lw_item_bucket(id bigint) RETURNS integer LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN id > r.legacy_item_max THEN (id & 4095)::integer
                ELSE (SELECT lw_bucket(n.recipient) FROM notif_items n WHERE n.id = $1) END
    FROM bucket_rules r
$$;
