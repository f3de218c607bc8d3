-- The protocol table (protocol.go) of issues 10 and 11:
--   attempt_started_at: when the current attempt was claimed; heartbeats
--     (ExtendLease) never extend a lease beyond max_attempt_seconds of it;
--   duplicate_external_ids / duplicate_reports: repeated reports of other
--     effects are bounded (the distinct ids up to 10, and a count) instead
--     of one history row each;
--   hash_key_id: the key of a keyed request hash (actions with
--     redact_fields), '' for the plain SHA-256;
--   operation_events.stated_actor: what the caller said it acts as, beside
--     the authenticated actor.
ALTER TABLE operations
    ADD COLUMN attempt_started_at timestamptz,
    ADD COLUMN duplicate_external_ids text[] NOT NULL DEFAULT '{}',
    ADD COLUMN duplicate_reports integer NOT NULL DEFAULT 0,
    ADD COLUMN hash_key_id text NOT NULL DEFAULT '';
UPDATE operations SET attempt_started_at = updated_at WHERE attempt_count > 0;
UPDATE operations SET duplicate_external_ids = ARRAY[duplicate_external_id], duplicate_reports = 1
    WHERE duplicate_external_id IS NOT NULL;
ALTER TABLE operations DROP COLUMN duplicate_external_id;
ALTER TABLE operation_events ADD COLUMN stated_actor text NOT NULL DEFAULT '';
