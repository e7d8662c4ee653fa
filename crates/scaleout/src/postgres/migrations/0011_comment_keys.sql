-- Idempotency-Keys of comment creates (Idempotency-Key header), on the post's shard, written
-- in the same transaction as the comment each created. `record` holds the first request's
-- fingerprint and the comment as created (likewise_core::comment::idempotency::KeyRecord);
-- keys older than the retention are deleted by the workers, oldest first by created_at_ms.
CREATE TABLE comment_keys (
    caller        bigint NOT NULL,
    key           text   NOT NULL,
    created_at_ms bigint NOT NULL,
    record        bytea  NOT NULL,
    PRIMARY KEY (caller, key)
);
CREATE INDEX comment_keys_created ON comment_keys (created_at_ms);
