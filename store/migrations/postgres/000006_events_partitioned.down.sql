-- Back to one unpartitioned history table (the shape after 000005). Only
-- the history of operations that exist goes back, and of each only its
-- current incarnation (from its latest registration on): rows that a
-- purge left for a partition drop (operation_events_draining) would
-- otherwise reappear, since without partitions the history is deleted
-- with its operation and read without that bound.
ALTER TABLE operation_events RENAME TO operation_events_partitioned;
ALTER TABLE operation_events_partitioned RENAME CONSTRAINT operation_events_pkey TO operation_events_partitioned_pkey;
ALTER INDEX operation_events_tenant_at_idx RENAME TO operation_events_partitioned_tenant_at_idx;
ALTER SEQUENCE operation_events_id_seq RENAME TO operation_events_partitioned_id_seq;

CREATE TABLE operation_events (
    id            bigint      GENERATED ALWAYS AS IDENTITY,
    tenant        text        NOT NULL,
    operation_key text        NOT NULL,
    at            timestamptz NOT NULL DEFAULT now(),
    from_status   text,
    to_status     text        NOT NULL,
    attempt       integer     NOT NULL,
    actor         text        NOT NULL DEFAULT '',
    reason        text        NOT NULL DEFAULT '',
    external_id   text,
    stated_actor  text        NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, operation_key, id)
);

INSERT INTO operation_events (id, tenant, operation_key, at, from_status, to_status, attempt, actor, reason, external_id, stated_actor)
    OVERRIDING SYSTEM VALUE
    SELECT e.id, e.tenant, e.operation_key, e.at, e.from_status, e.to_status, e.attempt, e.actor, e.reason, e.external_id, e.stated_actor
    FROM operation_events_partitioned e
    JOIN operations o ON o.tenant = e.tenant AND o.operation_key = e.operation_key
    WHERE NOT EXISTS (SELECT 1 FROM operation_events_partitioned r
                      WHERE r.tenant = e.tenant AND r.operation_key = e.operation_key
                        AND r.from_status IS NULL AND r.id > e.id);
SELECT setval(pg_get_serial_sequence('operation_events', 'id'),
    coalesce((SELECT max(id) FROM operation_events_partitioned), 0) + 1, false);
DROP TABLE operation_events_partitioned;
DROP TABLE operation_events_draining;

CREATE INDEX operation_events_tenant_at_idx ON operation_events (tenant, at);
