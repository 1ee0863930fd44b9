-- Helpers shared by both trigger generators (migration 0002's, sql/migrations/triggers.sql, and
-- migration 0008's, sql/migrations/change_log.sql). Both migrations run this script first, so each
-- generator finds the helpers whatever version the database was created with. Idempotent.

CREATE OR REPLACE FUNCTION nearsync.trigger_function_name(p_table regclass) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT 'track_' || left(md5(p_table::oid::text || p_table::text), 16)
$$;

CREATE OR REPLACE FUNCTION nearsync.qualified_name(p_table regclass) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.oid = p_table
$$;

CREATE OR REPLACE FUNCTION nearsync.detach_table_triggers_only(p_table regclass) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('DROP TRIGGER IF EXISTS nearsync_track_insert ON %s', p_table);
    EXECUTE format('DROP TRIGGER IF EXISTS nearsync_track_update ON %s', p_table);
    EXECUTE format('DROP TRIGGER IF EXISTS nearsync_track_delete ON %s', p_table);
END
$$;

-- Raise when the table lacks one of the tracked columns or the id column (named in the error).
CREATE OR REPLACE FUNCTION nearsync.require_columns(p_table regclass, p_id text, p_columns text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    missing text;
BEGIN
    SELECT string_agg(c, ', ') INTO missing FROM unnest(p_columns || p_id) AS c
    WHERE NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = p_table AND a.attname = c
                      AND a.attnum > 0 AND NOT a.attisdropped);
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'nearsync: table % has no column(s) %', nearsync.qualified_name(p_table), missing;
    END IF;
END
$$;

-- The three statement-level AFTER triggers with transition tables that call trigger function
-- nearsync.<p_fn>() (replacing any earlier ones), and the table's row in nearsync.tracked_tables.
CREATE OR REPLACE FUNCTION nearsync.install_triggers(p_table regclass, p_id text, p_columns text[], p_fn text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM nearsync.detach_table_triggers_only(p_table);
    EXECUTE format('CREATE TRIGGER nearsync_track_insert AFTER INSERT ON %s REFERENCING NEW TABLE AS new_rows '
                   'FOR EACH STATEMENT EXECUTE FUNCTION nearsync.%I()', p_table, p_fn);
    EXECUTE format('CREATE TRIGGER nearsync_track_update AFTER UPDATE ON %s REFERENCING OLD TABLE AS old_rows '
                   'NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION nearsync.%I()', p_table, p_fn);
    EXECUTE format('CREATE TRIGGER nearsync_track_delete AFTER DELETE ON %s REFERENCING OLD TABLE AS old_rows '
                   'FOR EACH STATEMENT EXECUTE FUNCTION nearsync.%I()', p_table, p_fn);
    INSERT INTO nearsync.tracked_tables (table_name, id_column, tracked_columns)
    VALUES (nearsync.qualified_name(p_table), p_id, p_columns)
    ON CONFLICT (table_name) DO UPDATE SET id_column = excluded.id_column,
        tracked_columns = excluded.tracked_columns, attached_at = now();
END
$$;
