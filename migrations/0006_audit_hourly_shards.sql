-- The audit rollup without hot rows. 0003 upserts every batch into the (hour, action_type, outcome)
-- rows of the current hour, so the writers of several instances queued on the same few rows until
-- each commit. A batch now upserts into the rows of its backend's shard (`pg_backend_pid() % 4`):
-- writers on different shards never wait for each other. A total sums the rows of every shard, as
-- before (AuditLogs/Repo.ts sums `n` over the hours it wants), so it stays exact.
--
-- Keys are still upserted in sorted order, and a transaction only touches its own shard, so
-- concurrent batches cannot deadlock. Deletions add negative counts to the deleting backend's
-- shard: the sum stays exact whichever shard counted the rows in.

-- Writers wait here until the rollup's new key and functions are in place.
LOCK TABLE audit_logs IN SHARE ROW EXCLUSIVE MODE;

-- Existing rows become shard 0: the totals carry over unchanged.
ALTER TABLE audit_log_hourly ADD COLUMN shard smallint NOT NULL DEFAULT 0;
ALTER TABLE audit_log_hourly DROP CONSTRAINT audit_log_hourly_pkey;
ALTER TABLE audit_log_hourly ADD CONSTRAINT audit_log_hourly_pkey PRIMARY KEY (hour, action_type, outcome, shard);

CREATE OR REPLACE FUNCTION audit_log_hourly_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO audit_log_hourly (hour, action_type, outcome, shard, n)
  SELECT date_trunc('hour', "timestamp" AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', action_type, outcome, pg_backend_pid() % 4, count(*)
  FROM inserted_rows GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
  ON CONFLICT (hour, action_type, outcome, shard) DO UPDATE SET n = audit_log_hourly.n + EXCLUDED.n;
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION audit_log_hourly_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO audit_log_hourly (hour, action_type, outcome, shard, n)
  SELECT date_trunc('hour', "timestamp" AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', action_type, outcome, pg_backend_pid() % 4, -count(*)
  FROM deleted_rows GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
  ON CONFLICT (hour, action_type, outcome, shard) DO UPDATE SET n = audit_log_hourly.n + EXCLUDED.n;
  RETURN NULL;
END $$;
-- audit_log_hourly_truncated (DELETE FROM audit_log_hourly) and the triggers of 0003 stay as they are.
