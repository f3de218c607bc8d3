package postgres

import (
	"context"

	"github.com/opjournal/opjournal/store"
)

// The three statements the batchers run (batch.go explains why). Each is
// the one-call statement of the same name in postgres.go over unnest()ed
// arrays, one element per call: the same conditions, the same columns set,
// the same event, so a batch of one behaves exactly like the one-call path.

// batched is what a batched statement gave one call.
type batched struct {
	sc scanned
	// sent is false when the call's key came earlier in the same batch: it
	// was not in the statement and takes the one-call path from the start.
	sent bool
	// existed (Register only): the row came back because the key already
	// existed, as the statement's snapshot saw it.
	existed bool
}

// opKey is an operation's identity.
type opKey = [2]string

// execBatch sends sql with args and hands every row, scanned with a leading
// "existed" flag when withExisted is set, to the call it belongs to.
func execBatch[In any](ctx context.Context, s *Store, what string, calls []*call[In, batched], sent []int,
	key func(In) opKey, withExisted bool, sql string, args ...any) error {
	byKey := make(map[opKey]*call[In, batched], len(sent))
	for _, i := range sent {
		calls[i].out.sent = true
		byKey[key(calls[i].in)] = calls[i]
	}
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return classify(what, err)
	}
	defer rows.Close()
	for rows.Next() {
		var existed bool
		var extra []any
		if withExisted {
			extra = []any{&existed}
		}
		sc, err := scanOp(rows, extra...)
		if err != nil {
			return classify(what, err)
		}
		if c := byKey[opKey{sc.op.Tenant, sc.op.Key}]; c != nil {
			c.out.sc, c.out.existed, c.ok = sc, existed, true
		}
	}
	if err := rows.Err(); err != nil {
		return classify(what, err)
	}
	return nil
}

func registerKey(p store.RegisterParams) opKey { return opKey{p.Tenant, p.Key} }
func claimKey(p store.ClaimParams) opKey       { return opKey{p.Tenant, p.Key} }
func markKey(p store.MarkSucceededParams) opKey {
	return opKey{p.Tenant, p.Key}
}

// execRegister inserts every new key (pending, or in_progress with attempt
// 1 when its call claims) with its first event, and returns the rows it
// inserted together with the rows of keys that already existed. The main
// query's snapshot never sees the rows the same statement inserts (nor a
// row committed by another transaction after the statement began, which
// ON CONFLICT still skips): such a call comes back not applied and the
// one-call path reads the row.
func (s *Store) execRegister(ctx context.Context, calls []*call[store.RegisterParams, batched]) error {
	sent := firstPerKey(calls, registerKey)
	n := len(sent)
	var (
		tenants, keys, actions, hashes, payloads, statuses = make([]string, n), make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n)
		attempts, leases = make([]int32, n), make([]int32, n)
		owners           = make([]*string, n)
	)
	for j, i := range sent {
		p := calls[i].in
		tenants[j], keys[j], actions[j], hashes[j], payloads[j] = p.Tenant, p.Key, p.Action, p.RequestHash, string(p.Payload)
		statuses[j] = "pending"
		if p.Claim != nil {
			statuses[j], attempts[j], owners[j], leases[j] = "in_progress", 1, &p.Claim.WorkerID, int32(p.Claim.LeaseSeconds)
		}
	}
	return execBatch(ctx, s, "register", calls, sent, registerKey, true, `
		WITH i AS (
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
			                     $7::int[], $8::text[], $9::int[])
			    AS i(in_tenant, in_key, in_action, in_hash, in_payload, in_status, in_attempt, in_owner, in_lease)
		), ins AS (
			INSERT INTO operations (tenant, operation_key, action_type, request_hash, payload, status,
			                        attempt_count, lease_owner, lease_until)
			SELECT in_tenant, in_key, in_action, in_hash, in_payload::json, in_status, in_attempt, in_owner,
			       CASE WHEN in_status = 'in_progress' THEN now() + make_interval(secs => in_lease) END
			FROM i
			ON CONFLICT (tenant, operation_key) DO NOTHING
			RETURNING *
		), ev AS (
			INSERT INTO operation_events (tenant, operation_key, from_status, to_status, attempt, actor, reason)
			SELECT tenant, operation_key, NULL, status, attempt_count, coalesce(lease_owner, ''),
			       CASE WHEN status = 'in_progress' THEN 'registered and claimed' ELSE 'registered' END
			FROM ins
		)
		SELECT false, `+columns+` FROM ins
		UNION ALL
		SELECT true, `+columns+` FROM operations
		WHERE (tenant, operation_key) IN (SELECT in_tenant, in_key FROM i)`,
		tenants, keys, actions, hashes, payloads, statuses, attempts, owners, leases)
}

// execClaim is claim's conditional UPDATE for many keys: a row comes back
// for each call that now holds the lease.
func (s *Store) execClaim(ctx context.Context, calls []*call[store.ClaimParams, batched]) error {
	sent := firstPerKey(calls, claimKey)
	n := len(sent)
	tenants, keys, workers := make([]string, n), make([]string, n), make([]string, n)
	leases, retry := make([]int32, n), make([]bool, n)
	for j, i := range sent {
		p := calls[i].in
		tenants[j], keys[j], workers[j], leases[j], retry[j] = p.Tenant, p.Key, p.WorkerID, int32(p.LeaseSeconds), p.AllowRetryAfterUnknown
	}
	return execBatch(ctx, s, "claim", calls, sent, claimKey, false, `
		WITH i AS (
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::bool[])
			    AS i(in_tenant, in_key, in_worker, in_lease, in_retry)
		), upd AS (
			UPDATE operations SET prev_status = `+effectiveStatus+`,
			       status = 'in_progress', attempt_count = attempt_count + 1, lease_owner = in_worker,
			       lease_until = now() + make_interval(secs => in_lease), unknown_since = NULL, next_check_at = NULL,
			       updated_at = now()
			FROM i
			WHERE tenant = in_tenant AND operation_key = in_key
			  AND NOT needs_review AND (status = 'pending' OR (in_retry AND `+isUnknown+`))
			RETURNING operations.*
		), ev AS (
			INSERT INTO operation_events (tenant, operation_key, from_status, to_status, attempt, actor, reason)
			SELECT tenant, operation_key, prev_status, `+effectiveStatus+`, attempt_count, lease_owner, 'claimed'
			FROM upd
		)
		SELECT `+columns+` FROM upd`,
		tenants, keys, workers, leases, retry)
}

// execMarkSucceeded is MarkSucceeded's conditional UPDATE for many keys: a
// row comes back for each call whose attempt was issued and whose
// operation was not yet terminal.
func (s *Store) execMarkSucceeded(ctx context.Context, calls []*call[store.MarkSucceededParams, batched]) error {
	sent := firstPerKey(calls, markKey)
	n := len(sent)
	tenants, keys, exts, actors := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	attempts, results := make([]int32, n), make([]*string, n)
	for j, i := range sent {
		p := calls[i].in
		tenants[j], keys[j], attempts[j], exts[j], actors[j] = p.Tenant, p.Key, int32(p.Attempt), p.ExternalID, p.Actor
		if p.Result != nil {
			r := string(p.Result)
			results[j] = &r
		}
	}
	return execBatch(ctx, s, "mark succeeded", calls, sent, markKey, false, `
		WITH i AS (
			SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[])
			    AS i(in_tenant, in_key, in_attempt, in_ext, in_result, in_actor)
		), upd AS (
			UPDATE operations SET prev_status = `+effectiveStatus+`,
			       status = 'succeeded', external_id = in_ext, result = in_result::json, lease_until = NULL,
			       unknown_since = NULL, next_check_at = NULL, updated_at = now()
			FROM i
			WHERE tenant = in_tenant AND operation_key = in_key
			  AND status IN ('pending', 'in_progress', 'unknown') AND in_attempt BETWEEN 1 AND attempt_count
			RETURNING operations.*, in_attempt, in_actor
		), ev AS (
			INSERT INTO operation_events (tenant, operation_key, from_status, to_status, attempt, actor, reason, external_id)
			SELECT tenant, operation_key, prev_status, `+effectiveStatus+`, in_attempt,
			       coalesce(nullif(in_actor, ''), lease_owner, ''), 'effect confirmed', external_id
			FROM upd
		)
		SELECT `+columns+` FROM upd`,
		tenants, keys, attempts, exts, results, actors)
}
