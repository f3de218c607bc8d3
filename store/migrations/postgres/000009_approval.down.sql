-- Back to the schema without approvals. An operation still awaiting
-- approval cannot be represented there: it is ended as failed_final
-- (approval_rejected), so that nothing runs without the approval it was
-- registered to need.
DROP INDEX operations_approval_due_idx;
UPDATE operations SET status = 'failed_final', error_code = 'approval_rejected' WHERE status = 'awaiting_approval';
ALTER TABLE operations
    DROP CONSTRAINT operations_status_check,
    ADD CONSTRAINT operations_status_check
        CHECK (status IN ('pending', 'in_progress', 'unknown', 'succeeded', 'failed_final')),
    DROP COLUMN approval_deadline,
    DROP COLUMN approval;
