-- Placement: posts and users map to a fixed number of logical buckets; the catalog on shard 0
-- maps each bucket to a shard (see placement.rs). Every shard gets the tables; only shard 0's
-- are filled, by `likewise migrate`, which knows the shard count and the highest IDs issued
-- so far (comment and notification item IDs up to them keep their old, shard-named layout).
CREATE TABLE placement_catalog (
    only_row           boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    version            bigint  NOT NULL,
    buckets            integer NOT NULL CHECK (buckets > 0),
    legacy_shards      integer NOT NULL CHECK (legacy_shards > 0),
    legacy_comment_max bigint  NOT NULL,
    legacy_item_max    bigint  NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE placement (
    bucket integer PRIMARY KEY CHECK (bucket >= 0),
    shard  integer NOT NULL CHECK (shard >= 0)
);
