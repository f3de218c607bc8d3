-- The history is read only by operation (tenant, operation_key, in id
-- order), so that index is its primary key, and the id-only key goes:
-- every event then maintains one index instead of two. The id stays an
-- identity column: it orders an operation's events and numbers them in
-- the API.
ALTER TABLE operation_events DROP CONSTRAINT operation_events_pkey;
DROP INDEX operation_events_operation_idx;
ALTER TABLE operation_events ADD PRIMARY KEY (tenant, operation_key, id);
