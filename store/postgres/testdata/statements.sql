-- The PostgreSQL store's statements, rendered from the protocol table
-- (protocol/table.go) by store/postgres/render.go. Generated:
-- go run ./protocol/cmd/protocolgen (make generate)
-- $1 is the clock (NULL: now()), $2 the tenant, $3 the key; a rule's
-- parameters follow in the order given. Batched statements take arrays.

-- name: predicate: effective status
SELECT (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END);

-- name: predicate: effectively unknown
SELECT (status = 'unknown' OR (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())));

-- name: predicate: lease expired
SELECT (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now()));

-- name: predicate: check due
SELECT ((status = 'unknown' OR (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now()))) AND NOT needs_review AND (next_check_at IS NULL OR next_check_at <= coalesce($1::timestamptz, now())));

-- name: predicate: purgeable
SELECT action_type = $2 AND (status IN ('succeeded', 'failed_final') AND NOT needs_review AND updated_at <= coalesce($1::timestamptz, now()) - make_interval(secs => $3::float8));

-- name: Register: new, awaiting approval
-- params: action_type, request_hash, hash_key_id, payload, refs, parent_key, budgets, approval, approval_timeout, actor, actor_label, stated_actor, event_reason
WITH ins AS (
		INSERT INTO operations (tenant, operation_key, action_type, request_hash, hash_key_id, payload, refs, parent_key, budgets, created_at, updated_at, status, attempt_count, approval, approval_deadline)
		VALUES ($2, $3, $4::text, $5::text, $6::text, $7::json, $8::json::jsonb, nullif($9::text, ''), $10::json::jsonb, coalesce($1::timestamptz, now()), coalesce($1::timestamptz, now()), 'awaiting_approval', 0, $11::json, (coalesce($1::timestamptz, now()) + make_interval(secs => $12::float8)))
		ON CONFLICT (tenant, operation_key) DO NOTHING
		RETURNING *
	), ev AS (
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, coalesce($1::timestamptz, now()), NULL, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END), attempt_count, coalesce(nullif($13::text, ''), lease_owner, ''), $14::text, $15::text, $16::text, NULL
		FROM ins
	), holds AS (
		INSERT INTO budget_holds (tenant, budget, scope, created_at, operation_key, amount, over_limit)
		SELECT ins.tenant, b.budget, b.scope, ins.created_at, ins.operation_key, b.amount, coalesce(b.over_limit, false)
		FROM ins, jsonb_to_recordset(ins.budgets) AS b(budget text, scope text, amount bigint, over_limit boolean)
		WHERE ins.budgets IS NOT NULL
	)
	SELECT payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM ins;

-- name: Register: new, claimed
-- params: action_type, request_hash, hash_key_id, payload, refs, parent_key, budgets, worker_id, lease_seconds, actor, actor_label, stated_actor, event_reason
WITH ins AS (
		INSERT INTO operations (tenant, operation_key, action_type, request_hash, hash_key_id, payload, refs, parent_key, budgets, created_at, updated_at, status, attempt_count, lease_owner, lease_until, attempt_started_at, first_attempt_at)
		VALUES ($2, $3, $4::text, $5::text, $6::text, $7::json, $8::json::jsonb, nullif($9::text, ''), $10::json::jsonb, coalesce($1::timestamptz, now()), coalesce($1::timestamptz, now()), 'in_progress', 1, $11::text, (coalesce($1::timestamptz, now()) + make_interval(secs => $12::int)), coalesce($1::timestamptz, now()), coalesce($1::timestamptz, now()))
		ON CONFLICT (tenant, operation_key) DO NOTHING
		RETURNING *
	), ev AS (
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, coalesce($1::timestamptz, now()), NULL, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END), attempt_count, coalesce(nullif($13::text, ''), lease_owner, ''), $14::text, $15::text, $16::text, NULL
		FROM ins
	), holds AS (
		INSERT INTO budget_holds (tenant, budget, scope, created_at, operation_key, amount, over_limit)
		SELECT ins.tenant, b.budget, b.scope, ins.created_at, ins.operation_key, b.amount, coalesce(b.over_limit, false)
		FROM ins, jsonb_to_recordset(ins.budgets) AS b(budget text, scope text, amount bigint, over_limit boolean)
		WHERE ins.budgets IS NOT NULL
	)
	SELECT payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM ins;

-- name: Register: new
-- params: action_type, request_hash, hash_key_id, payload, refs, parent_key, budgets, actor, actor_label, stated_actor, event_reason
WITH ins AS (
		INSERT INTO operations (tenant, operation_key, action_type, request_hash, hash_key_id, payload, refs, parent_key, budgets, created_at, updated_at, status, attempt_count)
		VALUES ($2, $3, $4::text, $5::text, $6::text, $7::json, $8::json::jsonb, nullif($9::text, ''), $10::json::jsonb, coalesce($1::timestamptz, now()), coalesce($1::timestamptz, now()), 'pending', 0)
		ON CONFLICT (tenant, operation_key) DO NOTHING
		RETURNING *
	), ev AS (
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, coalesce($1::timestamptz, now()), NULL, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END), attempt_count, coalesce(nullif($11::text, ''), lease_owner, ''), $12::text, $13::text, $14::text, NULL
		FROM ins
	), holds AS (
		INSERT INTO budget_holds (tenant, budget, scope, created_at, operation_key, amount, over_limit)
		SELECT ins.tenant, b.budget, b.scope, ins.created_at, ins.operation_key, b.amount, coalesce(b.over_limit, false)
		FROM ins, jsonb_to_recordset(ins.budgets) AS b(budget text, scope text, amount bigint, over_limit boolean)
		WHERE ins.budgets IS NOT NULL
	)
	SELECT payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM ins;

-- name: Claim: win
-- params: worker_id, lease_seconds, retry_after_unknown, provider_dedup_window, actor, actor_label, stated_actor, event_reason
WITH upd AS (
		UPDATE operations SET prev_status = (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
		       status = 'in_progress',
		       attempt_count = (attempt_count + 1),
		       lease_owner = $4::text,
		       lease_until = (coalesce($1::timestamptz, now()) + make_interval(secs => $5::int)),
		       unknown_since = NULL,
		       next_check_at = NULL,
		       attempt_started_at = coalesce($1::timestamptz, now()),
		       first_attempt_at = coalesce(first_attempt_at, coalesce($1::timestamptz, now())),
		       error_code = NULL,
		       updated_at = coalesce($1::timestamptz, now())
		WHERE tenant = $2 AND operation_key = $3
		  AND coalesce(NOT needs_review AND ((CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('pending') OR ($6::boolean AND (status = 'unknown' OR (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now()))) AND ($7::float8 <= 0 OR first_attempt_at IS NULL OR first_attempt_at + make_interval(secs => $7::float8) > coalesce($1::timestamptz, now())))), false)
		RETURNING *
	), ev AS (
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, coalesce($1::timestamptz, now()), prev_status, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END), attempt_count, coalesce(nullif($8::text, ''), lease_owner, ''), $9::text, $10::text, $11::text, NULL
		FROM upd
	)
	SELECT payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM upd;

-- name: ExtendLease: extend
-- params: lease_seconds, max_attempt, attempt, actor, actor_label, stated_actor, event_reason
WITH upd AS (
		UPDATE operations SET prev_status = (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
		       lease_until = least(coalesce($1::timestamptz, now()) + make_interval(secs => $4::int), attempt_started_at + make_interval(secs => $5::float8)),
		       updated_at = coalesce($1::timestamptz, now())
		WHERE tenant = $2 AND operation_key = $3
		  AND coalesce(($6::int BETWEEN 1 AND attempt_count) AND (attempt_count = $6::int) AND (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('in_progress') AND (attempt_started_at + make_interval(secs => $5::float8) > coalesce($1::timestamptz, now())), false)
		RETURNING *
	), ev AS (
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, coalesce($1::timestamptz, now()), prev_status, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END), $6::int, coalesce(nullif($7::text, ''), lease_owner, ''), $8::text, $9::text, $10::text, NULL
		FROM upd
	)
	SELECT payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM upd;

-- name: MarkSucceeded: confirm
-- params: external_id, result, attempt, actor, actor_label, stated_actor, event_reason
WITH upd AS (
		UPDATE operations SET prev_status = (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
		       status = 'succeeded',
		       external_id = $4::text,
		       result = $5::json,
		       lease_until = NULL,
		       unknown_since = NULL,
		       next_check_at = NULL,
		       updated_at = coalesce($1::timestamptz, now())
		WHERE tenant = $2 AND operation_key = $3
		  AND coalesce(($6::int BETWEEN 1 AND attempt_count) AND (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('pending', 'in_progress', 'unknown'), false)
		RETURNING *
	), ev AS (
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, coalesce($1::timestamptz, now()), prev_status, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END), $6::int, coalesce(nullif($7::text, ''), lease_owner, ''), $8::text, $9::text, $10::text, nullif($4::text, '')
		FROM upd
	)
	SELECT payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM upd;

-- name: MarkSucceeded: effect after failed_final
-- params: review_reason, external_id, attempt, actor, actor_label, stated_actor, event_reason
WITH upd AS (
		UPDATE operations SET prev_status = (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
		       needs_review = true,
		       review_reason = $4::text,
		       duplicate_external_ids = (CASE WHEN ($5::text <> '' AND $5::text <> coalesce(external_id, '') AND NOT ($5::text = ANY(duplicate_external_ids)) AND cardinality(duplicate_external_ids) < 10) THEN array_append(duplicate_external_ids, $5::text) ELSE duplicate_external_ids END),
		       duplicate_reports = (duplicate_reports + 1),
		       updated_at = coalesce($1::timestamptz, now())
		WHERE tenant = $2 AND operation_key = $3
		  AND coalesce(($6::int BETWEEN 1 AND attempt_count) AND (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('failed_final') AND NOT needs_review, false)
		  AND NOT coalesce(($6::int BETWEEN 1 AND attempt_count) AND (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('pending', 'in_progress', 'unknown'), false)
		  AND NOT coalesce(($6::int BETWEEN 1 AND attempt_count) AND (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('succeeded') AND ($5::text = '' OR $5::text = coalesce(external_id, '')), false)
		RETURNING *
	), ev AS (
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, coalesce($1::timestamptz, now()), prev_status, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END), $6::int, coalesce(nullif($7::text, ''), lease_owner, ''), $8::text, $9::text, $10::text, nullif($5::text, '')
		FROM upd
	)
	SELECT payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM upd;

-- name: MarkSucceeded: duplicate effect
-- params: review_reason, external_id, attempt, actor, actor_label, stated_actor, event_reason
WITH upd AS (
		UPDATE operations SET prev_status = (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
		       needs_review = true,
		       review_reason = $4::text,
		       duplicate_external_ids = (CASE WHEN ($5::text <> '' AND $5::text <> coalesce(external_id, '') AND NOT ($5::text = ANY(duplicate_external_ids)) AND cardinality(duplicate_external_ids) < 10) THEN array_append(duplicate_external_ids, $5::text) ELSE duplicate_external_ids END),
		       duplicate_reports = (duplicate_reports + 1),
		       updated_at = coalesce($1::timestamptz, now())
		WHERE tenant = $2 AND operation_key = $3
		  AND coalesce(($6::int BETWEEN 1 AND attempt_count) AND (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('succeeded', 'failed_final') AND ($5::text <> '' AND $5::text <> coalesce(external_id, '') AND NOT ($5::text = ANY(duplicate_external_ids)) AND cardinality(duplicate_external_ids) < 10) AND NOT needs_review, false)
		  AND NOT coalesce(($6::int BETWEEN 1 AND attempt_count) AND (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('pending', 'in_progress', 'unknown'), false)
		  AND NOT coalesce(($6::int BETWEEN 1 AND attempt_count) AND (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('succeeded') AND ($5::text = '' OR $5::text = coalesce(external_id, '')), false)
		  AND NOT coalesce(($6::int BETWEEN 1 AND attempt_count) AND (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('failed_final') AND NOT needs_review, false)
		RETURNING *
	), ev AS (
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, coalesce($1::timestamptz, now()), prev_status, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END), $6::int, coalesce(nullif($7::text, ''), lease_owner, ''), $8::text, $9::text, $10::text, nullif($5::text, '')
		FROM upd
	)
	SELECT payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM upd;

-- name: MarkSucceeded: another duplicate
-- params: external_id, attempt, actor, actor_label, stated_actor, event_reason
WITH upd AS (
		UPDATE operations SET prev_status = (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
		       duplicate_external_ids = (CASE WHEN ($4::text <> '' AND $4::text <> coalesce(external_id, '') AND NOT ($4::text = ANY(duplicate_external_ids)) AND cardinality(duplicate_external_ids) < 10) THEN array_append(duplicate_external_ids, $4::text) ELSE duplicate_external_ids END),
		       duplicate_reports = (duplicate_reports + 1),
		       updated_at = coalesce($1::timestamptz, now())
		WHERE tenant = $2 AND operation_key = $3
		  AND coalesce(($5::int BETWEEN 1 AND attempt_count) AND (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('succeeded', 'failed_final') AND ($4::text <> '' AND $4::text <> coalesce(external_id, '') AND NOT ($4::text = ANY(duplicate_external_ids)) AND cardinality(duplicate_external_ids) < 10), false)
		  AND NOT coalesce(($5::int BETWEEN 1 AND attempt_count) AND (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('pending', 'in_progress', 'unknown'), false)
		  AND NOT coalesce(($5::int BETWEEN 1 AND attempt_count) AND (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('succeeded') AND ($4::text = '' OR $4::text = coalesce(external_id, '')), false)
		  AND NOT coalesce(($5::int BETWEEN 1 AND attempt_count) AND (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('failed_final') AND NOT needs_review, false)
		  AND NOT coalesce(($5::int BETWEEN 1 AND attempt_count) AND (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('succeeded', 'failed_final') AND ($4::text <> '' AND $4::text <> coalesce(external_id, '') AND NOT ($4::text = ANY(duplicate_external_ids)) AND cardinality(duplicate_external_ids) < 10) AND NOT needs_review, false)
		RETURNING *
	), ev AS (
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, coalesce($1::timestamptz, now()), prev_status, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END), $5::int, coalesce(nullif($6::text, ''), lease_owner, ''), $7::text, $8::text, $9::text, nullif($4::text, '')
		FROM upd
	)
	SELECT payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM upd;

-- name: MarkSucceeded: repeated report
-- params: attempt, external_id
WITH upd AS (
		UPDATE operations SET prev_status = (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
		       duplicate_reports = (duplicate_reports + 1),
		       updated_at = coalesce($1::timestamptz, now())
		WHERE tenant = $2 AND operation_key = $3
		  AND coalesce(($4::int BETWEEN 1 AND attempt_count) AND (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('succeeded', 'failed_final'), false)
		  AND NOT coalesce(($4::int BETWEEN 1 AND attempt_count) AND (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('pending', 'in_progress', 'unknown'), false)
		  AND NOT coalesce(($4::int BETWEEN 1 AND attempt_count) AND (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('succeeded') AND ($5::text = '' OR $5::text = coalesce(external_id, '')), false)
		  AND NOT coalesce(($4::int BETWEEN 1 AND attempt_count) AND (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('failed_final') AND NOT needs_review, false)
		  AND NOT coalesce(($4::int BETWEEN 1 AND attempt_count) AND (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('succeeded', 'failed_final') AND ($5::text <> '' AND $5::text <> coalesce(external_id, '') AND NOT ($5::text = ANY(duplicate_external_ids)) AND cardinality(duplicate_external_ids) < 10) AND NOT needs_review, false)
		  AND NOT coalesce(($4::int BETWEEN 1 AND attempt_count) AND (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('succeeded', 'failed_final') AND ($5::text <> '' AND $5::text <> coalesce(external_id, '') AND NOT ($5::text = ANY(duplicate_external_ids)) AND cardinality(duplicate_external_ids) < 10), false)
		RETURNING *
	)
	SELECT payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM upd;

-- name: MarkUnknown: mark
-- params: error_code, attempt, actor, actor_label, stated_actor, event_reason
WITH upd AS (
		UPDATE operations SET prev_status = (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
		       status = 'unknown',
		       error_code = nullif($4::text, ''),
		       lease_until = NULL,
		       unknown_since = coalesce($1::timestamptz, now()),
		       updated_at = coalesce($1::timestamptz, now())
		WHERE tenant = $2 AND operation_key = $3
		  AND coalesce(($5::int BETWEEN 1 AND attempt_count) AND (attempt_count = $5::int) AND NOT (status = 'unknown' OR (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now()))) AND (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('in_progress'), false)
		RETURNING *
	), ev AS (
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, coalesce($1::timestamptz, now()), prev_status, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END), $5::int, coalesce(nullif($6::text, ''), lease_owner, ''), $7::text, $8::text, $9::text, NULL
		FROM upd
	)
	SELECT payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM upd;

-- name: MarkFailedFinal: mark
-- params: error_code, result, attempt, actor, actor_label, stated_actor, event_reason
WITH upd AS (
		UPDATE operations SET prev_status = (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
		       status = 'failed_final',
		       error_code = nullif($4::text, ''),
		       result = $5::json,
		       lease_until = NULL,
		       unknown_since = NULL,
		       updated_at = coalesce($1::timestamptz, now())
		WHERE tenant = $2 AND operation_key = $3
		  AND coalesce(($6::int BETWEEN 1 AND attempt_count) AND (attempt_count = $6::int) AND NOT (status = 'unknown' OR (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now()))) AND (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('in_progress'), false)
		RETURNING *
	), ev AS (
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, coalesce($1::timestamptz, now()), prev_status, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END), $6::int, coalesce(nullif($7::text, ''), lease_owner, ''), $8::text, $9::text, $10::text, NULL
		FROM upd
	)
	SELECT payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM upd;

-- name: ReleaseForRetry: release
-- params: attempt, definitive_absence, release_after, actor, actor_label, stated_actor, event_reason
WITH upd AS (
		UPDATE operations SET prev_status = (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
		       status = 'pending',
		       lease_until = NULL,
		       unknown_since = NULL,
		       next_check_at = NULL,
		       updated_at = coalesce($1::timestamptz, now())
		WHERE tenant = $2 AND operation_key = $3
		  AND coalesce(($4::int BETWEEN 1 AND attempt_count) AND (attempt_count = $4::int) AND (status = 'unknown' OR (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now()))) AND NOT needs_review AND $5::boolean AND ((CASE WHEN status = 'in_progress' THEN lease_until ELSE unknown_since END) <= coalesce($1::timestamptz, now()) - make_interval(secs => $6::float8)), false)
		RETURNING *
	), ev AS (
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, coalesce($1::timestamptz, now()), prev_status, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END), attempt_count, coalesce(nullif($7::text, ''), lease_owner, ''), $8::text, $9::text, $10::text, NULL
		FROM upd
	)
	SELECT payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM upd;

-- name: RecordCheck: check
-- params: next_check_after, attempt, actor, actor_label, stated_actor, event_reason
WITH upd AS (
		UPDATE operations SET prev_status = status,
		       status = 'unknown',
		       unknown_since = (CASE WHEN status = 'in_progress' THEN lease_until ELSE unknown_since END),
		       lease_until = NULL,
		       check_count = (check_count + 1),
		       last_checked_at = coalesce($1::timestamptz, now()),
		       next_check_at = (coalesce($1::timestamptz, now()) + make_interval(secs => $4::float8)),
		       updated_at = coalesce($1::timestamptz, now())
		WHERE tenant = $2 AND operation_key = $3
		  AND coalesce(($5::int BETWEEN 1 AND attempt_count) AND (attempt_count = $5::int) AND (status = 'unknown' OR (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now()))), false)
		RETURNING *
	), ev AS (
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, coalesce($1::timestamptz, now()), prev_status, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END), attempt_count, coalesce(nullif($6::text, ''), lease_owner, ''), $7::text, $8::text, $9::text, NULL
		FROM upd
	)
	SELECT payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM upd;

-- name: Escalate: escalate
-- params: review_reason, actor, actor_label, stated_actor, event_reason
WITH upd AS (
		UPDATE operations SET prev_status = (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
		       needs_review = true,
		       review_reason = $4::text,
		       updated_at = coalesce($1::timestamptz, now())
		WHERE tenant = $2 AND operation_key = $3
		  AND coalesce((CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('pending', 'in_progress', 'unknown') AND NOT needs_review, false)
		RETURNING *
	), ev AS (
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, coalesce($1::timestamptz, now()), prev_status, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END), attempt_count, coalesce(nullif($5::text, ''), lease_owner, ''), $6::text, $7::text, $8::text, NULL
		FROM upd
	)
	SELECT payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM upd;

-- name: Resolve: as succeeded
-- params: external_id, result, resolution, actor, actor_label, stated_actor, event_reason
WITH upd AS (
		UPDATE operations SET prev_status = (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
		       status = 'succeeded',
		       external_id = $4::text,
		       result = coalesce($5::json, result),
		       needs_review = false,
		       lease_until = NULL,
		       unknown_since = NULL,
		       next_check_at = NULL,
		       updated_at = coalesce($1::timestamptz, now())
		WHERE tenant = $2 AND operation_key = $3
		  AND coalesce(($6::text = 'succeeded') AND (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('pending', 'in_progress', 'unknown') AND ((status = 'unknown' OR (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now()))) OR needs_review), false)
		RETURNING *
	), ev AS (
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, coalesce($1::timestamptz, now()), prev_status, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END), attempt_count, coalesce(nullif($7::text, ''), lease_owner, ''), $8::text, $9::text, $10::text, nullif($4::text, '')
		FROM upd
	)
	SELECT payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM upd;

-- name: Resolve: as failed_final
-- params: error_code, resolution, actor, actor_label, stated_actor, event_reason
WITH upd AS (
		UPDATE operations SET prev_status = (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
		       status = 'failed_final',
		       error_code = coalesce(nullif($4::text, ''), error_code),
		       needs_review = false,
		       lease_until = NULL,
		       unknown_since = NULL,
		       next_check_at = NULL,
		       updated_at = coalesce($1::timestamptz, now())
		WHERE tenant = $2 AND operation_key = $3
		  AND coalesce(($5::text = 'failed_final') AND (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('pending', 'in_progress', 'unknown') AND ((status = 'unknown' OR (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now()))) OR needs_review), false)
		  AND NOT coalesce(($5::text = 'succeeded') AND (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('pending', 'in_progress', 'unknown') AND ((status = 'unknown' OR (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now()))) OR needs_review), false)
		RETURNING *
	), ev AS (
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, coalesce($1::timestamptz, now()), prev_status, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END), attempt_count, coalesce(nullif($6::text, ''), lease_owner, ''), $7::text, $8::text, $9::text, NULL
		FROM upd
	)
	SELECT payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM upd;

-- name: Acknowledge: acknowledge
-- params: actor, actor_label, stated_actor, event_reason
WITH upd AS (
		UPDATE operations SET prev_status = (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
		       needs_review = false,
		       updated_at = coalesce($1::timestamptz, now())
		WHERE tenant = $2 AND operation_key = $3
		  AND coalesce((CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('succeeded', 'failed_final') AND needs_review, false)
		RETURNING *
	), ev AS (
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, coalesce($1::timestamptz, now()), prev_status, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END), attempt_count, coalesce(nullif($4::text, ''), lease_owner, ''), $5::text, $6::text, $7::text, NULL
		FROM upd
	)
	SELECT payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM upd;

-- name: SetNote: note
-- params: note, actor, actor_label, stated_actor, event_reason
WITH upd AS (
		UPDATE operations SET prev_status = (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
		       note = nullif($4::text, ''),
		       updated_at = coalesce($1::timestamptz, now())
		WHERE tenant = $2 AND operation_key = $3
		  AND true
		RETURNING *
	), ev AS (
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, coalesce($1::timestamptz, now()), prev_status, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END), attempt_count, coalesce(nullif($5::text, ''), lease_owner, ''), $6::text, $7::text, $8::text, NULL
		FROM upd
	)
	SELECT payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM upd;

-- name: Approve: first of two
-- params: actor_label, actor, reason, request_hash, stated_actor, event_reason
WITH upd AS (
		UPDATE operations SET prev_status = (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
		       approval = jsonb_set(approval, '{approvals}', coalesce(approval->'approvals', '[]'::jsonb) || jsonb_build_array(jsonb_build_object('principal', $5::text, 'at', coalesce($1::timestamptz, now()), 'reason', $6::text) || CASE WHEN $4::text = '' THEN '{}'::jsonb ELSE jsonb_build_object('label', $4::text) END)),
		       updated_at = coalesce($1::timestamptz, now())
		WHERE tenant = $2 AND operation_key = $3
		  AND coalesce((CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('awaiting_approval') AND (request_hash = $7::text) AND ((approval_deadline IS NULL OR approval_deadline > coalesce($1::timestamptz, now())) OR needs_review) AND (coalesce((approval->>'two_person')::boolean, false) AND coalesce(jsonb_array_length(approval->'approvals'), 0) = 0), false)
		RETURNING *
	), ev AS (
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, coalesce($1::timestamptz, now()), prev_status, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END), attempt_count, coalesce(nullif($5::text, ''), lease_owner, ''), $4::text, $8::text, $9::text, NULL
		FROM upd
	)
	SELECT payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM upd;

-- name: Approve: release
-- params: actor_label, actor, reason, request_hash, stated_actor, event_reason
WITH upd AS (
		UPDATE operations SET prev_status = (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
		       status = 'pending',
		       approval = jsonb_set(approval, '{approvals}', coalesce(approval->'approvals', '[]'::jsonb) || jsonb_build_array(jsonb_build_object('principal', $5::text, 'at', coalesce($1::timestamptz, now()), 'reason', $6::text) || CASE WHEN $4::text = '' THEN '{}'::jsonb ELSE jsonb_build_object('label', $4::text) END)),
		       needs_review = false,
		       updated_at = coalesce($1::timestamptz, now())
		WHERE tenant = $2 AND operation_key = $3
		  AND coalesce((CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('awaiting_approval') AND (request_hash = $7::text) AND ((approval_deadline IS NULL OR approval_deadline > coalesce($1::timestamptz, now())) OR needs_review) AND (NOT (coalesce(approval->'approvals', '[]'::jsonb) @> jsonb_build_array(jsonb_build_object('principal', $5::text)))), false)
		  AND NOT coalesce((CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('awaiting_approval') AND (request_hash = $7::text) AND ((approval_deadline IS NULL OR approval_deadline > coalesce($1::timestamptz, now())) OR needs_review) AND (coalesce((approval->>'two_person')::boolean, false) AND coalesce(jsonb_array_length(approval->'approvals'), 0) = 0), false)
		RETURNING *
	), ev AS (
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, coalesce($1::timestamptz, now()), prev_status, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END), attempt_count, coalesce(nullif($5::text, ''), lease_owner, ''), $4::text, $8::text, $9::text, NULL
		FROM upd
	)
	SELECT payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM upd;

-- name: Reject: reject
-- params: error_code, request_hash, actor, actor_label, stated_actor, event_reason
WITH upd AS (
		UPDATE operations SET prev_status = (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
		       status = 'failed_final',
		       error_code = nullif($4::text, ''),
		       needs_review = false,
		       updated_at = coalesce($1::timestamptz, now())
		WHERE tenant = $2 AND operation_key = $3
		  AND coalesce((CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('awaiting_approval') AND (request_hash = $5::text) AND ((approval_deadline IS NULL OR approval_deadline > coalesce($1::timestamptz, now())) OR needs_review), false)
		RETURNING *
	), ev AS (
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, coalesce($1::timestamptz, now()), prev_status, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END), attempt_count, coalesce(nullif($6::text, ''), lease_owner, ''), $7::text, $8::text, $9::text, NULL
		FROM upd
	)
	SELECT payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM upd;

-- name: ExpireApproval: reject
-- params: actor, actor_label, stated_actor, event_reason
WITH upd AS (
		UPDATE operations SET prev_status = (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
		       status = 'failed_final',
		       error_code = 'approval_timeout',
		       updated_at = coalesce($1::timestamptz, now())
		WHERE tenant = $2 AND operation_key = $3
		  AND coalesce((CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('awaiting_approval') AND NOT needs_review AND NOT (approval_deadline IS NULL OR approval_deadline > coalesce($1::timestamptz, now())) AND NOT (coalesce(approval->>'on_timeout', '') = 'escalate'), false)
		RETURNING *
	), ev AS (
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, coalesce($1::timestamptz, now()), prev_status, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END), attempt_count, coalesce(nullif($4::text, ''), lease_owner, ''), $5::text, $6::text, $7::text, NULL
		FROM upd
	)
	SELECT payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM upd;

-- name: ExpireApproval: escalate
-- params: review_reason, actor, actor_label, stated_actor, event_reason
WITH upd AS (
		UPDATE operations SET prev_status = (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
		       needs_review = true,
		       review_reason = $4::text,
		       updated_at = coalesce($1::timestamptz, now())
		WHERE tenant = $2 AND operation_key = $3
		  AND coalesce((CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('awaiting_approval') AND NOT needs_review AND NOT (approval_deadline IS NULL OR approval_deadline > coalesce($1::timestamptz, now())) AND (coalesce(approval->>'on_timeout', '') = 'escalate'), false)
		  AND NOT coalesce((CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('awaiting_approval') AND NOT needs_review AND NOT (approval_deadline IS NULL OR approval_deadline > coalesce($1::timestamptz, now())) AND NOT (coalesce(approval->>'on_timeout', '') = 'escalate'), false)
		RETURNING *
	), ev AS (
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, coalesce($1::timestamptz, now()), prev_status, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END), attempt_count, coalesce(nullif($5::text, ''), lease_owner, ''), $6::text, $7::text, $8::text, NULL
		FROM upd
	)
	SELECT payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM upd;

-- name: batched Register: new, claimed | new
-- params: claim, action_type, request_hash, hash_key_id, payload, refs, parent_key, budgets, worker_id, lease_seconds, actor, actor_label, stated_actor, event_reason
WITH i AS (
		SELECT * FROM unnest($2::text[], $3::text[], $4::bool[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::int[], $14::text[], $15::text[], $16::text[], $17::text[])
		    AS i(in_tenant, in_key, in_claim, in_action_type, in_request_hash, in_hash_key_id, in_payload, in_refs, in_parent_key, in_budgets, in_worker_id, in_lease_seconds, in_actor, in_actor_label, in_stated_actor, in_event_reason)
	), ins AS (
		INSERT INTO operations (tenant, operation_key, action_type, request_hash, hash_key_id, payload, refs, parent_key, budgets, created_at, updated_at, status, attempt_count, lease_owner, lease_until, attempt_started_at, first_attempt_at)
		SELECT in_tenant, in_key, in_action_type, in_request_hash, in_hash_key_id, in_payload::json, in_refs::json::jsonb, nullif(in_parent_key, ''), in_budgets::json::jsonb, coalesce($1::timestamptz, now()), coalesce($1::timestamptz, now()), CASE WHEN in_claim THEN 'in_progress' ELSE 'pending' END, CASE WHEN in_claim THEN 1 ELSE 0 END, CASE WHEN in_claim THEN in_worker_id ELSE NULL END, CASE WHEN in_claim THEN (coalesce($1::timestamptz, now()) + make_interval(secs => in_lease_seconds)) ELSE NULL END, CASE WHEN in_claim THEN coalesce($1::timestamptz, now()) ELSE NULL END, CASE WHEN in_claim THEN coalesce($1::timestamptz, now()) ELSE NULL END FROM i
		ON CONFLICT (tenant, operation_key) DO NOTHING
		RETURNING *
	), ev AS (
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, coalesce($1::timestamptz, now()), NULL, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END), attempt_count, coalesce(nullif(in_actor, ''), lease_owner, ''), in_actor_label, in_stated_actor, in_event_reason, NULL
		FROM ins JOIN i ON in_tenant = tenant AND in_key = operation_key
	), holds AS (
		INSERT INTO budget_holds (tenant, budget, scope, created_at, operation_key, amount, over_limit)
		SELECT ins.tenant, b.budget, b.scope, ins.created_at, ins.operation_key, b.amount, coalesce(b.over_limit, false)
		FROM ins, jsonb_to_recordset(ins.budgets) AS b(budget text, scope text, amount bigint, over_limit boolean)
		WHERE ins.budgets IS NOT NULL
	)
	SELECT false, payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM ins
	UNION ALL
	SELECT true, payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM operations
	WHERE (tenant, operation_key) IN (SELECT in_tenant, in_key FROM i);

-- name: batched Claim: win
-- params: worker_id, lease_seconds, retry_after_unknown, provider_dedup_window, actor, actor_label, stated_actor, event_reason
WITH i AS (
		SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::int[], $6::bool[], $7::float8[], $8::text[], $9::text[], $10::text[], $11::text[])
		    AS i(in_tenant, in_key, in_worker_id, in_lease_seconds, in_retry_after_unknown, in_provider_dedup_window, in_actor, in_actor_label, in_stated_actor, in_event_reason)
	), upd AS (
		UPDATE operations SET prev_status = (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
		       status = 'in_progress',
		       attempt_count = (attempt_count + 1),
		       lease_owner = in_worker_id,
		       lease_until = (coalesce($1::timestamptz, now()) + make_interval(secs => in_lease_seconds)),
		       unknown_since = NULL,
		       next_check_at = NULL,
		       attempt_started_at = coalesce($1::timestamptz, now()),
		       first_attempt_at = coalesce(first_attempt_at, coalesce($1::timestamptz, now())),
		       error_code = NULL,
		       updated_at = coalesce($1::timestamptz, now())
		FROM i
		WHERE tenant = in_tenant AND operation_key = in_key
		  AND coalesce(NOT needs_review AND ((CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('pending') OR (in_retry_after_unknown AND (status = 'unknown' OR (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now()))) AND (in_provider_dedup_window <= 0 OR first_attempt_at IS NULL OR first_attempt_at + make_interval(secs => in_provider_dedup_window) > coalesce($1::timestamptz, now())))), false)
		RETURNING operations.*, i.*
	), ev AS (
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, coalesce($1::timestamptz, now()), prev_status, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END), attempt_count, coalesce(nullif(in_actor, ''), lease_owner, ''), in_actor_label, in_stated_actor, in_event_reason, NULL
		FROM upd
	)
	SELECT payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM upd;

-- name: batched MarkSucceeded: confirm
-- params: external_id, result, attempt, actor, actor_label, stated_actor, event_reason
WITH i AS (
		SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::int[], $7::text[], $8::text[], $9::text[], $10::text[])
		    AS i(in_tenant, in_key, in_external_id, in_result, in_attempt, in_actor, in_actor_label, in_stated_actor, in_event_reason)
	), upd AS (
		UPDATE operations SET prev_status = (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
		       status = 'succeeded',
		       external_id = in_external_id,
		       result = in_result::json,
		       lease_until = NULL,
		       unknown_since = NULL,
		       next_check_at = NULL,
		       updated_at = coalesce($1::timestamptz, now())
		FROM i
		WHERE tenant = in_tenant AND operation_key = in_key
		  AND coalesce((in_attempt BETWEEN 1 AND attempt_count) AND (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END) IN ('pending', 'in_progress', 'unknown'), false)
		RETURNING operations.*, i.*
	), ev AS (
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, coalesce($1::timestamptz, now()), prev_status, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END), in_attempt, coalesce(nullif(in_actor, ''), lease_owner, ''), in_actor_label, in_stated_actor, in_event_reason, nullif(in_external_id, '')
		FROM upd
	)
	SELECT payload::text, result::text, coalesce(note, ''), tenant, operation_key, action_type, request_hash, (CASE WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN 'unknown' ELSE status END),
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	(CASE WHEN status = 'unknown' THEN unknown_since WHEN (status = 'in_progress' AND lease_until <= coalesce($1::timestamptz, now())) THEN lease_until END),
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, coalesce($1::timestamptz, now()) FROM upd;
