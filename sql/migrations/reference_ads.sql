-- The reference ads table shipped for the demo and the tests (created by migration 0002 when
-- [source] create_reference_table = true). Users point the configuration at their own table.
CREATE TABLE IF NOT EXISTS public.ads (
    id          bigserial PRIMARY KEY,
    user_id     text,
    category    text,
    title       text,
    body        text,
    price       numeric(12, 2),
    lat         double precision,
    lon         double precision,
    status      text NOT NULL DEFAULT 'active',
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    source      text,
    source_id   text
);
