ALTER TABLE operation_events DROP COLUMN stated_actor;
ALTER TABLE operations ADD COLUMN duplicate_external_id TEXT;
UPDATE operations SET duplicate_external_id = json_extract(duplicate_external_ids, '$[0]');
ALTER TABLE operations DROP COLUMN hash_key_id;
ALTER TABLE operations DROP COLUMN duplicate_reports;
ALTER TABLE operations DROP COLUMN duplicate_external_ids;
ALTER TABLE operations DROP COLUMN attempt_started_at;
