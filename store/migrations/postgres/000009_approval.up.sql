-- Approvals bound to the request hash (docs/approvals.md):
--   status awaiting_approval: registered, a person must approve this exact
--     request before any attempt;
--   approval: what the policy asked at registration and the approvals
--     given so far (JSON, NULL when no approval was needed); written once
--     by Register, appended to by Approve;
--   approval_deadline: when the question times out (database clock), in a
--     column of its own so that the timeout sweep finds due approvals
--     through operations_approval_due_idx, which only rows awaiting
--     approval enter.
-- Adding nullable columns without a default rewrites no row; the new CHECK
-- allows more than the old one, so it is added NOT VALID and validated
-- without blocking writes.
ALTER TABLE operations
    ADD COLUMN approval jsonb CHECK (approval IS NULL OR jsonb_typeof(approval) = 'object'),
    ADD COLUMN approval_deadline timestamptz,
    DROP CONSTRAINT operations_status_check,
    ADD CONSTRAINT operations_status_check
        CHECK (status IN ('pending', 'in_progress', 'unknown', 'succeeded', 'failed_final', 'awaiting_approval')) NOT VALID;
ALTER TABLE operations VALIDATE CONSTRAINT operations_status_check;
CREATE INDEX operations_approval_due_idx ON operations (approval_deadline) WHERE status = 'awaiting_approval';
