ALTER TABLE operation_events DROP CONSTRAINT operation_events_pkey;
ALTER TABLE operation_events ADD PRIMARY KEY (id);
CREATE INDEX operation_events_operation_idx ON operation_events (tenant, operation_key, id);
