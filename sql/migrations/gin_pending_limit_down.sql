-- Undo migration 0011: the server's gin_pending_list_limit applies to the candidate-key index again.
ALTER INDEX nearsync.documents_key_hashes RESET (gin_pending_list_limit);
