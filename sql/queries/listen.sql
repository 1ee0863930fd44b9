-- The LISTEN connection and session set-up of every worker connection (daemon.capture.loop, daemon.db.pool).

-- name: listen
LISTEN {channel};

-- name: ping
SELECT 1;

-- name: session_settings
-- Every pooled connection of nearsync: no JIT compilation. Our statements are short, but the
-- planner's row estimate for a recursive CTE (the dedup worker's component walk) is in the
-- millions, which made PostgreSQL JIT-compile it: ~180 ms of compilation for ~20 ms of work.
-- And plan_cache_mode = auto whatever the server's default: the pooled connections' cursor
-- (daemon.db.pool.PlanModeCursor) then switches the mode per call with plan_cache_mode below.
SELECT set_config('jit', 'off', false), set_config('plan_cache_mode', 'auto', false);

-- name: plan_cache_mode
-- Switch the session's plan_cache_mode (daemon.db.pool.PlanModeCursor): force_generic_plan for
-- calls whose array parameters hold at most 100 elements (a plan made once per connection, no
-- planning pass per call: planning was ~1.9 ms of the ~7 ms PostgreSQL spent in statements per
-- one-record dedup batch when every call was planned with its values), auto for a call with a
-- longer array, which then runs unnamed and so is planned with its values. A generic plan takes
-- every array to hold 10 elements, and for candidates_many with thousands of keys it once chose a
-- nested loop testing every key against every document (500-600 ms per 100 lookups on 2,173
-- documents against 50 ms with the values known).
-- local: for the current transaction only (SET LOCAL), else for the session.
SELECT set_config('plan_cache_mode', %(mode)s, %(local)s);
