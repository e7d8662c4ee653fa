-- Moderators' verdicts on accounts flagged by the integrity consumer: the latest per account,
-- on shard 0 (they are few, and the one consumer reads them all). user_ord is the account ID
-- with its top bit flipped, so that signed order is ID order; at_ms orders the consumer's
-- pages.
CREATE TABLE integrity_decisions (
    user_ord bigint PRIMARY KEY,
    verdict smallint NOT NULL,
    at_ms bigint NOT NULL
);
CREATE INDEX integrity_decisions_at ON integrity_decisions (at_ms, user_ord);
