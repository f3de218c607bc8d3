package postgres

import (
	"cmp"
	"context"
	"errors"
	"slices"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/opjournal/opjournal/protocol"
)

// The three statements the batchers run (batch.go explains why): the first
// rule of Register (both of its insert rules), of Claim and of
// MarkSucceeded, rendered over unnest()ed arrays (render.go), one element
// per call: the same guard, the same sets, the same event, so a batch of
// one behaves exactly like the one-call path.

// batched is what a batched statement gave one call.
type batched struct {
	sc scanned
	// existed (Register only): the row came back because the key already
	// existed, as the statement's snapshot saw it.
	existed bool
}

// opKey is an operation's identity.
type opKey = [2]string

// batchArgs builds the arrays of a batched statement: tenants, keys, then
// one typed array per parameter, from the calls in sent. ruleOf gives the
// rule each call's computed parameters (its event's reason) come from.
// The arrays are filled through the typed accessors, without boxing each
// value: this runs for every call of the hot path.
func batchArgs(clockArg any, st *statement, sent []*protocol.Command, tenants []string, ruleOf func(*protocol.Command) *protocol.Rule) []any {
	n := len(sent)
	keys := make([]string, n)
	for i, c := range sent {
		keys[i] = c.Key
	}
	args := make([]any, 0, 3+len(st.params))
	args = append(args, clockArg, tenants, keys)
	for _, p := range st.params {
		switch p.Type() {
		case protocol.TypeInt:
			col := make([]int32, n)
			for i, c := range sent {
				col[i] = int32(c.Int(p))
			}
			args = append(args, col)
		case protocol.TypeBool:
			col := make([]bool, n)
			for i, c := range sent {
				col[i] = c.Bool(p)
			}
			args = append(args, col)
		case protocol.TypeDuration:
			col := make([]float64, n)
			for i, c := range sent {
				col[i] = c.Duration(p).Seconds()
			}
			args = append(args, col)
		case protocol.TypeJSON:
			col := make([]*string, n)
			for i, c := range sent {
				if raw := c.JSON(p); raw != nil {
					s := string(raw)
					col[i] = &s
				}
			}
			args = append(args, col)
		default:
			col := make([]string, n)
			for i, c := range sent {
				col[i] = c.Text(p, ruleOf(c), nil)
			}
			args = append(args, col)
		}
	}
	return args
}

// execBatch sends st over the calls whose key comes first in the batch
// and hands every row, scanned with a leading "existed" flag when
// withExisted is set, to the call it belongs to.
func execBatch(ctx context.Context, s *Store, what string, st *statement, calls []*call[applyCall, batched],
	ruleOf func(*protocol.Command) *protocol.Rule, withExisted bool) error {
	sent := firstPerKey(calls, func(in applyCall) opKey { return opKey{in.tenant, in.c.Key} })
	// In key order: two servers' batches that share keys then lock their
	// rows in the same order, instead of deadlocking on each other (each
	// holding a key the other's statement waits for).
	slices.SortFunc(sent, func(a, b int) int {
		return cmp.Or(cmp.Compare(calls[a].in.tenant, calls[b].in.tenant), cmp.Compare(calls[a].in.c.Key, calls[b].in.c.Key))
	})
	byKey := make(map[opKey]*call[applyCall, batched], len(sent))
	cmds := make([]*protocol.Command, len(sent))
	tenants := make([]string, len(sent))
	for j, i := range sent {
		t, c := calls[i].in.tenant, calls[i].in.c
		cmds[j], tenants[j] = c, t
		byKey[opKey{t, c.Key}] = calls[i]
	}
	args := batchArgs(s.clockArg(), st, cmds, tenants, ruleOf)
	for try := 0; ; try++ {
		read, err := s.readBatch(ctx, st, args, byKey, withExisted)
		// A deadlock's victim was rolled back whole (a data-modifying
		// statement returns no row before it completes): sending it
		// again is safe.
		if read == 0 && isDeadlock(err) && try < maxDeadlockRetries {
			continue
		}
		if err != nil {
			return classify(what, err)
		}
		return nil
	}
}

// readBatch runs a batched statement and hands each row to its call; it
// returns how many rows it read.
func (s *Store) readBatch(ctx context.Context, st *statement, args []any, byKey map[opKey]*call[applyCall, batched], withExisted bool) (int, error) {
	rows, err := s.pool.Query(ctx, st.sql, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	read := 0
	for rows.Next() {
		read++
		var existed bool
		var extra []any
		if withExisted {
			extra = []any{&existed}
		}
		sc, err := scanOp(rows, extra...)
		if err != nil {
			return read, err
		}
		c := byKey[opKey{sc.op.Tenant, sc.op.Key}]
		if c == nil || (c.ok && !c.out.existed && existed) {
			// Register: the row this statement inserted wins over the one
			// its snapshot still showed (a purge deleted that one meanwhile).
			continue
		}
		c.out.sc, c.out.existed, c.ok = sc, existed, true
	}
	return read, rows.Err()
}

// maxDeadlockRetries bounds how often a batched statement the database
// chose as a deadlock's victim is sent again.
const maxDeadlockRetries = 2

// isDeadlock reports whether err is PostgreSQL's deadlock or
// serialization failure (the transaction was rolled back).
func isDeadlock(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

func fixedRule(r *protocol.Rule) func(*protocol.Command) *protocol.Rule {
	return func(*protocol.Command) *protocol.Rule { return r }
}

// execRegister inserts every new key (pending, or in_progress with attempt
// 1 when its call claims) with its first event, and returns the rows it
// inserted together with the rows of keys that already existed. The main
// query's snapshot never sees the rows the same statement inserts (nor a
// row committed by another transaction after the statement began, which
// ON CONFLICT still skips): such a call comes back not applied and the
// one-call path reads the row.
func (s *Store) execRegister(ctx context.Context, calls []*call[applyCall, batched]) error {
	return execBatch(ctx, s, "register", batchReg, calls, insertRule, true)
}

// execClaim is claim's conditional UPDATE for many keys: a row comes back
// for each call that now holds the lease.
func (s *Store) execClaim(ctx context.Context, calls []*call[applyCall, batched]) error {
	return execBatch(ctx, s, "claim", batchClaim, calls, fixedRule(batchClaim.rule), false)
}

// execMarkSucceeded is MarkSucceeded's conditional UPDATE for many keys: a
// row comes back for each call whose attempt was issued and whose
// operation was not yet terminal.
func (s *Store) execMarkSucceeded(ctx context.Context, calls []*call[applyCall, batched]) error {
	return execBatch(ctx, s, "mark succeeded", batchMark, calls, fixedRule(batchMark.rule), false)
}
