-- Unique-viewer sketches per post and UTC hour (the analytics export's unique_viewers), on the
-- post's shard. hour_ms: the hour's start in milliseconds since the Unix epoch; sketch: the
-- stored form of likewise_core::hourly_views (sparse or dense HyperLogLog registers). Keyed
-- by (hour, post): an export reads an hour range in that order.
CREATE TABLE hourly_views (
    hour_ms bigint NOT NULL,
    post_id bigint NOT NULL,
    sketch bytea NOT NULL,
    PRIMARY KEY (hour_ms, post_id)
);
