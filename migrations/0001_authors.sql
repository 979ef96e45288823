-- Authors. Names are unique in the database itself (docs/http-api.md#authors), so concurrent creates and
-- renames cannot both win.
CREATE TABLE authors (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  name text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT authors_name_key UNIQUE (name)
);

-- An exact total without scanning: a one-row counter kept in the same transaction as every
-- insert and delete (statement-level, so bulk loads cost one update).
CREATE TABLE author_stats (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  total bigint NOT NULL
);
INSERT INTO author_stats (singleton, total) VALUES (true, 0);

CREATE FUNCTION author_stats_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE author_stats SET total = total + (SELECT count(*) FROM inserted_rows);
  RETURN NULL;
END $$;

CREATE FUNCTION author_stats_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE author_stats SET total = total - (SELECT count(*) FROM deleted_rows);
  RETURN NULL;
END $$;

CREATE FUNCTION author_stats_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE author_stats SET total = 0;
  RETURN NULL;
END $$;

CREATE TRIGGER authors_count_insert AFTER INSERT ON authors
  REFERENCING NEW TABLE AS inserted_rows FOR EACH STATEMENT EXECUTE FUNCTION author_stats_inserted();
CREATE TRIGGER authors_count_delete AFTER DELETE ON authors
  REFERENCING OLD TABLE AS deleted_rows FOR EACH STATEMENT EXECUTE FUNCTION author_stats_deleted();
CREATE TRIGGER authors_count_truncate AFTER TRUNCATE ON authors
  FOR EACH STATEMENT EXECUTE FUNCTION author_stats_truncated();
