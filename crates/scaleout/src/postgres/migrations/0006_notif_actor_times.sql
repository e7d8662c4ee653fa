-- When each actor joined a notification item: an item whose named (most recent) actors were
-- removed by unlikes names the newest remaining ones instead. Rows written before this keep
-- 0 and count as oldest. A column with a constant default is a catalog change only.
ALTER TABLE notif_actors ADD COLUMN added_ms bigint NOT NULL DEFAULT 0;
