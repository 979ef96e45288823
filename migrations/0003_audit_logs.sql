-- The audit trail (docs/audit.md#what-is-recorded).
CREATE TABLE audit_logs (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  -- Internal: the writer's id for the record, so a redelivered record (Redis Stream claim, a
  -- retried batch whose commit was not acknowledged) is inserted once (ON CONFLICT DO NOTHING).
  entry_id uuid NOT NULL,
  "timestamp" timestamptz NOT NULL,
  user_id text NOT NULL,
  username text NOT NULL,
  user_roles jsonb NOT NULL DEFAULT '[]',
  action_type text NOT NULL,
  resource text NOT NULL,
  outcome text NOT NULL CHECK (outcome IN ('success', 'error', 'permission_denied')),
  ip_address text NOT NULL,
  user_agent text NOT NULL,
  request_id text NOT NULL,
  correlation_id text NOT NULL,
  response_status integer NOT NULL,
  duration_ms integer NOT NULL,
  request_data jsonb NOT NULL DEFAULT '{}',
  error_message text,
  CONSTRAINT audit_logs_entry_id_key UNIQUE (entry_id)
);

-- Listings are newest first ("timestamp" DESC, id DESC). One index per filter, each ending with
-- the sort key, so a filter, a date range and the page come from one index range scan, and the
-- page's rows are the first ones of that range.
CREATE INDEX audit_logs_timestamp_idx ON audit_logs ("timestamp" DESC, id DESC);
CREATE INDEX audit_logs_user_id_idx ON audit_logs (user_id, "timestamp" DESC, id DESC);
CREATE INDEX audit_logs_username_idx ON audit_logs (username, "timestamp" DESC, id DESC);
CREATE INDEX audit_logs_action_type_idx ON audit_logs (action_type, "timestamp" DESC, id DESC);
CREATE INDEX audit_logs_resource_idx ON audit_logs (resource, "timestamp" DESC, id DESC);
CREATE INDEX audit_logs_outcome_idx ON audit_logs (outcome, "timestamp" DESC, id DESC);

-- Exact totals stay cheap at millions of rows: an hourly rollup per (action_type, outcome), kept in
-- the same transaction as every insert and delete by statement-level triggers (one upsert per
-- batch). A total over the low-cardinality filters sums whole hours here and counts only the
-- partial hours at the ends of a date range in audit_logs (AuditLogs/Repo.ts). Keys are upserted
-- in sorted order so concurrent batches cannot deadlock.
CREATE TABLE audit_log_hourly (
  hour timestamptz NOT NULL,
  action_type text NOT NULL,
  outcome text NOT NULL,
  n bigint NOT NULL,
  PRIMARY KEY (hour, action_type, outcome)
);
CREATE INDEX audit_log_hourly_filters_idx ON audit_log_hourly (action_type, outcome, hour);
CREATE INDEX audit_log_hourly_outcome_idx ON audit_log_hourly (outcome, hour);

CREATE FUNCTION audit_log_hourly_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO audit_log_hourly (hour, action_type, outcome, n)
  SELECT date_trunc('hour', "timestamp" AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', action_type, outcome, count(*)
  FROM inserted_rows GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
  ON CONFLICT (hour, action_type, outcome) DO UPDATE SET n = audit_log_hourly.n + EXCLUDED.n;
  RETURN NULL;
END $$;

CREATE FUNCTION audit_log_hourly_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE audit_log_hourly h SET n = h.n - d.n
  FROM (SELECT date_trunc('hour', "timestamp" AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hour, action_type, outcome, count(*) AS n
        FROM deleted_rows GROUP BY 1, 2, 3) d
  WHERE h.hour = d.hour AND h.action_type = d.action_type AND h.outcome = d.outcome;
  RETURN NULL;
END $$;

CREATE FUNCTION audit_log_hourly_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM audit_log_hourly;
  RETURN NULL;
END $$;

CREATE TRIGGER audit_logs_count_insert AFTER INSERT ON audit_logs
  REFERENCING NEW TABLE AS inserted_rows FOR EACH STATEMENT EXECUTE FUNCTION audit_log_hourly_inserted();
CREATE TRIGGER audit_logs_count_delete AFTER DELETE ON audit_logs
  REFERENCING OLD TABLE AS deleted_rows FOR EACH STATEMENT EXECUTE FUNCTION audit_log_hourly_deleted();
CREATE TRIGGER audit_logs_count_truncate AFTER TRUNCATE ON audit_logs
  FOR EACH STATEMENT EXECUTE FUNCTION audit_log_hourly_truncated();
