-- The audit trail (INTERFACE §Resources: audit log record; CONTRACT §6, §9).
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
