-- The console's activity chart counts a tenant's events per time bucket
-- (Store.Activity): this index finds one tenant's events from a time on
-- without reading any other tenant's (the primary key orders them by
-- operation). It costs every event one more index entry. It is built
-- without CONCURRENTLY (a migration runs in one transaction), which blocks
-- writes to the history meanwhile: on a large journal, run this migration
-- in a quiet hour.
CREATE INDEX operation_events_tenant_at_idx ON operation_events (tenant, at);
