ALTER TABLE operation_events DROP COLUMN actor_label;
