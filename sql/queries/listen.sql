-- The LISTEN connection and session set-up of every worker connection (daemon.capture.loop, daemon.db.pool).

-- name: listen
LISTEN {channel};

-- name: ping
SELECT 1;

-- name: session_settings
-- Every pooled connection of nearsync: no JIT compilation. Our statements are short, but the
-- planner's row estimate for a recursive CTE (the dedup worker's component walk) is in the
-- millions, which made PostgreSQL JIT-compile it: ~180 ms of compilation for ~20 ms of work.
-- And custom plans (plan_cache_mode): psycopg prepares a statement it has run 5 times, and
-- PostgreSQL may then switch to a generic plan, planned without the parameter values. Our batch
-- queries take arrays (unnest, = ANY); a generic plan takes every array to hold 10 elements, and
-- for candidates_many (thousands of keys) it chose a nested loop testing every key against every
-- document: 500-600 ms per 100 lookups on 2,173 documents against 50 ms with the values known.
-- The pooled connections' cursor (daemon.db.pool.PlanModeCursor) switches to force_generic_plan
-- (plan_cache_mode below) for the calls of the queries marked "-- plan: generic" whose arrays hold
-- at most 100 elements, and back for any other call.
SELECT set_config('jit', 'off', false), set_config('plan_cache_mode', 'force_custom_plan', false);

-- name: plan_cache_mode
-- Set plan_cache_mode for the session, or for the current transaction only when local is true
-- (daemon.db.pool.PlanModeCursor): force_generic_plan, a plan made once per connection and no
-- planning pass per call (planning was ~1.9 ms of the ~7 ms of PostgreSQL time per one-record
-- dedup batch), or force_custom_plan.
SELECT set_config('plan_cache_mode', %(mode)s, %(local)s);
