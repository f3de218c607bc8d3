DROP VIEW agent_operations;
DROP INDEX operations_terminal_idx;
DROP INDEX operations_parent_idx;
DROP TABLE operation_refs;
ALTER TABLE operations DROP COLUMN first_attempt_at;
ALTER TABLE operations DROP COLUMN parent_key;
ALTER TABLE operations DROP COLUMN refs;
