-- Migration 0015: how many times a worker stopped (crash, kill, the stall watchdog) while it held a
-- queued change. The claim counts one when it takes a row over from a holder that no longer holds
-- its liveness lock (sql/queries/queue.sql `claim`); a row taken over twice is handled alone, and
-- one taken over `[daemon] max_takeovers` times is dead-lettered, so that one record that makes
-- every worker crash or hang cannot stop its queue (daemon.capture.loop, "Poison records").
-- A column with a constant default: no table rewrite.
ALTER TABLE nearsync.index_tracking ADD COLUMN IF NOT EXISTS takeovers integer NOT NULL DEFAULT 0;
