-- Undo migration 0022: the documents' identifier column (the signatures keep the same lists).
ALTER TABLE nearsync.documents DROP COLUMN IF EXISTS identifiers;
