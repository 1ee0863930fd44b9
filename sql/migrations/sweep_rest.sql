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
--   sweep_changed, in the batch's transaction), a worker that started or whose sweep reconnected
--   (sweep_start: a new setting, or a chunk it held when it stopped), a record the sweep could not
--   process, a moderator's decision, a new corpus snapshot. New rows start changed.
-- pass_no: the current pass's number (its first chunk adds one).
-- handed / done: chunks of the current pass handed out, and reported processed (sweep_chunk_done,
--   which counts only chunks of the current pass).
-- handed_at: when the last chunk was handed out.
-- resting (generated from the others, so the rule is written once): a cursor back at the start
-- (after_id '') rests when every chunk of the pass that just ended was processed and nothing changed
-- since it started: sweep_next then hands out nothing and writes nothing until changed is set. While a chunk of that pass is still unreported it waits (at most the
-- lease sweep_next is given, after which the chunk counts as lost with its worker and a new pass
-- starts).
ALTER TABLE nearsync.dedup_sweeps
    ADD COLUMN IF NOT EXISTS changed boolean NOT NULL DEFAULT true,
    ADD COLUMN IF NOT EXISTS pass_no bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS handed integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS done integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS handed_at timestamptz;
ALTER TABLE nearsync.dedup_sweeps
    ADD COLUMN IF NOT EXISTS resting boolean
        GENERATED ALWAYS AS (after_id = '' AND done >= handed AND NOT changed) STORED;
