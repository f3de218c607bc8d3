-- The operation journal (SQLite). Times are INTEGER milliseconds since the
-- Unix epoch, taken from SQLite's own clock (unixepoch('subsec')), never from
-- a worker. One row per (tenant, operation key): the primary key makes
-- Register atomic.
CREATE TABLE operations (
    tenant                TEXT    NOT NULL DEFAULT '',
    operation_key         TEXT    NOT NULL,
    action_type           TEXT    NOT NULL,
    request_hash          TEXT    NOT NULL,
    payload               TEXT    NOT NULL CHECK (json_valid(payload)),
    status                TEXT    NOT NULL
        CHECK (status IN ('pending', 'in_progress', 'unknown', 'succeeded', 'failed_final')),
    attempt_count         INTEGER NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
    lease_owner           TEXT,
    lease_until           INTEGER,
    external_id           TEXT,
    duplicate_external_id TEXT,
    result                TEXT    CHECK (result IS NULL OR json_valid(result)),
    error_code            TEXT,
    needs_review          INTEGER NOT NULL DEFAULT 0 CHECK (needs_review IN (0, 1)),
    review_reason         TEXT,
    unknown_since         INTEGER,
    check_count           INTEGER NOT NULL DEFAULT 0,
    last_checked_at       INTEGER,
    next_check_at         INTEGER,
    created_at            INTEGER NOT NULL,
    updated_at            INTEGER NOT NULL,
    PRIMARY KEY (tenant, operation_key),
    CHECK (status <> 'in_progress' OR lease_until IS NOT NULL)
) WITHOUT ROWID;

CREATE INDEX operations_open_idx ON operations (status, lease_until)
    WHERE status IN ('in_progress', 'unknown') OR needs_review;

-- The history: one row per state change, in the same transaction as the change.
CREATE TABLE operation_events (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant        TEXT    NOT NULL,
    operation_key TEXT    NOT NULL,
    at            INTEGER NOT NULL,
    from_status   TEXT,
    to_status     TEXT    NOT NULL,
    attempt       INTEGER NOT NULL,
    actor         TEXT    NOT NULL DEFAULT '',
    reason        TEXT    NOT NULL DEFAULT '',
    external_id   TEXT
);
CREATE INDEX operation_events_operation_idx ON operation_events (tenant, operation_key, id);
