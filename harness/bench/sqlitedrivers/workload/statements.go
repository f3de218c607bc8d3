package workload

// The statements below are store/sqlite's (sqlite.go: getSQL, clockSQL,
// updateSQL, insertSQL, insertEventSQL), copied because this module must
// not link the store (it would bring modernc into every driver's binary);
// TestStatementsMatchStore fails when the store's texts change and these
// do not.

// nowSQL is the store's statement clock (?1: a test clock, NULL here).
const nowSQL = `coalesce(?1, CAST(unixepoch('subsec') * 1000 AS INTEGER))`

const effectiveStatus = `(CASE WHEN (status = 'in_progress' AND lease_until <= ` + nowSQL + `) THEN 'unknown' ELSE status END)`

const (
	fullColumns = `payload, result, coalesce(note, ''), ` + restColumns
	restColumns = `tenant, operation_key, action_type, request_hash, ` + effectiveStatus + `,
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	duplicate_external_ids, duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= ` + nowSQL + `) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs, coalesce(parent_key, ''), first_attempt_at, approval, approval_deadline, ` + nowSQL
)

// The store's write-path statements (see store/sqlite/sqlite.go).
const (
	// GetSQL reads one operation and the clock.
	GetSQL = `SELECT ` + fullColumns + ` FROM operations WHERE tenant = ?2 AND operation_key = ?3`
	// ClockSQL reads the clock alone.
	ClockSQL = `SELECT ` + nowSQL
	// UpdateSQL writes every field a rule may change.
	UpdateSQL = `UPDATE operations SET status = ?4, attempt_count = ?5, lease_owner = ?6,
			lease_until = ?7, external_id = ?8, result = ?9, error_code = ?10, needs_review = ?11, review_reason = ?12,
			unknown_since = ?13, check_count = ?14, last_checked_at = ?15, next_check_at = ?16, attempt_started_at = ?17,
			duplicate_external_ids = ?18, duplicate_reports = ?19, updated_at = ?20, first_attempt_at = ?21,
			note = ?22, approval = ?23, approval_deadline = ?24
			WHERE tenant = ?2 AND operation_key = ?3`
	// InsertSQL writes a new row.
	InsertSQL = `INSERT INTO operations (tenant, operation_key, status, attempt_count, lease_owner,
		lease_until, external_id, result, error_code, needs_review, review_reason, unknown_since, check_count,
		last_checked_at, next_check_at, attempt_started_at, duplicate_external_ids, duplicate_reports, updated_at,
		first_attempt_at, note, approval, approval_deadline, action_type, request_hash, hash_key_id, payload, created_at, refs, parent_key)
		VALUES (?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31)`
	// InsertEventSQL writes one history row.
	InsertEventSQL = `INSERT INTO operation_events
		(tenant, operation_key, at, from_status, to_status, attempt, actor, stated_actor, reason, external_id)
		VALUES (?1, ?2, ?3, nullif(?4, ''), ?5, ?6, ?7, ?8, ?9, nullif(?10, ''))`
)
