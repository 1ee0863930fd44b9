-- Drop the scope index of migration 0017 (the scope counts go back to the GIN index).
DROP INDEX IF EXISTS nearsync.documents_scope;
