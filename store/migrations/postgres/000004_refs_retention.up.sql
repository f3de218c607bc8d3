-- Issue 12: business references, child operations, the provider's dedup
-- window, retention, and the reference table of docs/spec.md as a view.
--   refs: the business references given at registration (NULL: none),
--     searched with @> through a GIN index that only rows with refs enter,
--     so the hot path (operations without refs) pays nothing for it;
--   parent_key: the operation this one is a side effect of;
--   first_attempt_at: when the first attempt was claimed; a retry_same_key
--     action's retry.provider_dedup_window counts from it. Rows claimed
--     before this migration get created_at, which is earlier than (or equal
--     to) their first claim: their window ends sooner, never later.
-- The indexes are built without CONCURRENTLY (a migration runs in one
-- transaction): on a large journal, run this migration in a quiet hour.
ALTER TABLE operations
    ADD COLUMN refs jsonb CHECK (refs IS NULL OR jsonb_typeof(refs) = 'object'),
    ADD COLUMN parent_key text,
    ADD COLUMN first_attempt_at timestamptz;
UPDATE operations SET first_attempt_at = created_at WHERE attempt_count > 0;

CREATE INDEX operations_refs_idx ON operations USING gin (refs jsonb_path_ops) WHERE refs IS NOT NULL;
CREATE INDEX operations_parent_idx ON operations (tenant, parent_key, operation_key) WHERE parent_key IS NOT NULL;
-- Purge finds the oldest terminal rows of an action here, and the oldest
-- terminal age (a metric) is its first entry.
CREATE INDEX operations_terminal_idx ON operations (action_type, updated_at)
    WHERE status IN ('succeeded', 'failed_final');

-- The reference table of docs/spec.md, as a read-only view with its column names (and the
-- journal's extras after them), so that its "safe queries" run verbatim:
--   SELECT operation_key, status, attempt_count, external_id FROM agent_operations
--   WHERE operation_key = 'payment:order-817:intent-01';
-- status is the effective one: an in_progress row whose lease has ended
-- is unknown. Keys are unique per tenant; with several tenants, group by
-- (tenant, operation_key).
CREATE VIEW agent_operations AS
SELECT operation_key, action_type, request_hash,
       CASE WHEN status = 'in_progress' AND lease_until <= now() THEN 'unknown' ELSE status END AS status,
       attempt_count, external_id, result::text AS result_json, error_code, lease_until, created_at, updated_at,
       tenant, needs_review, refs, parent_key
FROM operations;

CREATE FUNCTION agent_operations_read_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'agent_operations is a read-only view of the journal: change operations through the journal''s API (or opjournal ops), never by SQL';
END
$$;
CREATE TRIGGER agent_operations_read_only INSTEAD OF INSERT OR UPDATE OR DELETE ON agent_operations
    FOR EACH ROW EXECUTE FUNCTION agent_operations_read_only();
