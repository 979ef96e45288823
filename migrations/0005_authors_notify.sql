-- Writes made outside the service (psql, another application, a script) reach the read cache of
-- every instance (src/Authors/ReadCache.ts): a statement-level trigger NOTIFYs the ids a statement
-- changed on channel `authors_changed` ("all" past 100 ids, and for TRUNCATE), and each instance
-- LISTENs. The service's own sessions (application_name `author-directory-service`, set by
-- src/Db/Database.ts) are skipped: they invalidate through Redis or in process, and a transaction
-- that NOTIFYs takes a database-wide lock at commit, which would queue the service's creates one
-- behind the other.
CREATE FUNCTION authors_notify_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  n bigint;
  ids text;
BEGIN
  IF TG_OP = 'TRUNCATE' THEN
    PERFORM pg_notify('authors_changed', 'all');
    RETURN NULL;
  END IF;
  -- Transition tables exist only for the event of the trigger that fired: one branch each.
  IF TG_OP = 'INSERT' THEN
    SELECT count(*), string_agg(id::text, ',') INTO n, ids FROM (SELECT id FROM new_rows LIMIT 101) AS c;
  ELSIF TG_OP = 'DELETE' THEN
    SELECT count(*), string_agg(id::text, ',') INTO n, ids FROM (SELECT id FROM old_rows LIMIT 101) AS c;
  ELSE
    SELECT count(*), string_agg(id::text, ',') INTO n, ids
    FROM (SELECT id FROM old_rows UNION SELECT id FROM new_rows LIMIT 101) AS c;
  END IF;
  IF n > 0 THEN
    PERFORM pg_notify('authors_changed', CASE WHEN n > 100 THEN 'all' ELSE ids END);
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER authors_notify_insert AFTER INSERT ON authors
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
  WHEN (current_setting('application_name', true) IS DISTINCT FROM 'author-directory-service')
  EXECUTE FUNCTION authors_notify_changed();
CREATE TRIGGER authors_notify_update AFTER UPDATE ON authors
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
  WHEN (current_setting('application_name', true) IS DISTINCT FROM 'author-directory-service')
  EXECUTE FUNCTION authors_notify_changed();
CREATE TRIGGER authors_notify_delete AFTER DELETE ON authors
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
  WHEN (current_setting('application_name', true) IS DISTINCT FROM 'author-directory-service')
  EXECUTE FUNCTION authors_notify_changed();
CREATE TRIGGER authors_notify_truncate AFTER TRUNCATE ON authors FOR EACH STATEMENT
  WHEN (current_setting('application_name', true) IS DISTINCT FROM 'author-directory-service')
  EXECUTE FUNCTION authors_notify_changed();
