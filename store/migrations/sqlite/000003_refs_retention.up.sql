-- Issue 12: business references, child operations, the provider's dedup
-- window, retention, and the reference table of docs/spec.md as a view. See the
-- PostgreSQL migration for what each column is for. SQLite has no GIN
-- index: refs are also kept one per row in operation_refs, indexed by
-- (tenant, name, value), which List searches; operations.refs holds the
-- whole object for reading.
ALTER TABLE operations ADD COLUMN refs TEXT CHECK (refs IS NULL OR json_valid(refs));
ALTER TABLE operations ADD COLUMN parent_key TEXT;
ALTER TABLE operations ADD COLUMN first_attempt_at INTEGER;
UPDATE operations SET first_attempt_at = created_at WHERE attempt_count > 0;

CREATE TABLE operation_refs (
    tenant        TEXT NOT NULL,
    operation_key TEXT NOT NULL,
    name          TEXT NOT NULL,
    value         TEXT NOT NULL,
    PRIMARY KEY (tenant, operation_key, name)
) WITHOUT ROWID;
CREATE INDEX operation_refs_value_idx ON operation_refs (tenant, name, value, operation_key);

CREATE INDEX operations_parent_idx ON operations (tenant, parent_key, operation_key) WHERE parent_key IS NOT NULL;
CREATE INDEX operations_terminal_idx ON operations (action_type, updated_at)
    WHERE status IN ('succeeded', 'failed_final');

-- The reference table of docs/spec.md as a (read-only, as every SQLite view) view with its
-- column names. Times are shown as ISO 8601 text in UTC. The clock is
-- julianday('now'), which every SQLite 3 shell knows (unixepoch('subsec')
-- needs 3.42).
CREATE VIEW agent_operations AS
SELECT operation_key, action_type, request_hash,
       CASE WHEN status = 'in_progress' AND lease_until <= CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)
            THEN 'unknown' ELSE status END AS status,
       attempt_count, external_id, result AS result_json, error_code,
       strftime('%Y-%m-%dT%H:%M:%fZ', lease_until / 1000.0, 'unixepoch') AS lease_until,
       strftime('%Y-%m-%dT%H:%M:%fZ', created_at / 1000.0, 'unixepoch') AS created_at,
       strftime('%Y-%m-%dT%H:%M:%fZ', updated_at / 1000.0, 'unixepoch') AS updated_at,
       tenant, needs_review, refs, parent_key
FROM operations;
