-- Bound the pending list of the candidate-key GIN index (migration 0011).
-- With fastupdate, new entries gather in an unsorted pending list that every lookup scans whole
-- until it is merged into the index: at the server default (gin_pending_list_limit = 4MB, about
-- 500 pages) a freshly loaded table made each candidate lookup scan hundreds of pages, and
-- `nearsync evaluate` on Abt-Buy spent most of its time there (measured: 50 lookups 0.78 s with an
-- empty list, 1.5 s with 105 pending pages). 256 kB (32 pages) keeps that scan short while still
-- merging new entries in bulk.
ALTER INDEX nearsync.documents_key_hashes SET (gin_pending_list_limit = 256);
