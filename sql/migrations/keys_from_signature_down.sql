-- Undo migration 0013: older code reads a NULL keys column as "no keys", so write the keys back into
-- every live document that left them NULL: the distinct band, block and super-token keys of its
-- signature in first-seen order, then "s:scope" (what daemon.backends.pg_encoding.keys_of rebuilds).
UPDATE nearsync.documents d
SET keys = coalesce((
        SELECT jsonb_agg(to_jsonb(x.key) ORDER BY x.first)
        FROM (SELECT e.key, min(e.n) AS first
              FROM jsonb_array_elements_text(coalesce(d.signature -> 'bands', '[]') || coalesce(d.signature -> 'blocks', '[]')
                                             || coalesce(d.signature -> 'super', '[]')) WITH ORDINALITY AS e(key, n)
              GROUP BY e.key) x), '[]'::jsonb) || '["s:scope"]'::jsonb
WHERE d.keys IS NULL AND NOT d.deleted AND d.signature ? 'bands';
COMMENT ON COLUMN nearsync.documents.keys IS NULL;
