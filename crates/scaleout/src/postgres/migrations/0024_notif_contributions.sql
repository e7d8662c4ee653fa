-- Each actor's contributions to a notification item, not just the actor: `source` is the
-- comment concerned (the comment liked, the comment or reply written), 0 for a post like.
-- An actor is a member of the item while one of their rows remains (actor_count counts
-- members), so withdrawing one contribution (a deleted reply, an undone like of one comment)
-- leaves the actor in the item for the others. Rows stored before keep source 0: a
-- withdrawal that does not find its own contribution takes such a row, as before.
-- A column with a constant default is a catalog change only; the new primary key is built
-- once, in this migration's transaction.
ALTER TABLE notif_actors ADD COLUMN source bigint NOT NULL DEFAULT 0;
ALTER TABLE notif_actors DROP CONSTRAINT notif_actors_pkey;
ALTER TABLE notif_actors ADD PRIMARY KEY (item, actor, source);
