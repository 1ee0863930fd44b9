-- The LISTEN connection and session set-up of every worker connection (daemon.capture.loop, daemon.db.pool).

-- name: listen
LISTEN {channel};

-- name: ping
SELECT 1;

-- name: session_settings
-- Every pooled connection of nearsync: no JIT compilation. Our statements are short, but the
-- planner's row estimate for a recursive CTE (the dedup worker's component walk) is in the
-- millions, which made PostgreSQL JIT-compile it: ~180 ms of compilation for ~20 ms of work.
SET jit = off;
