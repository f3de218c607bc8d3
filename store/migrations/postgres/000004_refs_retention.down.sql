DROP TRIGGER agent_operations_read_only ON agent_operations;
DROP FUNCTION agent_operations_read_only();
DROP VIEW agent_operations;
DROP INDEX operations_terminal_idx;
DROP INDEX operations_parent_idx;
DROP INDEX operations_refs_idx;
ALTER TABLE operations DROP COLUMN refs, DROP COLUMN parent_key, DROP COLUMN first_attempt_at;
