-- Downgrade of migration 0002: detach every tracked table, then drop the trigger functions.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT table_name FROM nearsync.tracked_tables LOOP
        IF to_regclass(r.table_name) IS NOT NULL THEN
            PERFORM nearsync.detach_table(to_regclass(r.table_name));
        END IF;
    END LOOP;
    DELETE FROM nearsync.tracked_tables;
END
$$;
DROP FUNCTION IF EXISTS nearsync.attach_table(regclass, text, text[]);
DROP FUNCTION IF EXISTS nearsync.detach_table(regclass);
DROP FUNCTION IF EXISTS nearsync.install_triggers(regclass, text, text[], text);
DROP FUNCTION IF EXISTS nearsync.require_columns(regclass, text, text[]);
DROP FUNCTION IF EXISTS nearsync.detach_table_triggers_only(regclass);
DROP FUNCTION IF EXISTS nearsync.trigger_function_name(regclass);
DROP FUNCTION IF EXISTS nearsync.qualified_name(regclass);
