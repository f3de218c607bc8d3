-- Issue 17: the history partitioned by time, so that a purge can drop a
-- whole partition (one catalog change, a few hundred bytes of WAL)
-- instead of deleting its rows one by one (a WAL record per row, and a
-- vacuum of every row and index entry afterwards). store/postgres
-- (partitions.go) creates partitions ahead, drops them, and says why.
--
-- By RANGE on `at`, one partition per week (Monday 00:00 UTC to the next),
-- not by a hash of the tenant: retention is a matter of time, and a hash
-- partition holds every age, so it could never be dropped. A week: a key
-- lookup (an operation's history, a purge's delete) probes every
-- partition's index, so fewer is better, and with retentions of days to
-- months (720h in the policy example) a week keeps about six of them;
-- purged history is released at most a week later than by row deletes.
--
-- Keys. A partitioned table's unique index must contain the partition
-- key, so the primary key becomes (tenant, operation_key, id, at). It
-- enforces less than (tenant, operation_key, id) did in name only: id is
-- an identity (a sequence: two rows never get the same one), and no
-- statement inserts an id of its own or relies on a conflict on the
-- history (only operations has ON CONFLICT, on its own primary key,
-- untouched). An event belongs to the operation row that the same
-- statement updated or inserted; that row's lock orders them.
--
-- The new table takes the old rows (with their ids) in this migration, so
-- on a large journal run it in a quiet hour; writes to the history wait
-- for it.
ALTER TABLE operation_events RENAME TO operation_events_unpartitioned;
ALTER TABLE operation_events_unpartitioned RENAME CONSTRAINT operation_events_pkey TO operation_events_unpartitioned_pkey;
ALTER INDEX operation_events_tenant_at_idx RENAME TO operation_events_unpartitioned_tenant_at_idx;
ALTER SEQUENCE operation_events_id_seq RENAME TO operation_events_unpartitioned_id_seq;

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
    PRIMARY KEY (tenant, operation_key, id, at)
) PARTITION BY RANGE (at);
CREATE INDEX operation_events_tenant_at_idx ON operation_events (tenant, at);

-- Rows no weekly partition covers (the store was down when it should have
-- created one, or a clock far off) land here, so an insert never fails.
-- The store moves them into the week's partition when it creates it; the
-- default partition itself is never dropped, its rows are purged one by one.
CREATE TABLE operation_events_default PARTITION OF operation_events DEFAULT;

-- One partition per week from the oldest row's week to two weeks ahead of
-- now (the store keeps two ahead from then on). Names are
-- operation_events_wYYYYMMDD (the Monday); the store reads the bounds
-- from the catalog, not from the name.
DO $$
DECLARE
    w timestamptz := date_trunc('week', coalesce((SELECT min(at) FROM operation_events_unpartitioned), now()) AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    last timestamptz := date_trunc('week', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '14 days';
BEGIN
    WHILE w <= last LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF operation_events FOR VALUES FROM (%L) TO (%L)',
            'operation_events_w' || to_char(w AT TIME ZONE 'UTC', 'YYYYMMDD'), w, w + interval '7 days');
        w := w + interval '7 days';
    END LOOP;
END
$$;

INSERT INTO operation_events (id, tenant, operation_key, at, from_status, to_status, attempt, actor, reason, external_id, stated_actor)
    OVERRIDING SYSTEM VALUE
    SELECT id, tenant, operation_key, at, from_status, to_status, attempt, actor, reason, external_id, stated_actor
    FROM operation_events_unpartitioned;
-- Ids go on from where they were: they order an operation's events.
SELECT setval(pg_get_serial_sequence('operation_events', 'id'),
    coalesce((SELECT max(id) FROM operation_events_unpartitioned), 0) + 1, false);
DROP TABLE operation_events_unpartitioned;

-- The partitions whose purged history is left for the drop (see
-- partitions.go): a purge of an action whose retention has passed `upto`
-- (the partition's end) deletes the operations but not their rows in it.
-- A row here is a partition name, not a reference: a dropped partition's
-- row goes in the same transaction.
CREATE TABLE operation_events_draining (
    partition_name text        PRIMARY KEY,
    upto           timestamptz NOT NULL
);
-- The purge looks for the rows that concern it by upto. An index, though
-- the table is tiny: the journal's connections plan with enable_seqscan
-- off, and a statement that must scan without one is costed so high that
-- PostgreSQL compiles it (JIT), which took seconds.
CREATE INDEX operation_events_draining_upto_idx ON operation_events_draining (upto);
