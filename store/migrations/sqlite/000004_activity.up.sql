-- The console's activity chart counts a tenant's events per time bucket
-- (Store.Activity): this index finds one tenant's events from a time on
-- without reading any other tenant's. It costs every event one more index
-- entry.
CREATE INDEX operation_events_tenant_at_idx ON operation_events (tenant, at);
