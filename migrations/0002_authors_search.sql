-- Case-insensitive substring search (`search`, WebSocket `name`) served by a trigram index.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE INDEX authors_name_trgm ON authors USING gin (name gin_trgm_ops);
