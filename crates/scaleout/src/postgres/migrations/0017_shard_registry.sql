-- Shards registered by `likewise shards add` (read on shard 0 only): a running node opens
-- every shard listed here that its configuration does not list yet when it reads the
-- catalog, so a shard joins without restarting anything. Registering one moves the
-- catalog's version on.
CREATE TABLE placement_shards (
    shard integer PRIMARY KEY CHECK (shard >= 1),
    url   text    NOT NULL
);
