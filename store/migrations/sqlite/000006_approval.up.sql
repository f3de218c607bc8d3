-- Approvals bound to the request hash: the status awaiting_approval, the
-- approval the policy asked for at registration (approval: JSON, NULL for
-- none) and its deadline (approval_deadline, milliseconds; its own column
-- so that the timeout sweep finds due approvals through an index).
--
-- SQLite cannot change a CHECK constraint in place, so the table is
-- rebuilt (https://www.sqlite.org/lang_altertable.html#otheralter): a new
-- table, every row copied, the old one dropped, the new one renamed, its
-- indexes and the view that reads it made again. It runs in the
-- migration's transaction, so a failure leaves the old table as it was.
DROP VIEW agent_operations;
CREATE TABLE operations_new (
    tenant                 TEXT    NOT NULL DEFAULT '',
    operation_key          TEXT    NOT NULL,
    action_type            TEXT    NOT NULL,
    request_hash           TEXT    NOT NULL,
    payload                TEXT    NOT NULL CHECK (json_valid(payload)),
    status                 TEXT    NOT NULL
        CHECK (status IN ('pending', 'in_progress', 'unknown', 'succeeded', 'failed_final', 'awaiting_approval')),
    attempt_count          INTEGER NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
    lease_owner            TEXT,
    lease_until            INTEGER,
    external_id            TEXT,
    result                 TEXT    CHECK (result IS NULL OR json_valid(result)),
    error_code             TEXT,
    needs_review           INTEGER NOT NULL DEFAULT 0 CHECK (needs_review IN (0, 1)),
    review_reason          TEXT,
    unknown_since          INTEGER,
    check_count            INTEGER NOT NULL DEFAULT 0,
    last_checked_at        INTEGER,
    next_check_at          INTEGER,
    created_at             INTEGER NOT NULL,
    updated_at             INTEGER NOT NULL,
    attempt_started_at     INTEGER,
    duplicate_external_ids TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(duplicate_external_ids)),
    duplicate_reports      INTEGER NOT NULL DEFAULT 0,
    hash_key_id            TEXT    NOT NULL DEFAULT '',
    refs                   TEXT    CHECK (refs IS NULL OR json_valid(refs)),
    parent_key             TEXT,
    first_attempt_at       INTEGER,
    note                   TEXT,
    approval               TEXT    CHECK (approval IS NULL OR json_valid(approval)),
    approval_deadline      INTEGER,
    PRIMARY KEY (tenant, operation_key),
    CHECK (status <> 'in_progress' OR lease_until IS NOT NULL)
) WITHOUT ROWID;
INSERT INTO operations_new (tenant, operation_key, action_type, request_hash, payload, status, attempt_count, lease_owner, lease_until, external_id, result, error_code, needs_review, review_reason, unknown_since, check_count, last_checked_at, next_check_at, created_at, updated_at, attempt_started_at, duplicate_external_ids, duplicate_reports, hash_key_id, refs, parent_key, first_attempt_at, note)
    SELECT tenant, operation_key, action_type, request_hash, payload, status, attempt_count, lease_owner, lease_until, external_id, result, error_code, needs_review, review_reason, unknown_since, check_count, last_checked_at, next_check_at, created_at, updated_at, attempt_started_at, duplicate_external_ids, duplicate_reports, hash_key_id, refs, parent_key, first_attempt_at, note FROM operations;
DROP TABLE operations;
ALTER TABLE operations_new RENAME TO operations;
CREATE INDEX operations_open_idx ON operations (status, lease_until)
    WHERE status IN ('in_progress', 'unknown') OR needs_review;
CREATE INDEX operations_parent_idx ON operations (tenant, parent_key, operation_key) WHERE parent_key IS NOT NULL;
CREATE INDEX operations_terminal_idx ON operations (action_type, updated_at)
    WHERE status IN ('succeeded', 'failed_final');
-- The timeout sweep's index: only rows awaiting approval enter it.
CREATE INDEX operations_approval_due_idx ON operations (approval_deadline) WHERE status = 'awaiting_approval';

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
