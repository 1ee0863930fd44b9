-- Downgrade of migration 0001: removes everything nearsync created (not the tracked tables).
DROP SCHEMA IF EXISTS nearsync CASCADE;
