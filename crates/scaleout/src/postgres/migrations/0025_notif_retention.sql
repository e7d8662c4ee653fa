-- Notification items by their last update, oldest first: the retention
-- (`notifications.retain_days`) deletes the items last updated before its cutoff from the
-- front of this index, a small batch at a time, without scanning every inbox.
-- Every item update already changes `notif_inbox` (it holds `updated_ms`), so no update was
-- heap-only before; this index costs one more index entry per update.
CREATE INDEX notif_age ON notif_items (updated_ms, id);
