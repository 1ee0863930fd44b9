-- Migration 0024: the dedup worker's sweep rests on a settled table.
--
-- Why: a pass over a table that did not change while it ran gives the links, clusters and flags of
-- a clean pass (migration 0023); another pass over the same table changes nothing, and on dense
-- listings it costs ~20% of a core in the worker and ~15% in PostgreSQL at the default rate for as
-- long as the workers run. So the sweep stops after such a pass and starts again when something
-- the flags depend on changes.
--
-- changed: something the flags depend on changed since the current pass started (its first chunk
--   was handed out): a change of the table processed from the dedup queue (named query
--   sweep_changed, in the batch's transaction), a worker that started or reconnected (sweep_start:
--   a chunk it held when it stopped may not have been processed), a record the sweep could not
--   process, a moderator's decision, a new corpus snapshot. New rows start changed.
-- settled: the last pass that completed ran with nothing changed (set when its last chunk is handed
--   out). A cursor at the start of a pass with settled and not changed rests (sweep_next hands out
--   nothing) until changed is set.
ALTER TABLE nearsync.dedup_sweeps
    ADD COLUMN IF NOT EXISTS changed boolean NOT NULL DEFAULT true,
    ADD COLUMN IF NOT EXISTS settled boolean NOT NULL DEFAULT false;
