ALTER TABLE operation_events DROP COLUMN stated_actor;
ALTER TABLE operations ADD COLUMN duplicate_external_id text;
UPDATE operations SET duplicate_external_id = duplicate_external_ids[1];
ALTER TABLE operations
    DROP COLUMN hash_key_id,
    DROP COLUMN duplicate_reports,
    DROP COLUMN duplicate_external_ids,
    DROP COLUMN attempt_started_at;
