-- Loading labelled records into the reference ads table (demo, evaluate, benchmarks).

-- name: copy_ads
COPY public.ads (user_id, category, title, body, price, lat, lon, source, source_id) FROM STDIN;

-- name: copy_ads_fields
-- As copy_ads, then the columns of fields of the user's own ({fields}: identifiers, see add_ads_field).
COPY public.ads (user_id, category, title, body, price, lat, lon, source, source_id, {fields}) FROM STDIN;

-- name: add_ads_field
-- A text column of the reference ads table for a field that is not a fixed role (evaluate --map).
ALTER TABLE public.ads ADD COLUMN IF NOT EXISTS {column} text;

-- name: ads_source_ids
-- Map loaded records back to their keys (source:source_id -> ads.id).
SELECT id::text, source, source_id FROM public.ads WHERE source_id IS NOT NULL;

-- name: ads_has_rows
SELECT EXISTS (SELECT 1 FROM public.ads LIMIT 1) AS busy;

-- name: demo_update_title
UPDATE public.ads SET title = title || %(suffix)s WHERE id = %(id)s;

-- name: demo_delete
DELETE FROM public.ads WHERE id = %(id)s;

-- name: demo_untracked_update
UPDATE public.ads SET updated_at = now() WHERE id = %(id)s;

-- name: demo_last_id
SELECT max(id) FROM public.ads;
