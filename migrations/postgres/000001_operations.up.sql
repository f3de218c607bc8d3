-- The operation journal. One row per (tenant, operation key): the unique key
-- is what makes Register atomic across any number of server processes.
CREATE TABLE operations (
    tenant                text        NOT NULL DEFAULT '',
    operation_key         text        NOT NULL,
    action_type           text        NOT NULL,
    request_hash          text        NOT NULL,
    payload               jsonb       NOT NULL,
    status                text        NOT NULL
        CHECK (status IN ('pending', 'in_progress', 'unknown', 'succeeded', 'failed_final')),
    attempt_count         integer     NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
    lease_owner           text,
    lease_until           timestamptz,
    external_id           text,
    duplicate_external_id text,
    result                jsonb,
    error_code            text,
    needs_review          boolean     NOT NULL DEFAULT false,
    review_reason         text,
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
