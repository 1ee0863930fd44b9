-- Attaching the triggers and the flag view to the tracked table (daemon.ops.migrate).

-- name: attach_table
SELECT nearsync.attach_table(%(table)s::regclass, %(id_column)s, %(columns)b::text[]);

-- name: detach_table
SELECT nearsync.detach_table(%(table)s::regclass);

-- name: create_flag_view
SELECT nearsync.create_flag_view(%(table)s::regclass, %(id_column)s);
