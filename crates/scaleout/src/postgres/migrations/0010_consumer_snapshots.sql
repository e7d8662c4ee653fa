-- Consumers' saved state (trending windows), one body per consumer name, written in the same
-- transaction as the consumer's row in consumer_offsets (on the same shard).
CREATE TABLE consumer_snapshots (
    consumer text PRIMARY KEY,
    body bytea NOT NULL
);
