-- Every committed write reaches the read cache of every instance (docs/architecture.md#the-read-cache).
-- 0005 skipped the service's own sessions (application_name): a write of the service whose
-- generation bump never ran (the client went away while the statement waited on a lock and it
-- committed later, a statement deadline given up on after the commit, the writing process killed)
-- was then seen by no instance, nor the writes of another tool reusing the name. The triggers now
-- NOTIFY for every session, and the payload says what the statement did, so a create does not
-- drop the pages whose rows it leaves as they were (ListGenerations, src/Authors/ReadCache.ts):
-- `c:<ids>` (inserted), `u:<ids>` (updated: old and new ids), `d:<ids>` (deleted), `all` past 100
-- ids and for TRUNCATE. An instance of the previous release reads a payload with a kind as `all`.
--
-- Cost: a transaction that NOTIFYs holds a database-wide lock from its commit until its WAL flush
-- is done, so notifying commits go one at a time and their rate is bounded by 1 / the flush's
-- latency. pgbench on this schema, 16 clients inserting unique names as the service's sessions, 2
-- busy shared cores (fdatasync 2-4 ms): ~2,600 inserts/s with 0005's triggers (the service's own
-- sessions skipped), ~400 with these; with synchronous_commit = off ~6,800 and ~3,700
-- (docs/performance.md#writes-and-the-change-feed).
DROP TRIGGER authors_notify_insert ON authors;
DROP TRIGGER authors_notify_update ON authors;
DROP TRIGGER authors_notify_delete ON authors;
DROP TRIGGER authors_notify_truncate ON authors;

CREATE OR REPLACE FUNCTION authors_notify_changed() RETURNS trigger LANGUAGE plpgsql AS $$
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
    PERFORM pg_notify('authors_changed', CASE
      WHEN n > 100 THEN 'all'
      ELSE (CASE TG_OP WHEN 'INSERT' THEN 'c:' WHEN 'DELETE' THEN 'd:' ELSE 'u:' END) || ids
    END);
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER authors_notify_insert AFTER INSERT ON authors
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION authors_notify_changed();
CREATE TRIGGER authors_notify_update AFTER UPDATE ON authors
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION authors_notify_changed();
CREATE TRIGGER authors_notify_delete AFTER DELETE ON authors
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION authors_notify_changed();
CREATE TRIGGER authors_notify_truncate AFTER TRUNCATE ON authors
  FOR EACH STATEMENT EXECUTE FUNCTION authors_notify_changed();
