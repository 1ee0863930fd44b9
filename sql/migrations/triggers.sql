-- Trigger management as migration 0002 applies it (after sql/migrations/trigger_helpers.sql).
-- Migration 0008 replaces attach_table() with the change-log version (sql/migrations/change_log.sql)
-- and its downgrade puts this one back; detach_table() stays in use.
--
-- 0002's generator: nearsync.attach_table() generates, for one
-- tracked table, a trigger function and three STATEMENT-level AFTER triggers with transition
-- tables. Each statement does one set-based upsert into index_tracking -- one row per changed
-- record, coalesced with any pending row of the same record -- and at most one pg_notify.
-- Set-based upserts keep the write overhead low for bulk statements (a row-level trigger pays a
-- PL/pgSQL call and an index probe per row); the effect is the same: a pending row per record.
-- UPDATEs are compared on the tracked columns only; an UPDATE that changes none enqueues nothing.
-- An UPDATE that changes the primary key enqueues a delete of the old id and an upsert of the new.

CREATE OR REPLACE FUNCTION nearsync.detach_table(p_table regclass) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    fn text := nearsync.trigger_function_name(p_table);
BEGIN
    PERFORM nearsync.detach_table_triggers_only(p_table);
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
BEGIN
    PERFORM nearsync.require_columns(p_table, p_id, p_columns);
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

    PERFORM nearsync.install_triggers(p_table, p_id, p_columns, fn);
END
$$;
