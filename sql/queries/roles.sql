-- A least-privilege role for the daemon and the worker (daemon.roles, `nearsync grant-role NAME`).
-- The role may read the tracked table, and read/write the nearsync schema's tables and sequences;
-- nothing else (no write on the tracked table, no DDL anywhere). Identifiers are quoted with %I /
-- regclass output inside the function, and with sql.Identifier on the Python side.

-- name: create_grant_function
CREATE OR REPLACE FUNCTION nearsync.grant_daemon_role(role_name text, tracked regclass) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    tracked_schema text;
BEGIN
    SELECT n.nspname INTO tracked_schema
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = tracked;
    EXECUTE format('GRANT USAGE ON SCHEMA nearsync TO %I', role_name);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA nearsync TO %I', role_name);
    EXECUTE format('GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA nearsync TO %I', role_name);
    -- tables and sequences added by later migrations (run by the owner) are covered too
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA nearsync GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO %I',
                   role_name);
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA nearsync GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO %I',
                   role_name);
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', tracked_schema, role_name);
    EXECUTE format('GRANT SELECT ON TABLE %s TO %I', tracked, role_name);
    -- the daemon checks at start that the schema is at the migration it needs
    IF to_regclass('public.nearsync_alembic_version') IS NOT NULL THEN
        EXECUTE format('GRANT SELECT ON TABLE public.nearsync_alembic_version TO %I', role_name);
    END IF;
END
$fn$;

-- name: grant_daemon_role
SELECT nearsync.grant_daemon_role(%(role)s, %(table)s::regclass);

-- name: role_exists
SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = %(role)s) AS present;

-- name: create_role
-- {role}: sql.Identifier. NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT are the defaults, spelled out.
CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION;

-- name: set_role_password
-- {password}: sql.Literal of the secret from NEARSYNC_ROLE_PASSWORD (never logged by nearsync).
ALTER ROLE {role} WITH LOGIN PASSWORD {password};
