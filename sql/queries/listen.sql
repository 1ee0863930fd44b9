-- The LISTEN connection and session set-up of every worker connection (daemon.capture.loop, daemon.db.pool).

-- name: listen
LISTEN {channel};

-- name: ping
SELECT 1;

-- name: session_settings
-- Every pooled connection of nearsync: no JIT compilation. Our statements are short, but the
-- planner's row estimate for a recursive CTE (the dedup worker's component walk) is in the
-- millions, which made PostgreSQL JIT-compile it: ~180 ms of compilation for ~20 ms of work.
-- And custom plans only (plan_cache_mode): psycopg prepares a statement it has run 5 times, and
-- PostgreSQL then switches to a generic plan, planned without the parameter values. Our batch
-- queries take arrays (unnest, = ANY); a generic plan takes every array to hold 10 elements, and
-- for candidates_many (thousands of keys) it chose a nested loop testing every key against every
-- document: 500-600 ms per 100 lookups on 2,173 documents against 50 ms with the values known.
SELECT set_config('jit', 'off', false), set_config('plan_cache_mode', 'force_custom_plan', false);
