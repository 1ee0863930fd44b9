-- Trigger management as migration 0002 applies it. Migration 0008 replaces attach_table() with the
-- change-log version (sql/change_log.sql) and its downgrade puts this one back; the helper
-- functions here stay in use.
--
-- 0002's generator: nearsync.attach_table() generates, for one
-- tracked table, a trigger function and three STATEMENT-level AFTER triggers with transition
-- tables. Each statement does one set-based upsert into index_tracking -- one row per changed
-- record, coalesced with any pending row of the same record -- and at most one pg_notify.
-- Set-based upserts keep the write overhead low for bulk statements (a row-level trigger pays a
-- PL/pgSQL call and an index probe per row); the effect is the same: a pending row per record.
-- UPDATEs are compared on the tracked columns only; an UPDATE that changes none enqueues nothing.
-- An UPDATE that changes the primary key enqueues a delete of the old id and an upsert of the new.

CREATE OR REPLACE FUNCTION nearsync.trigger_function_name(p_table regclass) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT 'track_' || left(md5(p_table::oid::text || p_table::text), 16)
$$;

CREATE OR REPLACE FUNCTION nearsync.qualified_name(p_table regclass) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.oid = p_table
$$;

CREATE OR REPLACE FUNCTION nearsync.detach_table(p_table regclass) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    fn text := nearsync.trigger_function_name(p_table);
BEGIN
    EXECUTE format('DROP TRIGGER IF EXISTS nearsync_track_insert ON %s', p_table);
    EXECUTE format('DROP TRIGGER IF EXISTS nearsync_track_update ON %s', p_table);
    EXECUTE format('DROP TRIGGER IF EXISTS nearsync_track_delete ON %s', p_table);
    EXECUTE format('DROP FUNCTION IF EXISTS nearsync.%I()', fn);
    DELETE FROM nearsync.tracked_tables WHERE table_name = nearsync.qualified_name(p_table);
END
$$;

CREATE OR REPLACE FUNCTION nearsync.attach_table(p_table regclass, p_id text, p_columns text[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    fn        text := nearsync.trigger_function_name(p_table);
    tname     text := nearsync.qualified_name(p_table);
    old_cols  text;
    new_cols  text;
    upsert    text;
    coalesce_pending text := 'ON CONFLICT (queue, table_name, record_id) DO UPDATE SET '
        'op = excluded.op, seq = excluded.seq, changed_at = excluded.changed_at, '
        'claimed_by = NULL, claimed_at = NULL, attempts = 0, not_before = NULL, last_error = NULL';
    missing   text;
BEGIN
    SELECT string_agg(c, ', ') INTO missing FROM unnest(p_columns || p_id) AS c
    WHERE NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = p_table AND a.attname = c
                      AND a.attnum > 0 AND NOT a.attisdropped);
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'nearsync: table % has no column(s) %', tname, missing;
    END IF;
    SELECT string_agg(format('o.%I', c), ', '), string_agg(format('n.%I', c), ', ')
      INTO old_cols, new_cols FROM unnest(p_columns) AS c;
    upsert := 'INSERT INTO nearsync.index_tracking AS t (queue, table_name, record_id, op, seq, changed_at) ';
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION nearsync.%1$I() RETURNS trigger LANGUAGE plpgsql AS $body$
        DECLARE
            changed bigint;
        BEGIN
            IF TG_OP = 'INSERT' THEN
                %2$s
                SELECT 'index', %3$L, n.%4$I::text, 'U', nextval('nearsync.change_seq'), clock_timestamp()
                FROM new_rows n
                %7$s;
            ELSIF TG_OP = 'UPDATE' THEN
                %2$s
                SELECT 'index', %3$L, coalesce(n.%4$I, o.%4$I)::text,
                       CASE WHEN n.%4$I IS NULL THEN 'D' ELSE 'U' END,
                       nextval('nearsync.change_seq'), clock_timestamp()
                FROM new_rows n FULL JOIN old_rows o ON o.%4$I = n.%4$I
                WHERE n.%4$I IS NULL OR o.%4$I IS NULL OR ROW(%5$s) IS DISTINCT FROM ROW(%6$s)
                %7$s;
            ELSE
                %2$s
                SELECT 'index', %3$L, o.%4$I::text, 'D', nextval('nearsync.change_seq'), clock_timestamp()
                FROM old_rows o
                %7$s;
            END IF;
            GET DIAGNOSTICS changed = ROW_COUNT;
            IF changed > 0 THEN
                PERFORM pg_notify('nearsync', %3$L);
            END IF;
            RETURN NULL;
        END
        $body$ $f$, fn, upsert, tname, p_id, old_cols, new_cols, coalesce_pending);

    PERFORM nearsync.detach_table_triggers_only(p_table);
    EXECUTE format('CREATE TRIGGER nearsync_track_insert AFTER INSERT ON %s REFERENCING NEW TABLE AS new_rows '
                   'FOR EACH STATEMENT EXECUTE FUNCTION nearsync.%I()', p_table, fn);
    EXECUTE format('CREATE TRIGGER nearsync_track_update AFTER UPDATE ON %s REFERENCING OLD TABLE AS old_rows '
                   'NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION nearsync.%I()', p_table, fn);
    EXECUTE format('CREATE TRIGGER nearsync_track_delete AFTER DELETE ON %s REFERENCING OLD TABLE AS old_rows '
                   'FOR EACH STATEMENT EXECUTE FUNCTION nearsync.%I()', p_table, fn);
    INSERT INTO nearsync.tracked_tables (table_name, id_column, tracked_columns)
    VALUES (tname, p_id, p_columns)
    ON CONFLICT (table_name) DO UPDATE SET id_column = excluded.id_column,
        tracked_columns = excluded.tracked_columns, attached_at = now();
END
$$;

CREATE OR REPLACE FUNCTION nearsync.detach_table_triggers_only(p_table regclass) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('DROP TRIGGER IF EXISTS nearsync_track_insert ON %s', p_table);
    EXECUTE format('DROP TRIGGER IF EXISTS nearsync_track_update ON %s', p_table);
    EXECUTE format('DROP TRIGGER IF EXISTS nearsync_track_delete ON %s', p_table);
END
$$;
