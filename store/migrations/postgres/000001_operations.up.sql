-- The operation journal. One row per (tenant, operation key): the unique key
-- is what makes Register atomic across any number of server processes.
CREATE TABLE operations (
    tenant                text        NOT NULL DEFAULT '',
    operation_key         text        NOT NULL,
    action_type           text        NOT NULL,
    request_hash          text        NOT NULL,
    payload               json        NOT NULL, -- canonical text, kept verbatim
    status                text        NOT NULL
        CHECK (status IN ('pending', 'in_progress', 'unknown', 'succeeded', 'failed_final')),
    -- The status (effective: an expired lease counts as unknown) before the
    -- latest change. Each transition sets it from the row version it
    -- actually updates, so the history it writes in the same statement
    -- names the true "from" even under concurrency.
    prev_status           text,
    attempt_count         integer     NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
    lease_owner           text,
    lease_until           timestamptz,
    external_id           text,
    duplicate_external_id text,
    result                json,
    error_code            text,
    needs_review          boolean     NOT NULL DEFAULT false,
    review_reason         text,
    unknown_since         timestamptz,
    check_count           integer     NOT NULL DEFAULT 0,
    last_checked_at       timestamptz,
    next_check_at         timestamptz,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, operation_key),
    -- An in_progress row always has a lease: expiry is judged from lease_until.
    CHECK (status <> 'in_progress' OR lease_until IS NOT NULL)
);

-- Operations that are not settled: what the reconciler and operators scan.
-- Partial, so terminal rows (the vast majority) cost nothing here.
CREATE INDEX operations_open_idx ON operations (status, lease_until)
    WHERE status IN ('in_progress', 'unknown') OR needs_review;

-- The history: one row per state change, written by the same statement as
-- the change. Never updated or deleted while its operation exists.
CREATE TABLE operation_events (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant        text        NOT NULL,
    operation_key text        NOT NULL,
    at            timestamptz NOT NULL DEFAULT now(),
    from_status   text,
    to_status     text        NOT NULL,
    attempt       integer     NOT NULL,
    actor         text        NOT NULL DEFAULT '',
    reason        text        NOT NULL DEFAULT '',
    external_id   text
);
CREATE INDEX operation_events_operation_idx ON operation_events (tenant, operation_key, id);
